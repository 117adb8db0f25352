//! Start-up recovery. Runs the store shows unfinished were being driven by an
//! orchestrator that is gone (this database has one orchestrator at a time): each
//! is marked interrupted (`run_interrupted`; a handoff among them fails as
//! interrupted, which is what its stream shows when re-opened), and its task
//! waits (or, if it was being planned, fails to be planned again). There is no
//! process to look for: every process of a run lived in its sandbox, which the
//! kernel killed when the old orchestrator died (parent-death signal to the
//! launcher, whose PID namespace died with it).

use std::collections::BTreeSet;

use tracing::info;

use crate::domain::{TaskId, now_ms, policy};
use crate::state::AppState;
use crate::store::StoreError;

/// Why recovered runs ended.
pub const INTERRUPTED: &str = "interrupted: the orchestrator stopped while it ran";

/// Marks every unfinished run interrupted; returns how many runs were recovered.
///
/// # Errors
/// The store could not be read or written.
pub async fn recover(state: &AppState) -> Result<usize, StoreError> {
    let runs = state.store.unfinished_runs().await?;
    let tasks: BTreeSet<TaskId> = runs.iter().map(|r| r.task_id).collect();
    for task in tasks {
        let now = now_ms();
        let (_, _, events) = state
            .store
            .change_task_runs(task, move |task, runs| {
                policy::interrupt_task(task, runs, INTERRUPTED, now)
            })
            .await?;
        state.publish(&events);
    }
    if !runs.is_empty() {
        info!(
            runs = runs.len(),
            "marked the runs of the previous orchestrator interrupted"
        );
    }
    Ok(runs.len())
}
