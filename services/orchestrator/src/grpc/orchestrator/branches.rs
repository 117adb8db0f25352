//! A task's own branch on the wire: GetTaskChange, LandTask, DiscardTask,
//! and the branch and workspace settings in Task and Workspace.

use chorus_proto::orchestrator::v1 as pb;

use crate::core::branches::{self as core, ChangePage};
use crate::domain::{DomainError, LandMode, TaskBranch, WorkspaceChanges};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

/// A task's branch on the wire.
pub fn branch(b: &TaskBranch) -> pb::TaskBranch {
    pb::TaskBranch {
        name: b.name.clone(),
        base: b.base.clone(),
        start_commit: b.start_commit.clone().unwrap_or_default(),
        worktree: b
            .worktree
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        state: b.state.as_str().to_owned(),
        landed_commit: b
            .landed
            .as_ref()
            .map(|l| l.commit.clone())
            .unwrap_or_default(),
        landed_by: b.landed.as_ref().map(|l| l.by.clone()).unwrap_or_default(),
        landed_ms: b.landed.as_ref().map_or(0, |l| l.at_ms),
        land_mode: b
            .landed
            .as_ref()
            .map_or(pb::LandMode::Unspecified, |l| land_mode(l.mode))
            .into(),
        discarded_by: b
            .discarded
            .as_ref()
            .map(|d| d.by.clone())
            .unwrap_or_default(),
        discarded_ms: b.discarded.as_ref().map_or(0, |d| d.at_ms),
        continues_task_id: b.continues.map(|t| t.to_string()).unwrap_or_default(),
    }
}

fn land_mode(mode: LandMode) -> pb::LandMode {
    match mode {
        LandMode::FastForward => pb::LandMode::FastForward,
        LandMode::Merge => pb::LandMode::Merge,
        LandMode::Squash => pb::LandMode::Squash,
    }
}

/// A land mode from the wire; None for unspecified.
fn land_mode_from(field: &'static str, value: i32) -> Result<Option<LandMode>, DomainError> {
    match pb::LandMode::try_from(value) {
        Ok(pb::LandMode::Unspecified) => Ok(None),
        Ok(pb::LandMode::FastForward) => Ok(Some(LandMode::FastForward)),
        Ok(pb::LandMode::Merge) => Ok(Some(LandMode::Merge)),
        Ok(pb::LandMode::Squash) => Ok(Some(LandMode::Squash)),
        Err(_) => Err(DomainError::invalid(
            field,
            format!("{value} is not a land mode (1 fast_forward, 2 merge, 3 squash)"),
        )),
    }
}

pub fn workspace_changes(c: &WorkspaceChanges) -> pb::WorkspaceChanges {
    pb::WorkspaceChanges {
        task_worktrees: Some(c.task_worktrees),
        land_mode: land_mode(c.land_mode).into(),
        keep_unlanded_days: c.keep_unlanded_days,
    }
}

/// A workspace's settings for changes from the wire: what it leaves out is
/// the default.
pub fn workspace_changes_from(c: pb::WorkspaceChanges) -> Result<WorkspaceChanges, DomainError> {
    let defaults = WorkspaceChanges::default();
    let changes = WorkspaceChanges {
        task_worktrees: c.task_worktrees.unwrap_or(defaults.task_worktrees),
        land_mode: land_mode_from("changes.land_mode", c.land_mode)?.unwrap_or(defaults.land_mode),
        keep_unlanded_days: c.keep_unlanded_days,
    };
    changes.check()?;
    Ok(changes)
}

/// The name a landing or discarding records: the caller's key.
pub(super) fn caller(principal: Option<&chorus_auth::Principal>) -> String {
    principal.map_or_else(|| "anonymous".to_owned(), chorus_auth::Principal::describe)
}

pub(super) async fn land(
    state: &AppState,
    req: pb::LandTaskRequest,
    principal: Option<&chorus_auth::Principal>,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_id("task_id", &req.task_id)?;
    let mode = land_mode_from("mode", req.mode)?;
    let task = core::land(
        state,
        id,
        mode,
        convert::non_empty(req.message),
        caller(principal),
    )
    .await?;
    Ok(convert::task(&task))
}

pub(super) async fn discard(
    state: &AppState,
    req: pb::DiscardTaskRequest,
    principal: Option<&chorus_auth::Principal>,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_id("task_id", &req.task_id)?;
    let task = core::discard(state, id, caller(principal)).await?;
    Ok(convert::task(&task))
}

pub(super) async fn change(
    state: &AppState,
    req: pb::GetTaskChangeRequest,
) -> Result<pb::GetTaskChangeResponse, ServiceError> {
    let id = convert::task_id("task_id", &req.task_id)?;
    let offset = match req.page_token.as_str() {
        "" => 0,
        token => token.parse::<usize>().map_err(|_| {
            ServiceError::Invalid(format!(
                "page_token: '{token}' is not a token this service gave; pass next_page_token of the previous page"
            ))
        })?,
    };
    let page = ChangePage {
        paths: req.paths,
        page_size: req.page_size,
        offset,
    };
    let view = core::change(state, id, page).await?;
    Ok(pb::GetTaskChangeResponse {
        branch: Some(branch(&view.branch)),
        base_commit: view.change.base_commit,
        head_commit: view.change.head_commit,
        commits: view
            .change
            .commits
            .into_iter()
            .map(|c| pb::ChangeCommit {
                id: c.id,
                author: c.author,
                time_ms: c.time_secs.saturating_mul(1000),
                summary: c.summary,
            })
            .collect(),
        more_commits: view.change.more_commits,
        files: view
            .change
            .files
            .into_iter()
            .map(|f| pb::ChangedFile {
                uncommitted: view.change.uncommitted.contains(&f.path),
                path: f.path,
                old_path: f.old_path.unwrap_or_default(),
                status: f.status.to_owned(),
                additions: f.additions,
                deletions: f.deletions,
            })
            .collect(),
        patches: view
            .patches
            .into_iter()
            .map(|p| pb::FilePatch {
                path: p.path,
                patch: p.patch,
                truncated: p.truncated,
            })
            .collect(),
        next_page_token: view.next.map(|n| n.to_string()).unwrap_or_default(),
    })
}
