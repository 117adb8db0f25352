//! Model calls as they happen: each one in the ledger (`model_calls`), in its
//! run's usage and in the day's sums (`usage_daily`), in one transaction
//! (see the `model_calls` migration); and the day sums read back.

use diesel::prelude::*;

use super::connection::AnyConnection;
use super::runs::{load_run, save_run};
use super::schema::{model_calls, usage_daily};
use super::tasks::{lock_task, save_task};
use super::{Db, Store, StoreError};
use crate::domain::policy::WorkspaceSpend;
use crate::domain::{
    DayUsage, Event, Name, PricedCall, Run, RunId, Task, Usage, WorkspaceId, day_of, month_start,
    now_ms,
};

impl Store {
    /// Records one model call (or a correction) of run `run_id`, on
    /// `provider`: in the ledger, in the run's usage and in the day's sums,
    /// in one transaction. Whatever state the run is in: a call that was
    /// made was paid for.
    pub async fn record_model_call(
        &self,
        run_id: RunId,
        provider: Name,
        row: PricedCall,
    ) -> Result<(Run, Task, Vec<Event>), StoreError> {
        self.write_events(move |conn| {
            let task_id = load_run(conn, run_id)?.task_id;
            let before_task = lock_task(conn, task_id)?;
            let before_run = load_run(conn, run_id)?;
            let mut run = before_run.clone();
            run.usage.record(&row);
            let run = save_run(conn, &before_run, &run)?;
            let at_ms = now_ms();
            insert_call(conn, &before_task, &run, provider.as_str(), &row, at_ms)?;
            add_to_day(conn, &before_task, &run, provider.as_str(), &row, at_ms)?;
            let mut task = before_task.clone();
            task.usage.record(&row);
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
    if !limits.has_spending_limits() {
        return Ok(WorkspaceSpend {
            limits,
            today: 0,
            this_month: 0,
        });
    }
    let today = day_of(now_ms());
    let days: Vec<(i64, i64)> = usage_daily::table
        .filter(usage_daily::workspace_id.eq(workspace.to_string()))
        .filter(usage_daily::day.ge(month_start(today)))
        .filter(usage_daily::day.le(today))
        .select((usage_daily::day, usage_daily::cost_micro_usd))
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
) -> Result<(), StoreError> {
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
            model_calls::cost_micro_usd.eq(row.cost_micro_usd),
            model_calls::cost_source.eq(row.source.as_str()),
            model_calls::calls.eq(row.calls()),
            model_calls::unpriced_calls.eq(row.unpriced()),
        ))
        .execute(conn)
        .db()?;
    Ok(())
}

/// Adds `row` to its day's sums: an insert, or an update of the row another
/// call made first (the same statement on both backends; a concurrent first
/// call of the day cannot make a second row).
fn add_to_day(
    conn: &mut AnyConnection,
    task: &Task,
    run: &Run,
    provider: &str,
    row: &PricedCall,
    at_ms: i64,
) -> Result<(), StoreError> {
    use diesel::sql_types::{BigInt, Text};
    const COLUMNS: &str = "workspace_id, day, agent, provider, model, calls, input_tokens, \
        output_tokens, cache_read_tokens, cache_write_tokens, cost_micro_usd, unpriced_calls";
    const ADD: &str = "calls = usage_daily.calls + excluded.calls, \
        input_tokens = usage_daily.input_tokens + excluded.input_tokens, \
        output_tokens = usage_daily.output_tokens + excluded.output_tokens, \
        cache_read_tokens = usage_daily.cache_read_tokens + excluded.cache_read_tokens, \
        cache_write_tokens = usage_daily.cache_write_tokens + excluded.cache_write_tokens, \
        cost_micro_usd = usage_daily.cost_micro_usd + excluded.cost_micro_usd, \
        unpriced_calls = usage_daily.unpriced_calls + excluded.unpriced_calls";
    let call = &row.call;
    let placeholders = |pg: bool| {
        (1..=12)
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
    macro_rules! bound {
        ($sql:expr) => {
            diesel::sql_query($sql)
                .bind::<Text, _>(task.workspace_id.to_string())
                .bind::<BigInt, _>(day_of(at_ms))
                .bind::<Text, _>(run.agent.as_str())
                .bind::<Text, _>(provider)
                .bind::<Text, _>(&call.model)
                .bind::<BigInt, _>(row.calls())
                .bind::<BigInt, _>(db_count(call.input_tokens))
                .bind::<BigInt, _>(db_count(call.output_tokens))
                .bind::<BigInt, _>(db_count(call.cache_read_tokens))
                .bind::<BigInt, _>(db_count(call.cache_write_tokens))
                .bind::<BigInt, _>(row.cost_micro_usd.unwrap_or(0))
                .bind::<BigInt, _>(row.unpriced())
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
    cost_micro_usd: i64,
    unpriced_calls: i64,
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
                cost_micro_usd: self.cost_micro_usd,
                model_calls: count(self.calls),
                unpriced_calls: count(self.unpriced_calls),
            },
        })
    }
}
