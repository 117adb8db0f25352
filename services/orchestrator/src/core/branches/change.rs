//! A task's change read: a page of it (GetTaskChange), all of it as one
//! patch (the A2A artifact), and its summary (the completion report's).

use chorus_tool_exec::worktree;
use serde_json::json;
use tracing::warn;

use super::{is_commit_id, repository, tool_error};
use crate::domain::{BranchState, Task, TaskBranch, TaskId};
use crate::error::ServiceError;
use crate::state::AppState;

/// Which patches of a change GetTaskChange answers with.
#[derive(Debug, Clone, Default)]
pub struct ChangePage {
    /// Only these files' (empty: every file's, a page at a time).
    pub paths: Vec<String>,
    /// Files per page (0: [`DEFAULT_PAGE_FILES`]).
    pub page_size: u32,
    /// Files of the listing before this page.
    pub offset: usize,
}

/// Files whose patches a page holds when the request says 0.
pub const DEFAULT_PAGE_FILES: u32 = 20;
/// The most files a page holds.
pub const MAX_PAGE_FILES: u32 = 200;
/// Most bytes of one file's patch.
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;

/// One file's patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    pub path: String,
    pub patch: String,
    /// Cut at [`MAX_PATCH_BYTES`].
    pub truncated: bool,
}

/// A task's change as GetTaskChange answers it.
#[derive(Debug, Clone)]
pub struct ChangeView {
    pub branch: TaskBranch,
    pub change: worktree::Change,
    pub patches: Vec<FilePatch>,
    /// The offset of the next page, if there is one.
    pub next: Option<usize>,
}

/// `task_id`'s change: its commits and files against its base (what its
/// worktree holds uncommitted included), and one page of patches.
///
/// # Errors
/// FAILED_PRECONDITION for a task without a branch, or one never made,
/// landed or discarded (its change is in its base, or gone); INVALID_ARGUMENT
/// for a page size over the bound or a path the change does not list.
pub async fn change(
    state: &AppState,
    task_id: TaskId,
    page: ChangePage,
) -> Result<ChangeView, ServiceError> {
    let size = match page.page_size {
        0 => DEFAULT_PAGE_FILES,
        n if n > MAX_PAGE_FILES => {
            return Err(ServiceError::Invalid(format!(
                "page_size: at most {MAX_PAGE_FILES} files"
            )));
        }
        n => n,
    } as usize;
    let task = state.store.get_task(task_id).await?;
    let Some(branch) = task.branch.clone() else {
        return Err(ServiceError::Precondition(format!(
            "task {task_id} has no branch of its own ({}), so it has no change to show; see the files it changed in its history",
            task.branch_note
                .as_deref()
                .unwrap_or("it was made before tasks had branches")
        )));
    };
    match branch.state {
        BranchState::Planned => {
            return Err(ServiceError::Precondition(format!(
                "task {task_id} has not started, so its branch '{}' was not made yet",
                branch.name
            )));
        }
        BranchState::Landed | BranchState::Discarded => {
            return Err(ServiceError::Precondition(format!(
                "task {task_id}'s change was {}{}; its branch is gone",
                branch.state.as_str(),
                branch
                    .landed
                    .as_ref()
                    .map(|l| format!(" as commit {}", l.commit))
                    .unwrap_or_default()
            )));
        }
        BranchState::Open | BranchState::Kept => {}
    }
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let repo = repository(state, &workspace);
    let name = TaskBranch::worktree_name(task_id);
    let open = (branch.state == BranchState::Open).then_some(name.as_str());
    let base = if is_commit_id(&branch.base) {
        branch.base.clone()
    } else {
        format!("refs/heads/{}", branch.base)
    };
    // A base deleted since: measured from where the branch started.
    let base = match (repo.commit_of(&base).await, &branch.start_commit) {
        (Ok(_), _) => base,
        (Err(_), Some(start)) => start.clone(),
        (Err(e), None) => return Err(tool_error(e)),
    };
    let change = repo
        .change(&branch.name, &base, open)
        .await
        .map_err(tool_error)?;
    let listed: Vec<&str> = change.files.iter().map(|f| f.path.as_str()).collect();
    let (wanted, next): (Vec<String>, Option<usize>) = if page.paths.is_empty() {
        let end = page.offset.saturating_add(size).min(listed.len());
        let wanted = listed
            .get(page.offset.min(end)..end)
            .unwrap_or_default()
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        (wanted, (end < listed.len()).then_some(end))
    } else {
        if let Some(unknown) = page.paths.iter().find(|p| !listed.contains(&p.as_str())) {
            return Err(ServiceError::Invalid(format!(
                "paths: '{unknown}' is not a file of this change; give paths as its files list them"
            )));
        }
        if page.paths.len() > MAX_PAGE_FILES as usize {
            return Err(ServiceError::Invalid(format!(
                "paths: at most {MAX_PAGE_FILES} at once"
            )));
        }
        (page.paths, None)
    };
    let mut patches = Vec::with_capacity(wanted.len());
    for path in wanted {
        // A rename's patch needs both of its paths.
        let mut paths = vec![path.clone()];
        if let Some(old) = change
            .files
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| f.old_path.clone())
        {
            paths.push(old);
        }
        let (patch, truncated) = repo
            .patch(
                &change.base_commit,
                &branch.name,
                open,
                &paths,
                MAX_PATCH_BYTES,
            )
            .await
            .map_err(tool_error)?;
        patches.push(FilePatch {
            path,
            patch,
            truncated,
        });
    }
    Ok(ChangeView {
        branch,
        change,
        patches,
        next,
    })
}

/// Most bytes of a whole change's patch in one answer (an A2A artifact).
pub const MAX_WHOLE_PATCH_BYTES: usize = 4 * 1024 * 1024;

/// A task's whole change as one patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeChange {
    pub branch: String,
    pub base: String,
    pub base_commit: String,
    pub head_commit: String,
    /// The paths it changes.
    pub files: Vec<String>,
    pub patch: String,
    /// Cut at [`MAX_WHOLE_PATCH_BYTES`].
    pub truncated: bool,
}

/// `task`'s whole change as one patch, when it has a branch with a change
/// to show (made, and neither landed nor discarded) and changed anything;
/// None, logged, when it cannot be read (it is an extra of an answer,
/// which does not fail for it).
pub async fn whole_change(state: &AppState, task: &Task) -> Option<WholeChange> {
    match read_whole_change(state, task).await {
        Ok(change) => change,
        Err(e) => {
            warn!(task_id = %task.id, error = %e, "the task's change could not be read for its artifact");
            None
        }
    }
}

async fn read_whole_change(
    state: &AppState,
    task: &Task,
) -> Result<Option<WholeChange>, ServiceError> {
    let Some(branch) = task
        .branch
        .as_ref()
        .filter(|b| matches!(b.state, BranchState::Open | BranchState::Kept))
    else {
        return Ok(None);
    };
    let view = change(
        state,
        task.id,
        ChangePage {
            paths: Vec::new(),
            page_size: 1,
            offset: usize::MAX,
        },
    )
    .await?;
    if view.change.files.is_empty() {
        return Ok(None);
    }
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let name = TaskBranch::worktree_name(task.id);
    let open = (branch.state == BranchState::Open).then_some(name.as_str());
    let (patch, truncated) = repository(state, &workspace)
        .patch(
            &view.change.base_commit,
            &branch.name,
            open,
            &[],
            MAX_WHOLE_PATCH_BYTES,
        )
        .await
        .map_err(tool_error)?;
    Ok(Some(WholeChange {
        branch: branch.name.clone(),
        base: branch.base.clone(),
        base_commit: view.change.base_commit,
        head_commit: view.change.head_commit,
        files: view.change.files.into_iter().map(|f| f.path).collect(),
        patch,
        truncated,
    }))
}

/// Most files listed in a report's change (the rest are counted).
pub const MAX_SUMMARY_FILES: usize = 200;

/// `task_id`'s change as a completion report records it: its branch, its
/// commits and its files with their counts, which of them uncommitted.
/// None when it has no branch with a change to show, or it cannot be read
/// (logged: the report stands without it).
pub async fn summary(state: &AppState, task_id: TaskId) -> Option<serde_json::Value> {
    let task = state.store.get_task(task_id).await.ok()?;
    task.branch
        .as_ref()
        .filter(|b| matches!(b.state, BranchState::Open | BranchState::Kept))?;
    let page = ChangePage {
        paths: Vec::new(),
        page_size: 1,
        offset: usize::MAX,
    };
    let view = match change(state, task_id, page).await {
        Ok(view) => view,
        Err(e) => {
            warn!(task_id = %task_id, error = %e, "the task's change could not be read for its report");
            return None;
        }
    };
    let c = &view.change;
    let files: Vec<serde_json::Value> = c
        .files
        .iter()
        .take(MAX_SUMMARY_FILES)
        .map(|f| {
            json!({
                "path": f.path,
                "old_path": f.old_path,
                "status": f.status,
                "additions": f.additions,
                "deletions": f.deletions,
                "uncommitted": c.uncommitted.contains(&f.path),
            })
        })
        .collect();
    Some(json!({
        "branch": view.branch.name,
        "base": view.branch.base,
        "base_commit": c.base_commit,
        "head_commit": c.head_commit,
        "commits": c.commits.iter().map(|k| json!({"id": k.id, "summary": k.summary})).collect::<Vec<_>>(),
        "more_commits": c.more_commits,
        "files": files,
        "more_files": c.files.len().saturating_sub(MAX_SUMMARY_FILES),
        "uncommitted": c.uncommitted.len(),
    }))
}
