//! Model calls as they happen: each one in the ledger (`model_calls`), in its
//! run's usage and in the day's sums (`usage_daily`), in one transaction
//! (see the `model_calls` migration); and the day sums read back.

use diesel::prelude::*;

use super::connection::AnyConnection;
use super::runs::{load_run, save_run};
use super::schema::{model_calls, usage_daily};
use super::tasks::{lock_task, save_task, save_task_unchecked};
use super::{Db, Store, StoreError};
use crate::domain::policy::WorkspaceSpend;
use crate::domain::{
    CostSource, DayUsage, Event, ModelCall, Name, PricedCall, Run, RunId, Task, Usage, WorkspaceId,
    day_of, month_start, now_ms,
};

/// A row of the ledger: a model call (or a correction) as recorded, which
/// a call recorded when it was sent is answered through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallId(i64);

impl Store {
    /// Records one model call (or a correction) of run `run_id`, on
    /// `provider`: in the ledger, in the run's usage and in the day's sums,
    /// in one transaction. Whatever state the run is in: a call that was
    /// made was paid for. A call recorded when it is sent (`answered`
    /// false) holds an estimate until [`Store::answer_model_call`] puts its
    /// answer in its place; a crash before then leaves it counted. Only an
    /// answer is checked against the budget: an estimate alone stops no run,
    /// but counts in every check after it.
    pub async fn record_model_call(
        &self,
        run_id: RunId,
        provider: Name,
        row: PricedCall,
        answered: bool,
    ) -> Result<(Run, Task, Vec<Event>, CallId), StoreError> {
        self.write_events(move |conn| {
            let task_id = load_run(conn, run_id)?.task_id;
            let before_task = lock_task(conn, task_id)?;
            let before_run = load_run(conn, run_id)?;
            let mut run = before_run.clone();
            run.usage.record(&row);
            let run = save_run(conn, &before_run, &run)?;
            let at_ms = now_ms();
            let id = insert_call(
                conn,
                &before_task,
                &run,
                provider.as_str(),
                &row,
                at_ms,
                answered,
            )?;
            let day = DayKey {
                workspace: before_task.workspace_id,
                day: day_of(at_ms),
                agent: run.agent.as_str(),
                provider: provider.as_str(),
                model: &row.call.model,
            };
            add_to_day(conn, &day, &Delta::of(&row))?;
            let mut task = before_task.clone();
            task.usage.record(&row);
            let events = if answered {
                save_task(conn, &before_task, &mut task, Vec::new())?
            } else {
                save_task_unchecked(conn, &before_task, &mut task)?
            };
            Ok((run, task, events, id))
        })
        .await
    }

    /// Puts the answer of a call recorded when it was sent in its place:
    /// the ledger row, the run's and task's usage and the day's sums lose
    /// the estimate and gain the answer (none: the call was refused unbilled
    /// and is taken out), in one transaction, the budget checked against the
    /// answer. A call answered already is left as it is.
    pub async fn answer_model_call(
        &self,
        id: CallId,
        answer: Option<PricedCall>,
    ) -> Result<(Run, Task, Vec<Event>), StoreError> {
        self.write_events(move |conn| {
            let sent: SentRow = model_calls::table
                .find(id.0)
                .select(SentRow::as_select())
                .first(conn)
                .db()?;
            let run_id =
                RunId::parse(&sent.run_id).map_err(|e| StoreError::Database(e.to_string()))?;
            let task_id = load_run(conn, run_id)?.task_id;
            let before_task = lock_task(conn, task_id)?;
            let before_run = load_run(conn, run_id)?;
            if sent.answered != 0 {
                return Ok((before_run, before_task, Vec::new()));
            }
            let estimate = sent.priced();
            let mut run = before_run.clone();
            let mut task = before_task.clone();
            for usage in [&mut run.usage, &mut task.usage] {
                usage.unrecord(&estimate);
                if let Some(row) = &answer {
                    usage.record(row);
                }
            }
            let run = save_run(conn, &before_run, &run)?;
            let row = model_calls::table.find(id.0);
            let mut delta = Delta::default().minus(&Delta::of(&estimate));
            if let Some(answer) = &answer {
                let call = &answer.call;
                diesel::update(row)
                    .set((
                        model_calls::input_tokens.eq(db_count(call.input_tokens)),
                        model_calls::output_tokens.eq(db_count(call.output_tokens)),
                        model_calls::cache_read_tokens.eq(db_count(call.cache_read_tokens)),
                        model_calls::cache_write_tokens.eq(db_count(call.cache_write_tokens)),
                        model_calls::cost_pico_usd.eq(answer.cost_pico_usd),
                        model_calls::cost_source.eq(answer.source.as_str()),
                        model_calls::unpriced_calls.eq(answer.unpriced()),
                        model_calls::estimated.eq(answer.estimated()),
                        model_calls::answered.eq(1),
                    ))
                    .execute(conn)
                    .db()?;
                delta = Delta::of(answer).minus(&Delta::of(&estimate));
            } else {
                diesel::delete(row).execute(conn).db()?;
            }
            // The sums of the day the call was sent, under its model then.
            let day = DayKey {
                workspace: before_task.workspace_id,
                day: day_of(sent.at_ms),
                agent: run.agent.as_str(),
                provider: &sent.provider,
                model: &sent.model,
            };
            add_to_day(conn, &day, &delta)?;
            let events = save_task(conn, &before_task, &mut task, Vec::new())?;
            Ok((run, task, events))
        })
        .await
    }

    /// The day sums of `workspace` (all when None) from day `from` up to,
    /// not including, day `to`.
    pub async fn usage_days(
        &self,
        workspace: Option<WorkspaceId>,
        from: i64,
        to: i64,
    ) -> Result<Vec<DayUsage>, StoreError> {
        self.with_conn(move |conn| {
            let mut query = usage_daily::table
                .filter(usage_daily::day.ge(from))
                .filter(usage_daily::day.lt(to))
                .into_boxed();
            if let Some(workspace) = workspace {
                query = query.filter(usage_daily::workspace_id.eq(workspace.to_string()));
            }
            let rows: Vec<DayRow> = query.select(DayRow::as_select()).load(conn).db()?;
            rows.into_iter().map(DayRow::into_domain).collect()
        })
        .await
    }
}

/// What `workspace`'s tasks have spent this UTC day and this UTC month, against
/// its limits; with `lock`, a workspace with spending limits has its row
/// locked to the commit first, so that two calls cannot both pass a limit
/// they reach together (a workspace without limits locks nothing).
pub(super) fn workspace_spend(
    conn: &mut AnyConnection,
    workspace: WorkspaceId,
    lock: bool,
) -> Result<WorkspaceSpend, StoreError> {
    use super::schema::workspaces;
    let unlocked = super::workspaces::load_workspace(conn, workspace)?.limits;
    let limits = if lock && unlocked.has_spending_limits() {
        let row: Option<super::rows::WorkspaceRow> = super::connection::first_locked!(
            &mut *conn,
            workspaces::table
                .find(workspace.to_string())
                .select(super::rows::WorkspaceRow::as_select())
        )
        .db()?;
        row.ok_or_else(|| StoreError::not_found("workspace", workspace))?
            .into_domain()?
            .limits
    } else {
        unlocked
    };
    let today = day_of(now_ms());
    if !limits.has_spending_limits() {
        return Ok(WorkspaceSpend {
            limits,
            today: 0,
            this_month: 0,
            day: today,
        });
    }
    let days: Vec<(i64, i64)> = usage_daily::table
        .filter(usage_daily::workspace_id.eq(workspace.to_string()))
        .filter(usage_daily::day.ge(month_start(today)))
        .filter(usage_daily::day.le(today))
        .select((usage_daily::day, usage_daily::cost_pico_usd))
        .load(conn)
        .db()?;
    let sum = |from: i64| {
        let total: i64 = days
            .iter()
            .filter(|(d, _)| *d >= from)
            .map(|(_, c)| c)
            .sum();
        u64::try_from(total).unwrap_or(0)
    };
    Ok(WorkspaceSpend {
        limits,
        today: sum(today),
        this_month: sum(month_start(today)),
        day: today,
    })
}

impl Store {
    /// What `workspace`'s tasks have spent this UTC day and month, against its limits.
    pub async fn spend_of(&self, workspace: WorkspaceId) -> Result<WorkspaceSpend, StoreError> {
        self.with_conn(move |conn| workspace_spend(conn, workspace, false))
            .await
    }
}

fn db_count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn insert_call(
    conn: &mut AnyConnection,
    task: &Task,
    run: &Run,
    provider: &str,
    row: &PricedCall,
    at_ms: i64,
    answered: bool,
) -> Result<CallId, StoreError> {
    let call = &row.call;
    diesel::insert_into(model_calls::table)
        .values((
            model_calls::at_ms.eq(at_ms),
            model_calls::workspace_id.eq(task.workspace_id.to_string()),
            model_calls::task_id.eq(task.id.to_string()),
            model_calls::run_id.eq(run.id.to_string()),
            model_calls::agent.eq(run.agent.as_str()),
            model_calls::provider.eq(provider),
            model_calls::model.eq(&call.model),
            model_calls::input_tokens.eq(db_count(call.input_tokens)),
            model_calls::output_tokens.eq(db_count(call.output_tokens)),
            model_calls::cache_read_tokens.eq(db_count(call.cache_read_tokens)),
            model_calls::cache_write_tokens.eq(db_count(call.cache_write_tokens)),
            model_calls::cost_pico_usd.eq(row.cost_pico_usd),
            model_calls::cost_source.eq(row.source.as_str()),
            model_calls::calls.eq(row.calls()),
            model_calls::unpriced_calls.eq(row.unpriced()),
            model_calls::estimated.eq(row.estimated()),
            model_calls::answered.eq(i64::from(answered)),
        ))
        .execute(conn)
        .db()?;
    // The run's newest row is this one: its task is locked to the commit.
    let id: Option<i64> = model_calls::table
        .filter(model_calls::run_id.eq(run.id.to_string()))
        .select(diesel::dsl::max(model_calls::id))
        .first(conn)
        .db()?;
    id.map(CallId)
        .ok_or_else(|| StoreError::Database("a model call was recorded but cannot be found".into()))
}

/// A call recorded when it was sent, as the ledger holds it.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = model_calls)]
struct SentRow {
    at_ms: i64,
    run_id: String,
    provider: String,
    model: String,
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cache_write_tokens: i64,
    cost_pico_usd: Option<i64>,
    cost_source: String,
    estimated: i64,
    answered: i64,
}

impl SentRow {
    /// The row as the priced call it was recorded from.
    fn priced(&self) -> PricedCall {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        PricedCall {
            call: ModelCall {
                model: self.model.clone(),
                input_tokens: count(self.input_tokens),
                output_tokens: count(self.output_tokens),
                cache_read_tokens: count(self.cache_read_tokens),
                cache_write_tokens: count(self.cache_write_tokens),
                reported_pico_usd: None,
                estimated: self.estimated != 0,
            },
            cost_pico_usd: self.cost_pico_usd,
            source: CostSource::parse(&self.cost_source),
            covers_unpriced: 0,
        }
    }
}

/// Which day sums a change goes to.
struct DayKey<'a> {
    workspace: WorkspaceId,
    day: i64,
    agent: &'a str,
    provider: &'a str,
    model: &'a str,
}

/// What a row adds to its day's sums (negative when an answer replaces an
/// estimate that was larger).
#[derive(Debug, Clone, Copy, Default)]
struct Delta([i64; 8]);

impl Delta {
    fn of(row: &PricedCall) -> Self {
        let call = &row.call;
        Self([
            row.calls(),
            db_count(call.input_tokens),
            db_count(call.output_tokens),
            db_count(call.cache_read_tokens),
            db_count(call.cache_write_tokens),
            row.cost_pico_usd.unwrap_or(0),
            row.unpriced(),
            row.estimated(),
        ])
    }

    fn minus(self, other: &Self) -> Self {
        let mut out = self.0;
        for (a, b) in out.iter_mut().zip(other.0) {
            *a = a.saturating_sub(b);
        }
        Self(out)
    }
}

/// Adds `delta` to a day's sums: an insert, or an update of the row another
/// call made first (the same statement on both backends; a concurrent first
/// call of the day cannot make a second row).
fn add_to_day(conn: &mut AnyConnection, key: &DayKey<'_>, delta: &Delta) -> Result<(), StoreError> {
    use diesel::sql_types::{BigInt, Text};
    const COLUMNS: &str = "workspace_id, day, agent, provider, model, calls, input_tokens, \
        output_tokens, cache_read_tokens, cache_write_tokens, cost_pico_usd, unpriced_calls, \
        estimated_calls";
    const ADD: &str = "calls = usage_daily.calls + excluded.calls, \
        input_tokens = usage_daily.input_tokens + excluded.input_tokens, \
        output_tokens = usage_daily.output_tokens + excluded.output_tokens, \
        cache_read_tokens = usage_daily.cache_read_tokens + excluded.cache_read_tokens, \
        cache_write_tokens = usage_daily.cache_write_tokens + excluded.cache_write_tokens, \
        cost_pico_usd = usage_daily.cost_pico_usd + excluded.cost_pico_usd, \
        unpriced_calls = usage_daily.unpriced_calls + excluded.unpriced_calls, \
        estimated_calls = usage_daily.estimated_calls + excluded.estimated_calls";
    let placeholders = |pg: bool| {
        (1..=13)
            .map(|i| if pg { format!("${i}") } else { "?".to_owned() })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sql = |pg: bool| {
        format!(
            "INSERT INTO usage_daily ({COLUMNS}) VALUES ({}) \
             ON CONFLICT (workspace_id, day, agent, provider, model) DO UPDATE SET {ADD}",
            placeholders(pg)
        )
    };
    let [
        calls,
        input,
        output,
        cache_read,
        cache_write,
        cost,
        unpriced,
        estimated,
    ] = delta.0;
    macro_rules! bound {
        ($sql:expr) => {
            diesel::sql_query($sql)
                .bind::<Text, _>(key.workspace.to_string())
                .bind::<BigInt, _>(key.day)
                .bind::<Text, _>(key.agent)
                .bind::<Text, _>(key.provider)
                .bind::<Text, _>(key.model)
                .bind::<BigInt, _>(calls)
                .bind::<BigInt, _>(input)
                .bind::<BigInt, _>(output)
                .bind::<BigInt, _>(cache_read)
                .bind::<BigInt, _>(cache_write)
                .bind::<BigInt, _>(cost)
                .bind::<BigInt, _>(unpriced)
                .bind::<BigInt, _>(estimated)
        };
    }
    match conn {
        AnyConnection::Sqlite(c) => bound!(sql(false)).execute(c).db()?,
        AnyConnection::Pg(c) => bound!(sql(true)).execute(c).db()?,
    };
    Ok(())
}

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = usage_daily)]
struct DayRow {
    workspace_id: String,
    day: i64,
    agent: String,
    provider: String,
    model: String,
    calls: i64,
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cache_write_tokens: i64,
    cost_pico_usd: i64,
    unpriced_calls: i64,
    estimated_calls: i64,
}

impl DayRow {
    fn into_domain(self) -> Result<DayUsage, StoreError> {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(DayUsage {
            workspace_id: WorkspaceId::parse(&self.workspace_id)
                .map_err(|e| StoreError::Database(e.to_string()))?,
            day: self.day,
            agent: self.agent,
            provider: self.provider,
            model: self.model,
            usage: Usage {
                input_tokens: count(self.input_tokens),
                output_tokens: count(self.output_tokens),
                cache_read_tokens: count(self.cache_read_tokens),
                cache_write_tokens: count(self.cache_write_tokens),
                cost_pico_usd: self.cost_pico_usd,
                model_calls: count(self.calls),
                unpriced_calls: count(self.unpriced_calls),
                estimated_calls: count(self.estimated_calls),
            },
        })
    }
}

impl super::Committed for (Run, Task, Vec<Event>, CallId) {
    fn committed(&self) -> &[Event] {
        &self.2
    }
}
