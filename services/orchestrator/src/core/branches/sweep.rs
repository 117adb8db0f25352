//! Every task worktree accounted for: at start before the service answers,
//! then hourly (a workspace's keep_unlanded_days).

use chorus_tool_exec::worktree::Repository;
use tracing::{info, warn};

use super::{repository, tool_error, try_keep};
use crate::domain::{BranchState, TaskId, Workspace, now_ms};
use crate::error::ServiceError;
use crate::state::AppState;

/// What a sweep of the task worktrees found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Worktrees of tasks whose branch is open: kept where they are.
    pub open: usize,
    /// Worktrees removed: of tasks deleted, landed, discarded, canceled
    /// while no replica could remove them, or past keep_unlanded_days.
    pub removed: usize,
    /// Worktrees being made (their task's record not written yet), or that
    /// could not be removed: left for the next sweep.
    pub left: usize,
}

/// How often the worktrees are swept after the first sweep at start.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Sweeps every [`SWEEP_EVERY`] until `stop` (the first sweep is the
/// start's: [`sweep_logged`] before the service answers).
pub async fn keep_sweeping(state: AppState, stop: tokio_util::sync::CancellationToken) {
    let first = tokio::time::Instant::now() + SWEEP_EVERY;
    let mut tick = tokio::time::interval_at(first, SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => sweep_logged(&state).await,
        }
    }
}

/// [`sweep`], its findings or its failure logged.
pub async fn sweep_logged(state: &AppState) {
    match sweep(state).await {
        Ok(found) => info!(
            open = found.open,
            removed = found.removed,
            left = found.left,
            "task worktrees accounted for"
        ),
        Err(e) => {
            warn!(error = %e, "the task worktrees could not be swept; the next sweep tries again")
        }
    }
}

/// Accounts for every task worktree of every workspace that is a
/// repository: each is a task's whose branch is open, or it is removed
/// (what it held uncommitted kept on its branch when the task may still
/// land); the repository's records of worktrees gone are pruned. Open
/// worktrees of tasks that ended longer ago than their workspace's
/// keep_unlanded_days are removed too, their branches kept, and their
/// histories say so.
///
/// # Errors
/// A store that fails.
pub async fn sweep(state: &AppState) -> Result<Sweep, ServiceError> {
    let mut found = Sweep::default();
    let now = now_ms();
    for workspace in state.store.list_workspaces().await? {
        if !Repository::is_repository(&workspace.root) {
            continue;
        }
        let repo = repository(state, &workspace);
        for name in repo.worktree_names() {
            match sweep_one(state, &workspace, &repo, &name, now).await {
                Ok(true) => found.removed += 1,
                Ok(false) => found.open += 1,
                Err(e) => {
                    warn!(workspace = %workspace.name, worktree = %name, error = %e, "a task worktree could not be accounted for");
                    found.left += 1;
                }
            }
        }
        if let Err(e) = repo.prune().await {
            warn!(workspace = %workspace.name, error = %e, "the repository's worktree records could not be pruned");
        }
    }
    Ok(found)
}

/// Keeps or removes one worktree: true when removed.
async fn sweep_one(
    state: &AppState,
    workspace: &Workspace,
    repo: &Repository,
    name: &str,
    now: i64,
) -> Result<bool, ServiceError> {
    let task = match TaskId::parse(name) {
        Ok(id) => match state.store.get_task(id).await {
            Ok(task) if task.workspace_id == workspace.id => Some(task),
            Ok(_) | Err(crate::store::StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        },
        Err(_) => None,
    };
    let Some(task) = task else {
        // No task of this workspace has it: a deleted task's, say.
        repo.remove_worktree(name, None).await.map_err(tool_error)?;
        info!(workspace = %workspace.name, worktree = %name, "a worktree of no task was removed");
        return Ok(true);
    };
    let Some(branch) = &task.branch else {
        repo.remove_worktree(name, None).await.map_err(tool_error)?;
        return Ok(true);
    };
    match branch.state {
        // Being made by a start (here or on another replica).
        BranchState::Planned => Err(ServiceError::Precondition(
            "its task's start is making it".to_owned(),
        )),
        BranchState::Open if task.status == crate::domain::TaskStatus::Canceled => {
            try_keep(state, task.id, "the task was canceled").await?;
            Ok(true)
        }
        BranchState::Open => {
            let days = workspace.changes.keep_unlanded_days;
            if branch.past_keeping(task.status, task.updated_ms, days, now) {
                try_keep(
                    state,
                    task.id,
                    &format!("over for more than {days} day(s), the workspace's keep_unlanded_days, neither landed nor discarded"),
                )
                .await?;
                return Ok(true);
            }
            Ok(false)
        }
        BranchState::Kept => {
            // Left over from a removal that stopped half-way.
            repo.remove_worktree(name, Some(&format!("Uncommitted work of task {}", task.id)))
                .await
                .map_err(tool_error)?;
            Ok(true)
        }
        BranchState::Landed | BranchState::Discarded => {
            repo.remove_worktree(name, None).await.map_err(tool_error)?;
            Ok(true)
        }
    }
}
