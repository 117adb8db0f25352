//! A finished tool call into its task's history on PostgreSQL, in one
//! statement: the write every call of every run pays.
//!
//! The general path ([`Store::change_task`]) is a transaction of five round
//! trips: `BEGIN`, the task locked, its event, the task's counters, `COMMIT`.
//! A tool call changes only the task's counters (history end, time, count of
//! calls), so it is written instead from the task as read a moment before,
//! unlocked: the same rules decide what the call adds ([`count_calls`],
//! [`spend_within`]), and one statement writes the counters and the event
//! only if the task's history end, budget and usage are still the ones read
//! ([`kept::RecordCall`]). A call that would warn of or stop on a budget,
//! or a task changed in between, is written by the general path instead:
//! that is where the rules that need more than the row run.

use super::connection::AnyConnection;
use super::kept::{RecordCall, TaskCounters};
use super::rows::{EventRow, TaskRow, db_sequence, to_json};
use super::spend::{count_calls, spend_within};
use super::tasks::{EventDraft, only_counters_changed, read_task_row};
use super::{Db, StoreError, task_cache};
use crate::domain::feed::in_feed;
use crate::domain::{Event, EventKind, TaskId, now_ms};

/// What the one statement did: the event it wrote, or the drafts given back
/// for the general path.
pub(super) type Recorded = Result<Vec<Event>, Vec<EventDraft>>;

/// Whether `drafts` may take the one-statement path: one tool call alone,
/// a kind that neither the task feed lists nor push notifications send (the
/// general path writes those in the same transaction).
pub(super) fn is_one_call(drafts: &[EventDraft]) -> bool {
    matches!(drafts, [(kind @ EventKind::ToolExecuted, _)]
        if !in_feed(*kind) && *kind != EventKind::StatusChanged)
}

/// Records `drafts` (one tool call: [`is_one_call`]) for task `id` in one
/// statement on PostgreSQL; gives them back when the general path must
/// write them (SQLite, a budget's warning or stop, a task changed meanwhile).
pub(super) fn record_at_once(
    conn: &mut AnyConnection,
    id: TaskId,
    drafts: Vec<EventDraft>,
) -> Result<Recorded, StoreError> {
    if !matches!(conn, AnyConnection::Pg(_)) || !is_one_call(&drafts) {
        return Ok(Err(drafts));
    }
    let read = read_task_row(conn, id)?;
    record_from(conn, read, drafts)
}

/// [`record_at_once`] from `read`, the task's row as read before: written
/// only if its history end, budget and usage are still those.
pub(super) fn record_from(
    conn: &mut AnyConnection,
    read: TaskRow,
    drafts: Vec<EventDraft>,
) -> Result<Recorded, StoreError> {
    let AnyConnection::Pg(pg) = conn else {
        return Ok(Err(drafts));
    };
    let (read_sequence, read_budget, read_usage) =
        (read.last_sequence, read.budget.clone(), read.usage.clone());
    let before = read.into_domain()?;
    let mut task = before.clone();
    count_calls(&mut task, &drafts);
    match spend_within(&mut task, None)? {
        Some(more) if more.is_empty() && only_counters_changed(&before, &task) => {}
        // A warning, a stop, or more than the counters to write.
        _ => return Ok(Err(drafts)),
    }
    let Some((kind, data)) = drafts.first().cloned() else {
        return Ok(Err(drafts));
    };
    let event = Event {
        task_id: before.id,
        sequence: before.last_sequence + 1,
        kind,
        data,
        at_ms: now_ms().max(before.updated_ms),
    };
    let row = EventRow::from_domain(&event)?;
    let written = RecordCall {
        counters: TaskCounters {
            id: row.task_id,
            updated_ms: row.at_ms,
            last_sequence: db_sequence(event.sequence)?,
            budget: to_json(&task.budget)?,
        },
        read_sequence,
        read_budget,
        read_usage,
        kind: row.kind,
        data: row.data,
    }
    .run(pg)
    .db()?;
    if written == 0 {
        // Changed since it was read: the general path locks it and decides.
        return Ok(Err(drafts));
    }
    task_cache::touched(event.task_id);
    Ok(Ok(vec![event]))
}
