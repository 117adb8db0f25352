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
    DomainError, Event, EventKind, Name, Run, RunId, RunState, Task, TaskId, now_ms,
};

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
        self.create_run_with(task_id, agent, parent, tools, |_| Ok(Vec::new()))
            .await
            .map(|(run, _task, events)| (run, events))
    }

    /// [`Store::create_run`] that also changes the task in the same transaction:
    /// `change` runs first (e.g. moving the task to active) and names its events;
    /// when it fails nothing is written.
    pub async fn create_run_with<F>(
        &self,
        task_id: TaskId,
        agent: Name,
        parent: Option<RunId>,
        tools: Vec<String>,
        change: F,
    ) -> Result<(Run, Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Task) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        self.write(move |conn| {
            let before = lock_task(conn, task_id)?;
            let mut task = before.clone();
            let mut drafts = change(&mut task)?;
            if let Some(parent) = parent {
                let parent_run = load_run(conn, parent)?;
                if parent_run.task_id != task_id {
                    return Err(DomainError::invalid(
                        "parent run",
                        format!(
                            "run {parent} belongs to task {}, not {task_id}",
                            parent_run.task_id
                        ),
                    )
                    .into());
                }
            }
            let run = Run {
                id: RunId::new(),
                task_id,
                agent,
                parent,
                state: RunState::Spawning,
                tools,
                started_ms: now_ms(),
                finished_ms: None,
                end_reason: None,
                completion_report: None,
                planner_output: None,
                session_id: None,
                usage: crate::domain::Usage::default(),
            };
            diesel::insert_into(runs::table)
                .values(RunRow::from_domain(&run)?)
                .execute(conn)
                .db()?;
            let opened = json!({
                "run_id": run.id,
                "agent": run.agent,
                "parent_run_id": run.parent,
            });
            drafts.push((EventKind::RunOpened, opened));
            let events = save_task(conn, &before, &mut task, drafts)?;
            Ok((run, task, events))
        })
        .await
    }

    pub async fn get_run(&self, id: RunId) -> Result<Run, StoreError> {
        self.with_conn(move |conn| load_run(conn, id)).await
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
        self.write(move |conn| {
            let task_id = load_run(conn, run_id)?.task_id;
            let before_task = lock_task(conn, task_id)?;
            // Read again under the task's lock: every run change holds it.
            let before_run = load_run(conn, run_id)?;
            let mut run = before_run.clone();
            let mut task = before_task.clone();
            let drafts = f(&mut run, &mut task)?;

            run.id = before_run.id;
            run.task_id = before_run.task_id;
            run.agent = before_run.agent.clone();
            run.parent = before_run.parent;
            run.tools = before_run.tools.clone();
            run.started_ms = before_run.started_ms;
            if run.state == RunState::Finished && run.finished_ms.is_none() {
                run.finished_ms = Some(now_ms().max(run.started_ms));
            }
            if run != before_run {
                let row = RunRow::from_domain(&run)?;
                diesel::update(runs::table.find(&row.id))
                    .set((
                        runs::state.eq(&row.state),
                        runs::finished_ms.eq(row.finished_ms),
                        runs::end_reason.eq(&row.end_reason),
                        runs::completion_report.eq(&row.completion_report),
                        runs::planner_output.eq(&row.planner_output),
                        runs::session_id.eq(&row.session_id),
                        runs::usage.eq(&row.usage),
                    ))
                    .execute(conn)
                    .db()?;
            }
            let events = save_task(conn, &before_task, &mut task, drafts)?;
            Ok((run, task, events))
        })
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

    /// Every run that has not finished, oldest first: after a restart these are
    /// the runs to resume or mark interrupted.
    pub async fn unfinished_runs(&self) -> Result<Vec<Run>, StoreError> {
        self.with_conn(|conn| {
            runs::table
                .filter(runs::state.ne(RunState::Finished.as_str()))
                .select(RunRow::as_select())
                .order((runs::started_ms.asc(), runs::id.asc()))
                .load(conn)
                .db()?
                .into_iter()
                .map(RunRow::into_domain)
                .collect()
        })
        .await
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
        self.write(move |conn| {
            let before_task = lock_task(conn, task_id)?;
            let before_runs: Vec<Run> = runs::table
                .filter(runs::task_id.eq(task_id.to_string()))
                .filter(runs::state.ne(RunState::Finished.as_str()))
                .select(RunRow::as_select())
                .order((runs::started_ms.asc(), runs::id.asc()))
                .load(conn)
                .db()?
                .into_iter()
                .map(RunRow::into_domain)
                .collect::<Result<_, _>>()?;
            let mut task = before_task.clone();
            let mut changed = before_runs.clone();
            let drafts = f(&mut task, &mut changed)?;
            for (before, run) in before_runs.iter().zip(&changed) {
                if run != before {
                    let row = RunRow::from_domain(run)?;
                    diesel::update(runs::table.find(&row.id))
                        .set((
                            runs::state.eq(&row.state),
                            runs::finished_ms.eq(row.finished_ms),
                            runs::end_reason.eq(&row.end_reason),
                        ))
                        .execute(conn)
                        .db()?;
                }
            }
            let events = save_task(conn, &before_task, &mut task, drafts)?;
            Ok((task, changed, events))
        })
        .await
    }

    /// Appends chat messages to a run's conversation, numbered after the ones
    /// stored, in one transaction.
    pub async fn append_run_messages(
        &self,
        run_id: RunId,
        messages: Vec<serde_json::Value>,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            let key = run_id.to_string();
            load_run(conn, run_id)?;
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

fn load_run(conn: &mut AnyConnection, id: RunId) -> Result<Run, StoreError> {
    runs::table
        .find(id.to_string())
        .select(RunRow::as_select())
        .first(conn)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("run", id))?
        .into_domain()
}
