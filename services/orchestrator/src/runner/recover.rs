//! Start-up recovery. Runs the store shows unfinished were being driven by an
//! orchestrator that is gone (this database has one orchestrator at a time): each
//! is marked interrupted (`run_interrupted`; a handoff among them fails as
//! interrupted, which is what its stream shows when re-opened), its task waits
//! (or, if it was being planned, fails to be planned again), and whatever is left
//! of its processes is killed by its run marker. The CLI itself died with the old
//! orchestrator (parent-death signal); its children may not have.

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::sweep::kill_run_processes;
use crate::domain::{TaskId, now_ms, policy};
use crate::state::AppState;
use crate::store::StoreError;

/// Why recovered runs ended.
pub const INTERRUPTED: &str = "interrupted: the orchestrator stopped while it ran";

/// Marks every unfinished run interrupted and kills its leftover processes;
/// returns how many runs were recovered.
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
    let grace = state.runner.config().kill_grace;
    for run in &runs {
        let left = kill_run_processes(None, &run.id.to_string(), None, grace).await;
        if !left.is_empty() {
            warn!(run_id = %run.id, ?left, "processes of an interrupted run survived SIGKILL");
        }
    }
    if !runs.is_empty() {
        info!(
            runs = runs.len(),
            "marked the runs of the previous orchestrator interrupted"
        );
    }
    Ok(runs.len())
}
