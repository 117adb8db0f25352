//! Tasks and their history. Every change to a task goes through one transaction
//! that locks the task row, applies the change, and appends its events with the
//! next sequence numbers: gapless and unique per task however many writers race.

use std::sync::Arc;

use diesel::prelude::*;
use serde_json::json;

use super::connection::{AnyConnection, first_locked};
use super::rows::{EventRow, TaskRow};
use super::schema::{runs, task_events, tasks};
use super::task_cache;
use super::workspaces::ensure_workspace;
use super::{Db, Store, StoreError, or_missing};
use crate::domain::{
    Budget, DomainError, Event, EventKind, Planning, Stage, Task, TaskId, TaskSource, TaskStatus,
    WorkspaceId, check_budget, now_ms,
};

/// An event to record: its kind and its JSON data. The store numbers and dates it.
pub type EventDraft = (EventKind, serde_json::Value);

/// Page size of `list_tasks` when the caller asks for 0.
/// What a task made by a request made before is (`StoreError::AlreadyExists`
/// of a new task whose `TaskSource::request_key` a task has already).
pub const TASK_REQUEST: &str = "task request";

pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// Largest page of `list_tasks`.
pub const MAX_PAGE_SIZE: u32 = 500;
/// Largest batch of `events`.
pub const MAX_EVENTS: u32 = 1000;
/// Most bytes of event data in one batch of `events` that a caller should ask
/// for (GetHistory's page, WatchTask's replay batch): well under a client's
/// 4 MiB message limit. An event larger than that comes alone.
pub const EVENT_PAGE_BYTES: usize = 1024 * 1024;
/// Most bytes of event data a stream's follower (a WatchTask, a console or
/// A2A subscription) reads from the store at once: what it holds while its
/// watcher reads, so one key's streams hold at most their number times this
/// (plus their buffers) however long the task's history.
pub const FOLLOW_PAGE_BYTES: usize = 32 * 1024;

/// Most bytes of tasks in one page of `list_tasks`, whatever the page size
/// asked: a page of large tasks is cut short (with a token for the rest), so
/// an answer stays well under a client's 4 MiB message limit and what a
/// caller can make the service hold per call is bounded. A task larger than
/// that comes alone.
pub const TASK_PAGE_BYTES: usize = 1024 * 1024;

diesel::define_sql_function! {
    /// Bytes of a text value (PostgreSQL; SQLite since 3.43), read without
    /// loading the value.
    fn octet_length(text: diesel::sql_types::Text) -> diesel::sql_types::Integer;
}

/// Which tasks [`Store::find_tasks`] keeps: all of these that are set.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    pub workspace: Option<WorkspaceId>,
    /// Any of these statuses; empty: any status.
    pub statuses: Vec<TaskStatus>,
    /// In this conversation (a task's own id names a task alone).
    pub conversation: Option<String>,
    /// Changed after this time.
    pub updated_after_ms: Option<i64>,
    /// Not changed since this time.
    pub updated_before_ms: Option<i64>,
    /// Only tasks that start by themselves once planned.
    pub starts_by_itself: bool,
    /// Newest first instead of oldest first.
    pub newest_first: bool,
}

/// A task to create (see [`Store::create_traced_task`]).
#[derive(Debug, Clone)]
pub struct NewTask {
    pub workspace: WorkspaceId,
    pub description: String,
    pub source: TaskSource,
    /// A W3C `traceparent` its work continues.
    pub trace_context: Option<String>,
    pub budget: Budget,
    pub auto_start: Option<crate::domain::AutoStart>,
    /// Its own branch (named after it when the name is empty), or why it
    /// has none.
    pub branch: Option<crate::domain::TaskBranch>,
    pub branch_note: Option<String>,
}

impl Store {
    /// Creates a task (pending, in the backlog) and its `task_created` event
    /// (sequence 1) in one transaction.
    pub async fn create_task(
        &self,
        workspace: WorkspaceId,
        description: String,
        source: TaskSource,
    ) -> Result<(Task, Vec<Event>), StoreError> {
        self.create_traced_task(NewTask {
            workspace,
            description,
            source,
            trace_context: None,
            budget: Budget::default(),
            auto_start: None,
            branch: None,
            branch_note: None,
        })
        .await
    }

    /// [`Self::create_task`] with everything a task can begin with: the
    /// trace its work continues (a W3C `traceparent`), its own budget, and
    /// what starts it once planned.
    pub async fn create_traced_task(&self, new: NewTask) -> Result<(Task, Vec<Event>), StoreError> {
        let NewTask {
            workspace,
            description,
            source,
            trace_context,
            budget,
            auto_start,
            branch,
            branch_note,
        } = new;
        Task::check_description(&description)?;
        check_budget(&budget)?;
        self.write_events(move |conn| {
            ensure_workspace(conn, workspace)?;
            let now = now_ms();
            let task = Task {
                id: TaskId::new(),
                workspace_id: workspace,
                description,
                source,
                status: TaskStatus::Pending,
                status_reason: None,
                stage: Stage::Backlog,
                planning: Planning::default(),
                current_agent: None,
                created_ms: now,
                updated_ms: now,
                last_sequence: 1,
                usage: crate::domain::Usage::default(),
                budget: crate::domain::TaskBudget::default(),
                auto_start,
                branch,
                branch_note,
                approvals: crate::domain::approval::Approvals::default(),
            };
            let mut task = task;
            if let Some(branch) = task.branch.as_mut()
                && branch.name.is_empty()
            {
                branch.name = crate::domain::TaskBranch::default_name(task.id);
            }
            task.budget.set(budget, Budget::default());
            let event = Event {
                task_id: task.id,
                sequence: 1,
                kind: EventKind::TaskCreated,
                data: json!({ "description": task.description }),
                at_ms: now,
            };
            let inserted = diesel::insert_into(tasks::table)
                .values((
                    TaskRow::from_domain(&task)?,
                    tasks::trace_context.eq(trace_context),
                ))
                .execute(conn);
            if let (
                Some(key),
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    _,
                )),
            ) = (task.source.request_key(), &inserted)
            {
                return Err(StoreError::AlreadyExists {
                    what: TASK_REQUEST,
                    key,
                });
            }
            or_missing(inserted, "workspace", workspace)?;
            diesel::insert_into(task_events::table)
                .values(EventRow::from_domain(&event)?)
                .execute(conn)
                .db()?;
            Ok((task, vec![event]))
        })
        .await
    }

    /// The task of `workspace` a request with `key`
    /// (`TaskSource::request_key`) made, if one did.
    pub async fn task_of_request(
        &self,
        workspace: WorkspaceId,
        key: String,
    ) -> Result<Option<Task>, StoreError> {
        self.with_conn(move |conn| {
            tasks::table
                .filter(tasks::workspace_id.eq(workspace.to_string()))
                .filter(tasks::request_key.eq(key))
                .select(TaskRow::as_select())
                .first(conn)
                .optional()
                .db()?
                .map(TaskRow::into_domain)
                .transpose()
        })
        .await
    }

    /// The `traceparent` of the task's trace, if it was created with one.
    pub async fn task_trace_context(&self, id: TaskId) -> Result<Option<String>, StoreError> {
        self.with_conn(move |conn| {
            tasks::table
                .find(id.to_string())
                .select(tasks::trace_context)
                .first(conn)
                .optional()
                .db()?
                .ok_or_else(|| StoreError::not_found("task", id))
        })
        .await
    }

    pub async fn get_task(&self, id: TaskId) -> Result<Task, StoreError> {
        let seen = match self.tasks.get(id) {
            Ok(task) => return Ok(task),
            Err(seen) => seen,
        };
        let cache = Arc::clone(&self.tasks);
        self.with_conn(move |conn| {
            let row = read_task_row(conn, id)?;
            let bytes = row.bytes();
            let task = row.into_domain()?;
            cache.store(seen, &task, bytes);
            Ok(task)
        })
        .await
    }

    /// Tasks, oldest first (by creation time, then id), filtered by workspace and
    /// status. `page_size` 0 means [`DEFAULT_PAGE_SIZE`]; larger sizes are capped
    /// at [`MAX_PAGE_SIZE`], and a page holds at most [`TASK_PAGE_BYTES`]. Pass the returned token back to get the next page; it
    /// is `None` on the last page.
    pub async fn list_tasks(
        &self,
        workspace: Option<WorkspaceId>,
        status: Option<TaskStatus>,
        page_size: u32,
        page_token: Option<String>,
    ) -> Result<(Vec<Task>, Option<String>), StoreError> {
        let query = TaskQuery {
            workspace,
            statuses: status.into_iter().collect(),
            ..TaskQuery::default()
        };
        let (tasks, next, _) = self.find_tasks(query, page_size, page_token).await?;
        Ok((tasks, next))
    }

    /// Tasks that `query` keeps, a page at a time as [`Self::list_tasks`]
    /// gives them, with how many it keeps in all.
    pub async fn find_tasks(
        &self,
        query: TaskQuery,
        page_size: u32,
        page_token: Option<String>,
    ) -> Result<(Vec<Task>, Option<String>, u64), StoreError> {
        let size = match page_size {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        };
        let after = page_token.as_deref().map(PageToken::parse).transpose()?;
        self.with_conn(move |conn| {
            if let Some(workspace) = query.workspace {
                ensure_workspace(conn, workspace)?;
            }
            let filtered = || {
                let mut q = tasks::table.into_boxed();
                if let Some(workspace) = query.workspace {
                    q = q.filter(tasks::workspace_id.eq(workspace.to_string()));
                }
                if !query.statuses.is_empty() {
                    q = q.filter(
                        tasks::status.eq_any(query.statuses.iter().map(|s| s.as_str().to_owned())),
                    );
                }
                if let Some(conversation) = &query.conversation {
                    // A task alone is the conversation named by its own id.
                    q = q.filter(
                        tasks::conversation_id
                            .eq(conversation.clone())
                            .or(tasks::conversation_id
                                .is_null()
                                .and(tasks::id.eq(conversation.clone()))),
                    );
                }
                if let Some(after_ms) = query.updated_after_ms {
                    q = q.filter(tasks::updated_ms.gt(after_ms));
                }
                if let Some(before_ms) = query.updated_before_ms {
                    q = q.filter(tasks::updated_ms.lt(before_ms));
                }
                if query.starts_by_itself {
                    q = q.filter(tasks::auto_start.is_not_null());
                }
                q
            };
            let total: i64 = filtered().count().get_result(conn).db()?;
            let mut rows_query = filtered().select(TaskRow::as_select());
            if let Some(after) = after {
                let (ms, id) = (after.created_ms, after.id.to_string());
                rows_query = if query.newest_first {
                    rows_query.filter(
                        tasks::created_ms
                            .lt(ms)
                            .or(tasks::created_ms.eq(ms).and(tasks::id.lt(id))),
                    )
                } else {
                    rows_query.filter(
                        tasks::created_ms
                            .gt(ms)
                            .or(tasks::created_ms.eq(ms).and(tasks::id.gt(id))),
                    )
                };
            }
            rows_query = if query.newest_first {
                rows_query.order((tasks::created_ms.desc(), tasks::id.desc()))
            } else {
                rows_query.order((tasks::created_ms.asc(), tasks::id.asc()))
            };
            let mut rows: Vec<TaskRow> = rows_query.limit(i64::from(size) + 1).load(conn).db()?;
            let mut more = rows.len() > size as usize;
            rows.truncate(size as usize);
            let fit = fitting(&rows, TASK_PAGE_BYTES, TaskRow::bytes);
            more |= fit < rows.len();
            rows.truncate(fit);
            let tasks = rows
                .into_iter()
                .map(TaskRow::into_domain)
                .collect::<Result<Vec<_>, _>>()?;
            let next = match tasks.last() {
                Some(last) if more => Some(
                    PageToken {
                        created_ms: last.created_ms,
                        id: last.id,
                    }
                    .encode(),
                ),
                _ => None,
            };
            Ok((tasks, next, u64::try_from(total).unwrap_or_default()))
        })
        .await
    }

    /// Changes a task in one transaction: locks it, lets `f` change it and name
    /// the events to record, appends them with the next sequence numbers, and saves
    /// the task. When `f` fails nothing is written and its error comes back as
    /// [`StoreError::Domain`].
    ///
    /// `f` must apply the domain rules (status and stage transitions); the store
    /// keeps `id`, `workspace_id`, `created_ms`, `updated_ms` and `last_sequence`.
    pub async fn change_task<F>(&self, id: TaskId, f: F) -> Result<(Task, Vec<Event>), StoreError>
    where
        F: FnOnce(&mut Task) -> Result<Vec<EventDraft>, DomainError> + Send + 'static,
    {
        self.write_events(move |conn| {
            let before = lock_task(conn, id)?;
            let mut task = before.clone();
            let drafts = f(&mut task)?;
            let events = save_task(conn, &before, &mut task, drafts)?;
            Ok((task, events))
        })
        .await
    }

    /// Appends events to a task's history without changing it otherwise.
    pub async fn append_events(
        &self,
        id: TaskId,
        events: Vec<EventDraft>,
    ) -> Result<Vec<Event>, StoreError> {
        // One tool call on PostgreSQL: one statement when it can be
        // (`call_record`), else the general path.
        let events = if self.backend == super::Backend::Postgres
            && super::call_record::is_one_call(&events)
        {
            let recorded = self
                .with_conn(move |conn| super::call_record::record_at_once(conn, id, events))
                .await?;
            match recorded {
                Ok(written) => {
                    self.announce(&written, &[]);
                    return Ok(written);
                }
                Err(events) => events,
            }
        } else {
            events
        };
        self.change_task(id, move |_| Ok(events))
            .await
            .map(|(_, events)| events)
    }

    /// The task's events after `after_sequence` (0 for all), in order: at most
    /// `limit` of them (0 or more than [`MAX_EVENTS`] means [`MAX_EVENTS`]) and,
    /// past the first, no more than `max_bytes` of event data together. So a
    /// batch may be short while more events follow: only an empty one says
    /// there are none.
    pub async fn events(
        &self,
        task_id: TaskId,
        after_sequence: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let limit = match limit {
            0 => MAX_EVENTS,
            n => n.min(MAX_EVENTS),
        };
        // No task has that many events: nothing comes after it.
        let after = i64::try_from(after_sequence).unwrap_or(i64::MAX);
        self.with_conn(move |conn| {
            let key = task_id.to_string();
            // The sizes first, so that large events are never loaded only to be left out.
            let sizes: Vec<(i64, i32)> = task_events::table
                .filter(task_events::task_id.eq(&key))
                .filter(task_events::sequence.gt(after))
                .select((task_events::sequence, octet_length(task_events::data)))
                .order(task_events::sequence.asc())
                .limit(i64::from(limit))
                .load(conn)
                .db()?;
            let Some(last) = last_within(&sizes, max_bytes) else {
                let found: i64 = tasks::table
                    .filter(tasks::id.eq(&key))
                    .count()
                    .get_result(conn)
                    .db()?;
                if found == 0 {
                    return Err(StoreError::not_found("task", task_id));
                }
                return Ok(Vec::new());
            };
            let rows: Vec<EventRow> = task_events::table
                .filter(task_events::task_id.eq(&key))
                .filter(task_events::sequence.gt(after))
                .filter(task_events::sequence.le(last))
                .select(EventRow::as_select())
                .order(task_events::sequence.asc())
                .load(conn)
                .db()?;
            rows.into_iter().map(EventRow::into_domain).collect()
        })
        .await
    }
}

/// The sequence of the last event of `sizes` (sequence and bytes, in order)
/// that fits in `max_bytes` together with the events before it; at least the
/// first one, whatever its size. None when `sizes` is empty.
fn last_within(sizes: &[(i64, i32)], max_bytes: usize) -> Option<i64> {
    let (first, _) = sizes.first()?;
    let mut total = 0usize;
    let mut last = *first;
    for (sequence, bytes) in sizes {
        total = total.saturating_add(usize::try_from(*bytes).unwrap_or(0));
        if total > max_bytes && *sequence != *first {
            break;
        }
        last = *sequence;
    }
    Some(last)
}

/// Loads a task and locks it until the transaction ends.
impl Store {
    /// Deletes a task that is over (completed, failed or canceled, no run still
    /// going) with its history and runs. FAILED_PRECONDITION otherwise.
    pub async fn delete_task(&self, id: TaskId) -> Result<(), StoreError> {
        let changes = self
            .write(move |conn| {
                let task = lock_task(conn, id)?;
                let live: i64 = runs::table
                    .filter(runs::task_id.eq(id.to_string()))
                    .filter(runs::finished_ms.is_null())
                    .count()
                    .get_result(conn)
                    .db()?;
                crate::domain::policy::check_deletable(
                    &task,
                    u64::try_from(live).unwrap_or(u64::MAX),
                )?;
                // Its events, runs and their messages go with it (ON DELETE CASCADE).
                task_cache::touched(id);
                diesel::delete(tasks::table.find(id.to_string()))
                    .execute(conn)
                    .db()?;
                super::feed::record_deleted(conn, &task)
            })
            .await?;
        self.hub.publish_changes(&changes);
        Ok(())
    }
}

/// The task's row as it is now, unlocked.
pub(super) fn read_task_row(conn: &mut AnyConnection, id: TaskId) -> Result<TaskRow, StoreError> {
    let key = id.to_string();
    let row: Option<TaskRow> = super::connection::direct!(conn, |c| tasks::table
        .find(&key)
        .select(TaskRow::as_select())
        .first(c)
        .optional())
    .db()?;
    row.ok_or_else(|| StoreError::not_found("task", id))
}

pub(super) fn lock_task(conn: &mut AnyConnection, id: TaskId) -> Result<Task, StoreError> {
    let key = id.to_string();
    let row: Option<TaskRow> = first_locked!(
        &mut *conn,
        tasks::table.find(&key).select(TaskRow::as_select())
    )
    .db()?;
    row.ok_or_else(|| StoreError::not_found("task", id))?
        .into_domain()
}

/// Saves `task` (changed from `before`, which is locked) with `drafts` as its next
/// events, and returns them. Writes nothing when neither changed.
pub(super) fn save_task(
    conn: &mut AnyConnection,
    before: &Task,
    task: &mut Task,
    mut drafts: Vec<EventDraft>,
) -> Result<Vec<Event>, StoreError> {
    drafts.extend(super::spend::spend(conn, before, task, &drafts)?);
    write_task(conn, before, task, drafts)
}

/// [`save_task`] without the budget's check: for a model call recorded as
/// it is sent, whose estimate counts from then on but is no reason to stop
/// a run (its answer, recorded in its place, is checked).
pub(super) fn save_task_unchecked(
    conn: &mut AnyConnection,
    before: &Task,
    task: &mut Task,
) -> Result<Vec<Event>, StoreError> {
    write_task(conn, before, task, Vec::new())
}

fn write_task(
    conn: &mut AnyConnection,
    before: &Task,
    task: &mut Task,
    drafts: Vec<EventDraft>,
) -> Result<Vec<Event>, StoreError> {
    task.id = before.id;
    task.workspace_id = before.workspace_id;
    task.created_ms = before.created_ms;
    task.updated_ms = before.updated_ms;
    task.last_sequence = before.last_sequence;
    if drafts.is_empty() && task == before {
        return Ok(Vec::new());
    }
    let now = now_ms().max(before.updated_ms);
    let mut events = Vec::with_capacity(drafts.len());
    for (kind, data) in drafts {
        task.last_sequence += 1;
        let event = Event {
            task_id: task.id,
            sequence: task.last_sequence,
            kind,
            data,
            at_ms: now,
        };
        let row = EventRow::from_domain(&event)?;
        super::connection::direct!(&mut *conn, |c| diesel::insert_into(task_events::table)
            .values(&row)
            .execute(c))
        .db()?;
        events.push(event);
    }
    task.updated_ms = now;
    task_cache::touched(task.id);
    if only_counters_changed(before, task) {
        super::kept::TaskCounters {
            id: task.id.to_string(),
            updated_ms: task.updated_ms,
            last_sequence: super::rows::db_sequence(task.last_sequence)?,
            budget: super::rows::to_json(&task.budget)?,
        }
        .run(conn)
        .db()?;
    } else {
        diesel::update(tasks::table.find(task.id.to_string()))
            .set(TaskRow::from_domain(task)?)
            .execute(conn)
            .db()?;
        notify_task(conn, task.id, task.last_sequence)?;
    }
    Ok(events)
}

/// Whether `task` differs from `before` in its history's end, its time and
/// its budget only (what a recorded tool call changes): then those three
/// columns are all its row needs.
pub(super) fn only_counters_changed(before: &Task, task: &Task) -> bool {
    let mut same = before.clone();
    same.updated_ms = task.updated_ms;
    same.last_sequence = task.last_sequence;
    same.budget.clone_from(&task.budget);
    same == *task
}

/// The PostgreSQL channel on which every commit that changes a task is
/// announced to every replica: `<task id> <last sequence>`.
pub const TASK_CHANNEL: &str = "chorus_tasks";

/// Announces, when the transaction commits, that `task` changed and its
/// history now ends at `last_sequence` (PostgreSQL `NOTIFY`, delivered to the
/// other replicas' listeners only if the transaction commits); nothing on
/// SQLite, which has one orchestrator.
pub(super) fn notify_task(
    conn: &mut AnyConnection,
    task: TaskId,
    last_sequence: u64,
) -> Result<(), StoreError> {
    if let AnyConnection::Pg(c) = conn {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<diesel::sql_types::Text, _>(TASK_CHANNEL)
            .bind::<diesel::sql_types::Text, _>(format!("{task} {last_sequence}"))
            .execute(c)
            .db()?;
    }
    Ok(())
}

/// Parses a [`TASK_CHANNEL`] payload.
pub fn parse_task_notice(payload: &str) -> Option<(TaskId, u64)> {
    let (task, sequence) = payload.split_once(' ')?;
    Some((TaskId::parse(task).ok()?, sequence.parse().ok()?))
}

impl Store {
    /// The last event sequence of each of `ids` (tasks that are gone are left out).
    pub async fn last_sequences(&self, ids: Vec<TaskId>) -> Result<Vec<(TaskId, u64)>, StoreError> {
        self.with_conn(move |conn| {
            let mut out = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(500) {
                let keys: Vec<String> = chunk.iter().map(ToString::to_string).collect();
                let rows: Vec<(String, i64)> = tasks::table
                    .filter(tasks::id.eq_any(&keys))
                    .select((tasks::id, tasks::last_sequence))
                    .load(conn)
                    .db()?;
                for (id, last) in rows {
                    if let (Ok(id), Ok(last)) = (TaskId::parse(&id), u64::try_from(last)) {
                        out.push((id, last));
                    }
                }
            }
            Ok(out)
        })
        .await
    }
}

/// Where a page of `list_tasks` ends: the last task's creation time and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageToken {
    created_ms: i64,
    id: TaskId,
}

impl PageToken {
    const PREFIX: &'static str = "t1.";

    fn encode(self) -> String {
        format!("{}{}.{}", Self::PREFIX, self.created_ms, self.id)
    }

    fn parse(token: &str) -> Result<Self, DomainError> {
        let bad = || {
            DomainError::invalid(
                "page_token",
                format!("'{token}' is not a token from a previous list; start again without one"),
            )
        };
        let (created_ms, id) = token
            .strip_prefix(Self::PREFIX)
            .and_then(|rest| rest.split_once('.'))
            .ok_or_else(bad)?;
        Ok(Self {
            created_ms: created_ms.parse().map_err(|_| bad())?,
            id: TaskId::parse(id).map_err(|_| bad())?,
        })
    }
}

/// How many of `items`, from the first, fit in `budget` bytes as `bytes`
/// counts them; at least one.
fn fitting<T>(items: &[T], budget: usize, bytes: impl Fn(&T) -> usize) -> usize {
    let mut used = 0_usize;
    let fit = items
        .iter()
        .take_while(|item| {
            used = used.saturating_add(bytes(item));
            used <= budget
        })
        .count();
    fit.max(1).min(items.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_ends_before_the_event_that_passes_the_bytes_but_has_one_at_least() {
        let sizes = [(4, 400), (5, 500), (6, 200), (7, 10)];
        assert_eq!(last_within(&sizes, 1000), Some(5));
        assert_eq!(last_within(&sizes, 900), Some(5));
        assert_eq!(last_within(&sizes, 2000), Some(7));
        assert_eq!(last_within(&sizes, 10), Some(4), "the first comes alone");
        assert_eq!(last_within(&[], 10), None);
    }

    #[test]
    fn page_tokens_round_trip_and_bad_ones_are_refused() {
        let token = PageToken {
            created_ms: 1_700_000_000_123,
            id: TaskId::new(),
        };
        assert_eq!(PageToken::parse(&token.encode()), Ok(token));
        for bad in [
            "",
            "t1.",
            "t1.12",
            "t1.x.y",
            "t2.1.00000000-0000-0000-0000-000000000000",
        ] {
            let err = PageToken::parse(bad).expect_err(bad).to_string();
            assert!(err.starts_with("invalid page_token"), "{err}");
        }
    }
}
