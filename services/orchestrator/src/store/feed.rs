//! The task feed (see `domain::feed` and the `task_feed` migration): written
//! at the end of every transaction that commits events a list of tasks
//! shows, read by WatchTasks from a cursor.

use std::collections::HashMap;

use diesel::prelude::*;

use super::connection::AnyConnection;
use super::rows::db_sequence;
use super::schema::{task_events, task_feed, task_feed_head, tasks};
use super::{Db, Store, StoreError};
use crate::domain::feed::{ChangeFilter, Changed, FeedCursor, TASK_DELETED, TaskChange, in_feed};
use crate::domain::{Event, EventKind, Task, TaskId, WorkspaceId};

/// The PostgreSQL channel on which every commit that adds to the feed is
/// announced to every replica: the last position it took.
pub const FEED_CHANNEL: &str = "chorus_feed";

/// One page of the feed read from a cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangesPage {
    /// The changes the filter's workspace and kinds keep, in order.
    pub changes: Vec<TaskChange>,
    /// Every change up to here has been read (kept or not): the cursor to
    /// read on from.
    pub through: FeedCursor,
    /// Whether more changes may follow right away (the page was full).
    pub more: bool,
}

/// Adds the feed's share of `events`, just written in this transaction, to
/// the feed. Call last in the transaction: the head row it locks is held
/// until the commit, and no other lock is taken after it.
pub(super) fn record(
    conn: &mut AnyConnection,
    events: &[Event],
) -> Result<Vec<TaskChange>, StoreError> {
    let kept: Vec<&Event> = events.iter().filter(|e| in_feed(e.kind)).collect();
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids: Vec<String> = kept.iter().map(|e| e.task_id.to_string()).collect();
    ids.sort();
    ids.dedup();
    let workspaces: HashMap<String, String> = tasks::table
        .filter(tasks::id.eq_any(&ids))
        .select((tasks::id, tasks::workspace_id))
        .load(conn)
        .db()?
        .into_iter()
        .collect();
    let changes = kept
        .into_iter()
        .map(|event| {
            let workspace = workspaces
                .get(&event.task_id.to_string())
                .ok_or_else(|| StoreError::not_found("task", event.task_id))?;
            Ok((
                workspace_id(workspace)?,
                Changed::Event(event.clone()),
                event.task_id,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    append(conn, changes)
}

/// Adds a deleted task to the feed (see [`record`]).
pub(super) fn record_deleted(
    conn: &mut AnyConnection,
    task: &Task,
) -> Result<Vec<TaskChange>, StoreError> {
    let deleted = Changed::Deleted {
        sequence: task.last_sequence + 1,
    };
    append(conn, vec![(task.workspace_id, deleted, task.id)])
}

fn workspace_id(text: &str) -> Result<WorkspaceId, StoreError> {
    WorkspaceId::parse(text)
        .map_err(|e| StoreError::Database(format!("task_feed: bad workspace id: {e}")))
}

/// Takes the next positions from the head and writes the rows.
fn append(
    conn: &mut AnyConnection,
    changes: Vec<(WorkspaceId, Changed, TaskId)>,
) -> Result<Vec<TaskChange>, StoreError> {
    let taken = i64::try_from(changes.len()).unwrap_or(i64::MAX);
    diesel::update(task_feed_head::table.find(1))
        .set(task_feed_head::position.eq(task_feed_head::position + taken))
        .execute(conn)
        .db()?;
    let last: i64 = task_feed_head::table
        .find(1)
        .select(task_feed_head::position)
        .first(conn)
        .db()?;
    let mut position = u64::try_from(last - taken).unwrap_or(0);
    let mut out = Vec::with_capacity(changes.len());
    for (workspace, what, task) in changes {
        position += 1;
        let change = TaskChange {
            cursor: FeedCursor(position),
            workspace_id: workspace,
            task_id: task,
            what,
        };
        let sequence = match &change.what {
            Changed::Event(e) => e.sequence,
            Changed::Deleted { sequence } => *sequence,
        };
        diesel::insert_into(task_feed::table)
            .values((
                task_feed::position.eq(db_sequence(position)?),
                task_feed::task_id.eq(task.to_string()),
                task_feed::workspace_id.eq(workspace.to_string()),
                task_feed::sequence.eq(db_sequence(sequence)?),
                task_feed::kind.eq(change.kind()),
            ))
            .execute(conn)
            .db()?;
        out.push(change);
    }
    if let AnyConnection::Pg(c) = conn {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<diesel::sql_types::Text, _>(FEED_CHANNEL)
            .bind::<diesel::sql_types::Text, _>(last.to_string())
            .execute(c)
            .db()?;
    }
    Ok(out)
}

/// A feed row with its event's data, when the event is still there.
type FeedRow = (
    i64,
    String,
    String,
    i64,
    String,
    Option<String>,
    Option<i64>,
);

impl Store {
    /// The cursor after the last committed change.
    pub async fn feed_head(&self) -> Result<FeedCursor, StoreError> {
        self.with_conn(head).await
    }

    /// The changes after `after` that `filter`'s workspace and kinds keep (its
    /// needs-you test is the caller's), at most `limit`, in order. Every
    /// change up to the page's `through` is committed and was read: a follower
    /// that goes on from there misses nothing and sees nothing twice. Changes
    /// of tasks deleted since are left out (their deletion is a change of its
    /// own).
    pub async fn changes_after(
        &self,
        after: FeedCursor,
        filter: ChangeFilter,
        limit: u32,
    ) -> Result<ChangesPage, StoreError> {
        self.with_conn(move |conn| {
            // The head first: every position up to it is committed (a
            // position is taken under the head's lock, held to the commit),
            // so the rows read next hold all of them.
            let head = head(conn)?;
            let mut query = task_feed::table
                .left_join(
                    task_events::table.on(task_events::task_id
                        .eq(task_feed::task_id)
                        .and(task_events::sequence.eq(task_feed::sequence))),
                )
                .filter(task_feed::position.gt(db_sequence(after.0)?))
                .filter(task_feed::position.le(db_sequence(head.0)?))
                .select((
                    task_feed::position,
                    task_feed::task_id,
                    task_feed::workspace_id,
                    task_feed::sequence,
                    task_feed::kind,
                    task_events::data.nullable(),
                    task_events::at_ms.nullable(),
                ))
                .into_boxed();
            if let Some(workspace) = filter.workspace {
                query = query.filter(task_feed::workspace_id.eq(workspace.to_string()));
            }
            if !filter.kinds.is_empty() {
                query = query.filter(task_feed::kind.eq_any(filter.kinds.clone()));
            }
            let rows: Vec<FeedRow> = query
                .order(task_feed::position.asc())
                .limit(i64::from(limit))
                .load(conn)
                .db()?;
            let more = rows.len() >= limit as usize;
            let through = match rows.last() {
                Some(row) if more => FeedCursor(u64::try_from(row.0).unwrap_or(0)),
                _ => head,
            };
            let changes = rows
                .into_iter()
                .filter_map(|row| change_of(row).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ChangesPage {
                changes,
                through,
                more,
            })
        })
        .await
    }
}

fn head(conn: &mut AnyConnection) -> Result<FeedCursor, StoreError> {
    let position: i64 = task_feed_head::table
        .find(1)
        .select(task_feed_head::position)
        .first(conn)
        .db()?;
    Ok(FeedCursor(u64::try_from(position).unwrap_or(0)))
}

/// A row as a change; None for an event whose task was deleted since.
fn change_of(row: FeedRow) -> Result<Option<TaskChange>, StoreError> {
    let (position, task, workspace, sequence, kind, data, at_ms) = row;
    let corrupt = |what: String| StoreError::Database(format!("task_feed {position}: {what}"));
    let task_id = TaskId::parse(&task).map_err(|e| corrupt(e.to_string()))?;
    let sequence = u64::try_from(sequence).map_err(|_| corrupt("negative sequence".into()))?;
    let what = if kind == TASK_DELETED {
        Changed::Deleted { sequence }
    } else {
        let (Some(data), Some(at_ms)) = (data, at_ms) else {
            return Ok(None);
        };
        Changed::Event(Event {
            task_id,
            sequence,
            kind: EventKind::parse(&kind).map_err(|e| corrupt(e.to_string()))?,
            data: serde_json::from_str(&data).map_err(|e| corrupt(e.to_string()))?,
            at_ms,
        })
    };
    Ok(Some(TaskChange {
        cursor: FeedCursor(
            u64::try_from(position).map_err(|_| corrupt("negative position".into()))?,
        ),
        workspace_id: workspace_id(&workspace)?,
        task_id,
        what,
    }))
}
