//! Runs: one agent execution each. A run changes only together with its task, in
//! one transaction that holds the task's lock, so run state, task state and
//! history never disagree.

use diesel::prelude::*;
use serde_json::json;

use super::connection::AnyConnection;
use super::rows::RunRow;
use super::schema::{run_messages, runs, tasks};
use super::tasks::{EventDraft, lock_task, save_task};
use super::{Db, Store, StoreError};
use crate::domain::{
    DomainError, Event, EventKind, Name, Run, RunId, RunState, Task, TaskId, TokenBinding, now_ms,
};

/// A run to open.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub task_id: TaskId,
    pub agent: Name,
    /// The run that hands off to this one.
    pub parent: Option<RunId>,
    pub tools: Vec<String>,
    /// Its agent's approval rules and its workspace's (its parent's come
    /// with it when it opens).
    pub rules: crate::domain::approval::RunRules,
    /// Set for a run started by Handoff: the prompt it is given.
    pub handoff_prompt: Option<String>,
    /// What its token will be minted for (None: a run that gets no token).
    pub token: Option<TokenBinding>,
    /// Set when this replica drives the run (a CLI process or an API loop):
    /// how long it may take. The run is leased to this replica from the
    /// start. None: its caller drives it (OpenRun).
    pub drive: Option<std::time::Duration>,
}

impl Store {
    /// Opens a run of `agent` on a task (state spawning) and records `run_opened`
    /// in the same transaction. A `parent` must be a run of the same task.
    pub async fn create_run(
        &self,
        task_id: TaskId,
        agent: Name,
        parent: Option<RunId>,
        tools: Vec<String>,
    ) -> Result<(Run, Vec<Event>), StoreError> {
        let new = NewRun {
            task_id,
            agent,
            parent,
            tools,
            rules: crate::domain::approval::RunRules::default(),
            handoff_prompt: None,
            token: None,
            drive: None,
        };
        self.create_run_with(new, |_| Ok(Vec::new()))
            .await
            .map(|(run, _task, events)| (run, events))
    }

    /// [`Store::open_run`] with a change to the task alone: `change` runs first
    /// (e.g. moving the task to active) and names its events; when it fails
    /// nothing is written.
    pub async fn create_run_with<F>(
        &self,
        new: NewRun,
        change: F,
    ) -> Result<(Run, Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Task) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        self.open_run(new, |task, _run, _parent| change(task)).await
    }

    /// Opens a run (spawning) in one transaction with what `change` does to the
    /// task, the new run and its parent (e.g. the parent starts waiting for a
    /// handoff, or the run goes active at once). `run_opened` comes first, then
    /// `change`'s events. A handoff run
    /// (`handoff_prompt` set) gets the task's next handoff number. A parent must
    /// be a run of the same task. When anything fails nothing is written.
    pub async fn open_run<F>(
        &self,
        new: NewRun,
        change: F,
    ) -> Result<(Run, Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Task, &mut Run, Option<&mut Run>) -> Result<Vec<EventDraft>, DomainError>
            + Send
            + 'static,
    {
        let lease_end = self.lease_end();
        let replica = self.replica.id.clone();
        self.write_events(move |conn| {
            let before = lock_task(conn, new.task_id)?;
            let mut task = before.clone();
            let parent_before = parent_of(conn, &new)?;
            let handoff_index = next_handoff_index(conn, &new)?;
            let mut run = new.run(handoff_index, replica, lease_end, parent_before.as_ref());
            let mut parent = parent_before.clone();
            let opened = json!({
                "run_id": run.id,
                "agent": run.agent,
                "parent_run_id": run.parent,
            });
            let mut drafts = vec![(EventKind::RunOpened, opened)];
            drafts.extend(change(&mut task, &mut run, parent.as_mut())?);
            let mut row = RunRow::from_domain(&run)?;
            row.lease_expires_ms = run.lease_expires_ms;
            diesel::insert_into(runs::table)
                .values(row)
                .execute(conn)
                .db()?;
            if let (Some(before), Some(after)) = (&parent_before, &parent) {
                save_run(conn, before, after)?;
            }
            let events = save_task(conn, &before, &mut task, drafts)?;
            Ok((run, task, events))
        })
        .await
    }

    pub async fn get_run(&self, id: RunId) -> Result<Run, StoreError> {
        self.point_read(move |conn| load_run(conn, id)).await
    }

    /// Changes a run and its task in one transaction: locks the task, lets `f`
    /// change both and name the events to record, appends them, saves both. When
    /// `f` fails nothing is written.
    ///
    /// `f` must apply the domain rules (`RunState::check_transition`, task status).
    /// The run's id, task, agent, parent, tools and start time do not change; a run
    /// that `f` finishes without a finish time gets the transaction's time.
    pub async fn change_run<F>(
        &self,
        run_id: RunId,
        f: F,
    ) -> Result<(Run, Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Run, &mut Task) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        self.write_events(move |conn| {
            let task_id = load_run(conn, run_id)?.task_id;
            // Read again under the task's lock: every run change holds it.
            change_locked(conn, task_id, run_id, f)
        })
        .await
    }

    /// [`Self::change_run`] for a caller that knows the run's task (a run
    /// token names it): the run is read once, under the task's lock. A run
    /// that is not of `task_id` is not found, and nothing is written.
    pub async fn change_task_run<F>(
        &self,
        task_id: TaskId,
        run_id: RunId,
        f: F,
    ) -> Result<(Run, Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Run, &mut Task) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        self.write_events(move |conn| change_locked(conn, task_id, run_id, f))
            .await
    }

    /// The task's runs, in the order they started.
    pub async fn list_runs(&self, task_id: TaskId) -> Result<Vec<Run>, StoreError> {
        self.with_conn(move |conn| {
            let key = task_id.to_string();
            let rows: Vec<RunRow> = runs::table
                .filter(runs::task_id.eq(&key))
                .select(RunRow::as_select())
                .order((runs::started_ms.asc(), runs::id.asc()))
                .load(conn)
                .db()?;
            if rows.is_empty() {
                let found: i64 = tasks::table
                    .filter(tasks::id.eq(&key))
                    .count()
                    .get_result(conn)
                    .db()?;
                if found == 0 {
                    return Err(StoreError::not_found("task", task_id));
                }
            }
            rows.into_iter().map(RunRow::into_domain).collect()
        })
        .await
    }

    /// Whether a replica still drives a run of the task (its processes may
    /// live).
    pub async fn has_driven_runs(&self, task_id: TaskId) -> Result<bool, StoreError> {
        self.with_conn(move |conn| {
            let count: i64 = runs::table
                .filter(runs::task_id.eq(task_id.to_string()))
                .filter(runs::replica.is_not_null())
                .count()
                .get_result(conn)
                .db()?;
            Ok(count > 0)
        })
        .await
    }

    /// Whether any run of the task has not finished.
    pub async fn has_unfinished_runs(&self, task_id: TaskId) -> Result<bool, StoreError> {
        self.with_conn(move |conn| {
            let count: i64 = runs::table
                .filter(runs::task_id.eq(task_id.to_string()))
                .filter(runs::state.ne(RunState::Finished.as_str()))
                .count()
                .get_result(conn)
                .db()?;
            Ok(count > 0)
        })
        .await
    }

    /// Every run that has not finished, oldest first: after a restart these are
    /// the runs to resume or mark interrupted.
    pub async fn unfinished_runs(&self) -> Result<Vec<Run>, StoreError> {
        self.with_conn(|conn| load_unfinished(conn, None)).await
    }
}

impl Store {
    /// Changes a task and all of its unfinished runs in one transaction (e.g. a
    /// cancel that ends them all): `f` gets the locked task and its unfinished
    /// runs; changed runs are saved; nothing is written when `f` fails.
    pub async fn change_task_runs<F>(
        &self,
        task_id: TaskId,
        f: F,
    ) -> Result<(Task, Vec<Run>, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Task, &mut [Run]) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        self.write_events(move |conn| {
            let before_task = lock_task(conn, task_id)?;
            let before_runs = load_unfinished(conn, Some(task_id))?;
            let mut task = before_task.clone();
            let mut changed = before_runs.clone();
            let drafts = f(&mut task, &mut changed)?;
            let changed = before_runs
                .iter()
                .zip(&changed)
                .map(|(before, run)| save_run(conn, before, run))
                .collect::<Result<Vec<_>, _>>()?;
            let events = save_task(conn, &before_task, &mut task, drafts)?;
            Ok((task, changed, events))
        })
        .await
    }

    /// Changes a run, its task and the task's other unfinished runs in one
    /// transaction (a run ending takes its handoff children and its parent with
    /// it): `f` gets the run, the locked task and the others, oldest first;
    /// changed runs are saved; nothing is written when `f` fails.
    pub async fn change_run_family<F>(
        &self,
        run_id: RunId,
        f: F,
    ) -> Result<(Run, Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Run, &mut Task, &mut [Run]) -> Result<Vec<EventDraft>, DomainError>
            + Send
            + 'static,
    {
        self.write_events(move |conn| {
            let task_id = load_run(conn, run_id)?.task_id;
            let before_task = lock_task(conn, task_id)?;
            let before_run = load_run(conn, run_id)?;
            let before_others: Vec<Run> = load_unfinished(conn, Some(task_id))?
                .into_iter()
                .filter(|r| r.id != run_id)
                .collect();
            let mut run = before_run.clone();
            let mut task = before_task.clone();
            let mut others = before_others.clone();
            let drafts = f(&mut run, &mut task, &mut others)?;
            let run = save_run(conn, &before_run, &run)?;
            for (before, other) in before_others.iter().zip(&others) {
                save_run(conn, before, other)?;
            }
            let events = save_task(conn, &before_task, &mut task, drafts)?;
            Ok((run, task, events))
        })
        .await
    }

    /// Appends chat messages to a run's conversation, numbered after the ones
    /// stored, in one transaction. Only the run's driver of `epoch` on this replica appends.
    pub async fn append_run_messages(
        &self,
        run_id: RunId,
        epoch: u32,
        messages: Vec<serde_json::Value>,
    ) -> Result<(), StoreError> {
        let me = self.replica.id.clone();
        self.write(move |conn| {
            let key = run_id.to_string();
            let run = load_run(conn, run_id)?;
            crate::domain::policy::check_driver(&run, &me, epoch)?;
            let last: Option<i64> = run_messages::table
                .filter(run_messages::run_id.eq(&key))
                .select(diesel::dsl::max(run_messages::sequence))
                .first(conn)
                .db()?;
            let mut next = last.unwrap_or(0);
            for message in messages {
                next += 1;
                diesel::insert_into(run_messages::table)
                    .values((
                        run_messages::run_id.eq(&key),
                        run_messages::sequence.eq(next),
                        run_messages::body.eq(super::rows::to_json(&message)?),
                    ))
                    .execute(conn)
                    .db()?;
            }
            Ok(())
        })
        .await
    }

    /// A run's stored conversation, in order.
    pub async fn run_messages(&self, run_id: RunId) -> Result<Vec<serde_json::Value>, StoreError> {
        self.with_conn(move |conn| {
            let bodies: Vec<String> = run_messages::table
                .filter(run_messages::run_id.eq(run_id.to_string()))
                .order(run_messages::sequence.asc())
                .select(run_messages::body)
                .load(conn)
                .db()?;
            bodies
                .iter()
                .map(|body| {
                    serde_json::from_str(body).map_err(|e| StoreError::Corrupt {
                        what: "run message",
                        key: run_id.to_string(),
                        reason: e.to_string(),
                    })
                })
                .collect()
        })
        .await
    }
}

/// Saves what may change of a run (its state, end, report, output, session and
/// usage; never its identity, parent, tools or start) and returns it as saved.
/// A run finished without a finish time gets the current time.
pub(super) fn save_run(
    conn: &mut AnyConnection,
    before: &Run,
    run: &Run,
) -> Result<Run, StoreError> {
    let mut run = run.clone();
    run.id = before.id;
    run.task_id = before.task_id;
    run.agent = before.agent.clone();
    run.parent = before.parent;
    run.tools = before.tools.clone();
    run.started_ms = before.started_ms;
    run.handoff_index = before.handoff_index;
    run.prompt = before.prompt.clone();
    if run.state == RunState::Finished && run.finished_ms.is_none() {
        run.finished_ms = Some(now_ms().max(run.started_ms));
    }
    if &run != before {
        let row = RunRow::from_domain(&run)?;
        diesel::update(runs::table.find(&row.id))
            .set((
                (
                    runs::state.eq(&row.state),
                    runs::finished_ms.eq(row.finished_ms),
                    runs::end_reason.eq(&row.end_reason),
                    runs::completion_report.eq(&row.completion_report),
                    runs::planner_output.eq(&row.planner_output),
                    runs::session_id.eq(&row.session_id),
                    runs::usage.eq(&row.usage),
                    runs::output.eq(&row.output),
                ),
                (
                    runs::token_root.eq(&row.token_root),
                    runs::token_expires_ms.eq(row.token_expires_ms),
                    runs::token_egress.eq(&row.token_egress),
                    runs::replica.eq(&row.replica),
                    runs::epoch.eq(row.epoch),
                    runs::timeout_ms.eq(row.timeout_ms),
                ),
            ))
            .execute(conn)
            .db()?;
        if run.replica.is_none() && before.replica.is_some() {
            // Released: no process of it is left. Whoever waits for that
            // (CancelTask on another replica) hears it.
            diesel::update(runs::table.find(&row.id))
                .set(runs::lease_expires_ms.eq(None::<i64>))
                .execute(conn)
                .db()?;
            super::tasks::notify_task(conn, run.task_id, 0)?;
        }
    }
    Ok(run)
}

/// The runs that have not finished (of one task, or all), oldest first.
pub(super) fn load_unfinished(
    conn: &mut AnyConnection,
    task_id: Option<TaskId>,
) -> Result<Vec<Run>, StoreError> {
    let mut query = runs::table
        .filter(runs::state.ne(RunState::Finished.as_str()))
        .into_boxed();
    if let Some(task_id) = task_id {
        query = query.filter(runs::task_id.eq(task_id.to_string()));
    }
    query
        .select(RunRow::as_select())
        .order((runs::started_ms.asc(), runs::id.asc()))
        .load(conn)
        .db()?
        .into_iter()
        .map(RunRow::into_domain)
        .collect()
}

/// Locks task `task_id`, reads run `run_id` of it, lets `f` change both and
/// saves them with its events (see [`Store::change_run`]).
fn change_locked<F>(
    conn: &mut AnyConnection,
    task_id: TaskId,
    run_id: RunId,
    f: F,
) -> Result<(Run, Task, Vec<Event>), StoreError>
where
    F: FnOnce(&mut Run, &mut Task) -> Result<Vec<EventDraft>, DomainError>,
{
    let before_task = lock_task(conn, task_id)?;
    let before_run = load_run(conn, run_id)?;
    if before_run.task_id != task_id {
        return Err(StoreError::not_found(
            "run",
            format!("{run_id} of task {task_id}"),
        ));
    }
    let mut run = before_run.clone();
    let mut task = before_task.clone();
    let drafts = f(&mut run, &mut task)?;
    let run = save_run(conn, &before_run, &run)?;
    let events = save_task(conn, &before_task, &mut task, drafts)?;
    Ok((run, task, events))
}

pub(super) fn load_run(conn: &mut AnyConnection, id: RunId) -> Result<Run, StoreError> {
    let key = id.to_string();
    let row: Option<RunRow> = super::connection::direct!(conn, |c| runs::table
        .find(&key)
        .select(RunRow::as_select())
        .first(c)
        .optional())
    .db()?;
    row.ok_or_else(|| StoreError::not_found("run", id))?
        .into_domain()
}

/// The parent a new run names, which must be a run of the same task.
fn parent_of(conn: &mut AnyConnection, new: &NewRun) -> Result<Option<Run>, StoreError> {
    Ok(match new.parent {
        Some(parent) => {
            let parent_run = load_run(conn, parent)?;
            if parent_run.task_id != new.task_id {
                return Err(DomainError::invalid(
                    "parent run",
                    format!(
                        "run {parent} belongs to task {}, not {}",
                        parent_run.task_id, new.task_id
                    ),
                )
                .into());
            }
            Some(parent_run)
        }
        None => None,
    })
}

/// A handoff run's number within its task (1 for the first); none for a
/// run that is not a handoff's.
fn next_handoff_index(conn: &mut AnyConnection, new: &NewRun) -> Result<Option<u32>, StoreError> {
    Ok(match new.handoff_prompt {
        Some(_) => {
            let taken: i64 = runs::table
                .filter(runs::task_id.eq(new.task_id.to_string()))
                .filter(runs::handoff_index.is_not_null())
                .count()
                .get_result(conn)
                .db()?;
            Some(
                u32::try_from(taken + 1).map_err(|_| {
                    DomainError::invalid("handoff", "this task has too many handoffs")
                })?,
            )
        }
        None => None,
    })
}

impl NewRun {
    /// The run it opens: spawning, driven by `replica` until `lease_end` when
    /// a replica drives it.
    fn run(
        self,
        handoff_index: Option<u32>,
        replica: String,
        lease_end: i64,
        parent: Option<&Run>,
    ) -> Run {
        Run {
            rules: self.rules.under(parent.map(|p| &p.rules)),
            id: RunId::new(),
            task_id: self.task_id,
            agent: self.agent,
            parent: self.parent,
            state: RunState::Spawning,
            tools: self.tools,
            started_ms: now_ms(),
            finished_ms: None,
            end_reason: None,
            completion_report: None,
            planner_output: None,
            session_id: None,
            usage: crate::domain::Usage::default(),
            handoff_index,
            prompt: self.handoff_prompt,
            output: None,
            token: self.token,
            replica: self.drive.map(|_| replica),
            epoch: 0,
            timeout_ms: self
                .drive
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            lease_expires_ms: self.drive.map(|_| lease_end),
        }
    }
}
