//! What a task's writes spend against its budget and its workspace's
//! limits: the tool calls and model calls a transaction records, the
//! warnings they earn, and the runs a reached limit stops — decided by the
//! domain's rules (`policy::spend`), for the locked transaction
//! (`tasks::save_task`) and the one-statement record (`call_record`) alike.

use super::StoreError;
use super::connection::AnyConnection;
use super::tasks::EventDraft;
use crate::domain::{EventKind, Task, now_ms};

/// What the task spent in this transaction — model calls in its usage, tool
/// calls among `drafts` — meets its budget ([`crate::domain::policy::spend`]); a stop ends
/// its unfinished runs here, in the same transaction.
pub(super) fn spend(
    conn: &mut AnyConnection,
    before: &Task,
    task: &mut Task,
    drafts: &[EventDraft],
) -> Result<Vec<EventDraft>, StoreError> {
    let tool_calls = count_calls(task, drafts);
    if task.usage == before.usage && tool_calls == 0 {
        return Ok(Vec::new());
    }
    // A model call also counts against the workspace's spending limits.
    let workspace = if task.usage == before.usage {
        None
    } else {
        Some(super::usage::workspace_spend(
            conn,
            task.workspace_id,
            true,
        )?)
    };
    if let Some(events) = spend_within(task, workspace)? {
        return Ok(events);
    }
    let before_runs = super::runs::load_unfinished(conn, Some(task.id))?;
    let mut runs = before_runs.clone();
    let events = crate::domain::policy::spend(task, &mut runs, workspace, now_ms())?;
    for (before, run) in before_runs.iter().zip(&runs) {
        super::runs::save_run(conn, before, run)?;
    }
    Ok(events)
}

/// Counts the tool calls among `drafts` in `task`'s budget; how many.
pub(super) fn count_calls(task: &mut Task, drafts: &[EventDraft]) -> u64 {
    let tool_calls = drafts
        .iter()
        .filter(|(kind, _)| *kind == EventKind::ToolExecuted)
        .count() as u64;
    task.budget.tool_calls = task.budget.tool_calls.saturating_add(tool_calls);
    tool_calls
}

/// What `task`'s spending, counted, adds to its history when neither its
/// budget nor `workspace`'s limits are reached (warnings, or nothing): no run
/// changes. None when one is reached: its unfinished runs stop ([`spend`]).
pub(super) fn spend_within(
    task: &mut Task,
    workspace: Option<crate::domain::policy::WorkspaceSpend>,
) -> Result<Option<Vec<EventDraft>>, StoreError> {
    let workspace_reached =
        workspace.is_some_and(|w| w.limits.reached(w.today, w.this_month).is_some());
    if task.budget.reached(&task.usage, now_ms()).is_some() || workspace_reached {
        return Ok(None);
    }
    Ok(Some(crate::domain::policy::spend(
        task,
        &mut [],
        workspace,
        now_ms(),
    )?))
}
