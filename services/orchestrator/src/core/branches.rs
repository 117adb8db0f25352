//! Each task's own branch: planned when the task is made, its worktree made
//! when it first starts, read as a change, landed into its base or
//! discarded, and removed by every ending that does not keep it.
//!
//! The git work is [`chorus_tool_exec::worktree::Repository`]'s, in the run
//! sandbox as the workspace's owner; the rules (what may land, when) are the
//! domain's ([`crate::domain::TaskBranch`]); this module joins them with the
//! store, one task at a time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use chorus_tool_exec::ToolError;
use chorus_tool_exec::worktree::{self, Refused, Repository};
use serde_json::json;
use tracing::{info, warn};

use crate::domain::{
    BranchState, Discarding, EventKind, LandMode, Landing, Task, TaskBranch, TaskId, Workspace,
    now_ms, policy,
};
use crate::error::ServiceError;
use crate::state::AppState;

mod change;
mod sweep;

pub use change::{
    ChangePage, ChangeView, DEFAULT_PAGE_FILES, FilePatch, MAX_PAGE_FILES, MAX_PATCH_BYTES,
    MAX_SUMMARY_FILES, MAX_WHOLE_PATCH_BYTES, WholeChange, change, summary, whole_change,
};
pub use sweep::{SWEEP_EVERY, Sweep, keep_sweeping, sweep, sweep_logged};

/// What CreateTask asks of a task's branch.
#[derive(Debug, Clone, Default)]
pub struct BranchRequest {
    pub name: Option<String>,
    pub base: Option<String>,
    /// The task whose branch it takes over.
    pub continues: Option<TaskId>,
}

impl BranchRequest {
    fn is_empty(&self) -> bool {
        self.name.is_none() && self.base.is_none() && self.continues.is_none()
    }
}

const NOT_A_REPOSITORY: &str = "the workspace's root is not the top level of a git repository, so the task works in the workspace's directory itself";
const WORKTREES_OFF: &str = "the workspace's task_worktrees setting is off, so the task works in the workspace's directory itself";

/// The repository of `workspace`, for the service's own git work.
pub fn repository(state: &AppState, workspace: &Workspace) -> Repository {
    Repository::new(
        &workspace.root,
        state.runner.processes().clone(),
        chorus_tool_exec::Limits::default(),
        state.shutdown.clone(),
    )
}

/// The branch a new task of `workspace` gets, or why it gets none.
///
/// # Errors
/// INVALID_ARGUMENT for a bad branch name; FAILED_PRECONDITION when a
/// branch is asked of a workspace whose tasks get none, or the task to
/// continue cannot be continued; NOT_FOUND for an unknown such task.
pub async fn plan(
    state: &AppState,
    workspace: &Workspace,
    req: BranchRequest,
) -> Result<(Option<TaskBranch>, Option<String>), ServiceError> {
    let why_none = if !workspace.changes.task_worktrees {
        Some(WORKTREES_OFF)
    } else if !Repository::is_repository(&workspace.root) {
        Some(NOT_A_REPOSITORY)
    } else {
        None
    };
    if let Some(why) = why_none {
        if !req.is_empty() {
            return Err(ServiceError::Precondition(format!(
                "branch, base_ref and continue_task_id need a task of its own branch, and {why}"
            )));
        }
        return Ok((None, Some(why.to_owned())));
    }
    if let Some(name) = &req.name {
        TaskBranch::check_name(name)?;
    }
    if let Some(base) = &req.base {
        TaskBranch::check_name(base).map_err(|e| {
            ServiceError::Invalid(e.to_string().replace("invalid branch", "invalid base_ref"))
        })?;
    }
    if let Some(earlier) = req.continues {
        if req.name.is_some() || req.base.is_some() {
            return Err(ServiceError::Invalid(
                "continue_task_id: the task takes that task's branch and base; leave branch and base_ref out".to_owned(),
            ));
        }
        let earlier = state.store.get_task(earlier).await?;
        if earlier.workspace_id != workspace.id {
            return Err(ServiceError::Invalid(format!(
                "continue_task_id: task {} is of another workspace",
                earlier.id
            )));
        }
        let branch = continuable(&earlier)?;
        return Ok((
            Some(TaskBranch::planned(
                branch.name.clone(),
                branch.base.clone(),
                Some(earlier.id),
            )),
            None,
        ));
    }
    // Named when it is made (the default name needs the task's id), from
    // the workspace's HEAD unless a base was given.
    Ok((
        Some(TaskBranch::planned(
            req.name.unwrap_or_default(),
            req.base.unwrap_or_default(),
            None,
        )),
        None,
    ))
}

/// The branch of `earlier` a follow-up may take over: a task that is over,
/// whose branch was made and is neither landed, discarded nor continued.
fn continuable(earlier: &Task) -> Result<&TaskBranch, ServiceError> {
    let Some(branch) = &earlier.branch else {
        return Err(ServiceError::Precondition(format!(
            "continue_task_id: task {} has no branch of its own",
            earlier.id
        )));
    };
    if !earlier.status.is_terminal() {
        return Err(ServiceError::Precondition(format!(
            "continue_task_id: task {} is {}; continue it once it is over (completed, failed or canceled)",
            earlier.id,
            earlier.status.as_str()
        )));
    }
    if let Some(by) = branch.continued_by {
        return Err(ServiceError::Precondition(format!(
            "continue_task_id: task {by} continues task {} already; continue that one",
            earlier.id
        )));
    }
    match branch.state {
        BranchState::Open | BranchState::Kept => Ok(branch),
        BranchState::Planned => Err(ServiceError::Precondition(format!(
            "continue_task_id: task {} never started, so its branch was never made",
            earlier.id
        ))),
        BranchState::Landed | BranchState::Discarded => Err(ServiceError::Precondition(format!(
            "continue_task_id: task {}'s branch was {} already; create a new task from its base",
            earlier.id,
            branch.state.as_str()
        ))),
    }
}

/// Checks a run of `task` may start as far as its branch goes.
///
/// # Errors
/// FAILED_PRECONDITION for a task whose change was landed or discarded, or
/// that another task continues.
pub fn check_startable(task: &Task) -> Result<(), ServiceError> {
    match &task.branch {
        Some(branch) => Ok(branch.check_start()?),
        None => Ok(()),
    }
}

/// Where the runs of `task` act: its worktree while it has one, else the
/// workspace's root.
pub fn root_of(task: &Task, workspace: &Workspace) -> PathBuf {
    task.branch
        .as_ref()
        .filter(|b| b.state == BranchState::Open)
        .and_then(|b| b.worktree.clone())
        .unwrap_or_else(|| workspace.root.clone())
}

/// Changes `task_id`'s branch as `f` says and records the event `f` names,
/// in one transaction (nothing, for a task without a branch).
async fn change_branch<F>(state: &AppState, task_id: TaskId, f: F) -> Result<Task, ServiceError>
where
    F: FnOnce(&mut TaskBranch) -> (EventKind, serde_json::Value) + Send + 'static,
{
    let (task, _) = state
        .store
        .change_task(task_id, move |task| {
            Ok(task.branch.as_mut().map(f).into_iter().collect())
        })
        .await?;
    Ok(task)
}

/// One task's branch work at a time in this process (a worktree made while
/// it lands, say), and one landing per workspace (they move its base).
#[derive(Debug, Default)]
pub struct BranchLocks {
    held: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl BranchLocks {
    async fn lock(&self, key: String) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut held = self
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(held.entry(key).or_default())
        };
        lock.lock_owned().await
    }
}

/// Makes `task`'s worktree if it should have one and has none (its first
/// start, a start after it was kept, a worktree that was removed by hand),
/// and returns the task as it stands and the root its runs act in. A task
/// whose change was landed or discarded does not start again.
/// (StartTask and PlanTask check that first: [`check_startable`].)
///
/// # Errors
/// FAILED_PRECONDITION for a landed or discarded task, or with git's
/// message when the worktree cannot be made.
pub async fn open(
    state: &AppState,
    task: Task,
    workspace: &Workspace,
) -> Result<Opened, ServiceError> {
    let Some(branch) = task.branch.clone() else {
        let root = workspace.root.clone();
        return Ok(Opened {
            task,
            root,
            note: None,
        });
    };
    branch.check_start()?;
    if branch.state == BranchState::Open && branch.worktree.as_ref().is_some_and(|p| p.is_dir()) {
        let root = root_of(&task, workspace);
        return Ok(Opened {
            task,
            root,
            note: None,
        });
    }
    let _held = state.branch_locks.lock(task.id.to_string()).await;
    // As it stands now: another start may have made it meanwhile.
    let task = state.store.get_task(task.id).await?;
    let Some(branch) = task.branch.clone() else {
        let root = workspace.root.clone();
        return Ok(Opened {
            task,
            root,
            note: None,
        });
    };
    if branch.state == BranchState::Open && branch.worktree.as_ref().is_some_and(|p| p.is_dir()) {
        let root = root_of(&task, workspace);
        return Ok(Opened {
            task,
            root,
            note: None,
        });
    }
    let repo = repository(state, workspace);
    let name = if branch.name.is_empty() {
        TaskBranch::default_name(task.id)
    } else {
        branch.name.clone()
    };
    let base = base_of(&repo, &branch.base).await?;
    if let Some(earlier) = branch.continues
        && branch.state == BranchState::Planned
    {
        take_over(state, &repo, earlier, task.id).await?;
    }
    // A branch made before (kept, or taken over) is checked out as it is.
    let new_branch = branch.state == BranchState::Planned && branch.made;
    let start = if new_branch {
        base.clone()
    } else {
        name.clone()
    };
    let reach = if is_commit_id(&base) {
        base.clone()
    } else {
        format!("refs/heads/{base}")
    };
    let made = repo
        .add_worktree(
            &TaskBranch::worktree_name(task.id),
            &name,
            &start,
            new_branch,
            &reach,
        )
        .await
        .map_err(tool_error)?;
    let path = made.path.clone();
    // A follow-up starts with its base's new commits brought in.
    let note = match branch.continues {
        Some(earlier) if branch.state == BranchState::Planned => {
            bring_in(&repo, task.id, earlier, &name, &base).await?
        }
        _ => None,
    };
    let told = note.clone();
    let task = change_branch(state, task.id, move |branch| {
        branch.name.clone_from(&name);
        branch.base.clone_from(&base);
        branch.start_commit.get_or_insert(made.start_commit.clone());
        branch.worktree = Some(made.path.clone());
        branch.state = BranchState::Open;
        (
            EventKind::BranchOpened,
            json!({
                "branch": name,
                "base": base,
                "start_commit": made.start_commit,
                "worktree": made.path,
                "note": told,
            }),
        )
    })
    .await?;
    info!(task_id = %task.id, worktree = %path.display(), "task worktree made");
    Ok(Opened {
        task,
        root: path,
        note,
    })
}

/// What a branch starts from and lands into, as `given` (empty: the
/// workspace's HEAD) names it: a branch by its name, anything else (a tag,
/// a commit) as its commit.
async fn base_of(repo: &Repository, given: &str) -> Result<String, ServiceError> {
    if given.is_empty() {
        return Ok(match repo.current_branch().await.map_err(tool_error)? {
            Some(current) => current,
            None => repo.commit_of("HEAD").await.map_err(tool_error)?,
        });
    }
    if is_commit_id(given) || repo.commit_of(&format!("refs/heads/{given}")).await.is_ok() {
        return Ok(given.to_owned());
    }
    repo.commit_of(given).await.map_err(|_| {
        ServiceError::Invalid(format!(
            "base_ref: '{given}' names no branch, tag or commit of the workspace's repository"
        ))
    })
}

/// A task ready to run: as it stands, the root its runs act in, and what
/// its agent is told of its branch (a follow-up's base brought in).
#[derive(Debug)]
pub struct Opened {
    pub task: Task,
    pub root: PathBuf,
    pub note: Option<String>,
}

/// Brings `base` into a follow-up's worktree; what its agent is told.
async fn bring_in(
    repo: &Repository,
    task: TaskId,
    earlier: TaskId,
    branch: &str,
    base: &str,
) -> Result<Option<String>, ServiceError> {
    let reach = if is_commit_id(base) {
        base.to_owned()
    } else {
        format!("refs/heads/{base}")
    };
    let message = format!("Bring {base} into {branch} (task {task}, continuing task {earlier})");
    Ok(
        match repo
            .bring_in(&TaskBranch::worktree_name(task), &reach, &message)
            .await
            .map_err(tool_error)?
        {
            worktree::BroughtIn::UpToDate => None,
            worktree::BroughtIn::Merged(commit) => Some(format!(
                "This task continues task {earlier} on branch {branch}. {base} had moved on since; its new commits were merged into the branch (commit {commit})."
            )),
            worktree::BroughtIn::Conflicts(files) => Some(format!(
                "This task continues task {earlier} on branch {branch}. {base} had moved on since; merging its new commits into the branch conflicts in {}: those files hold git's conflict markers (<<<<<<<, =======, >>>>>>>). Resolve each conflict in the files; the merge is concluded with the task's change when it lands.",
                files.join(", ")
            )),
        },
    )
}

/// A follow-up takes `earlier`'s branch: its worktree (if any) is removed
/// with what it held uncommitted committed on the branch, and it records
/// who continues it.
async fn take_over(
    state: &AppState,
    repo: &Repository,
    earlier: TaskId,
    by: TaskId,
) -> Result<(), ServiceError> {
    let task = state.store.get_task(earlier).await?;
    continuable(&task)?;
    let snapshot = repo
        .remove_worktree(
            &TaskBranch::worktree_name(earlier),
            Some(&format!(
                "Uncommitted work of task {earlier}, continued by task {by}"
            )),
        )
        .await
        .map_err(tool_error)?;
    let why = format!("task {by} continues its work on the branch");
    change_branch(state, earlier, move |branch| {
        branch.continued_by = Some(by);
        kept(branch, why, snapshot)
    })
    .await?;
    Ok(())
}

/// `branch` without its worktree, kept, and the event saying `why`.
fn kept(
    branch: &mut TaskBranch,
    why: String,
    snapshot: Option<String>,
) -> (EventKind, serde_json::Value) {
    branch.worktree = None;
    branch.state = BranchState::Kept;
    (
        EventKind::BranchKept,
        json!({
            "branch": branch.name,
            "why": why,
            "snapshot_commit": snapshot,
            "continued_by": branch.continued_by.map(|t| t.to_string()),
        }),
    )
}

/// Removes the worktree of a task that ended without its change being kept
/// there (canceled): what it held uncommitted is committed on its branch,
/// which stays until the change is landed or discarded. Failures are logged:
/// the ending stands, and a restart removes what is left.
pub async fn keep(state: &AppState, task_id: TaskId, why: &str) {
    if let Err(e) = try_keep(state, task_id, why).await {
        warn!(task_id = %task_id, error = %e, "the task's worktree could not be removed; the next start of the service removes it");
    }
}

async fn try_keep(state: &AppState, task_id: TaskId, why: &str) -> Result<(), ServiceError> {
    let _held = state.branch_locks.lock(task_id.to_string()).await;
    let task = state.store.get_task(task_id).await?;
    let Some(branch) = task.branch.clone() else {
        return Ok(());
    };
    if branch.state != BranchState::Open {
        return Ok(());
    }
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let snapshot = repository(state, &workspace)
        .remove_worktree(
            &TaskBranch::worktree_name(task_id),
            Some(&format!("Uncommitted work of task {task_id}, kept: {why}")),
        )
        .await
        .map_err(tool_error)?;
    let why = why.to_owned();
    let ended = now_ms();
    change_branch(state, task_id, move |branch| {
        branch.ended_ms = Some(ended);
        kept(branch, why, snapshot)
    })
    .await?;
    Ok(())
}

/// Lands `task_id`'s change into its base: all of its work (its branch and
/// what its worktree holds uncommitted) as `mode` says (the workspace's
/// land_mode when None), with `message` (the task's description when None)
/// for a merge or squash commit. Its worktree and branch are removed after.
///
/// # Errors
/// FAILED_PRECONDITION when a run of it is going, its branch cannot land
/// (never made, landed or discarded already), on a conflict (naming the
/// files) or a base that cannot move, nothing changed.
pub async fn land(
    state: &AppState,
    task_id: TaskId,
    mode: Option<LandMode>,
    message: Option<String>,
    by: String,
) -> Result<Task, ServiceError> {
    let task = state.store.get_task(task_id).await?;
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let _held = state.branch_locks.lock(workspace.id.to_string()).await;
    let _task_held = state.branch_locks.lock(task_id.to_string()).await;
    let (task, branch) = settleable(state, task_id, "land").await?;
    let mode = mode.unwrap_or(workspace.changes.land_mode);
    let repo = repository(state, &workspace);
    let worktree = TaskBranch::worktree_name(task_id);
    let tip = if branch.state == BranchState::Open {
        repo.whole_commit(
            &worktree,
            &format!("Uncommitted work of task {task_id}, landed with it"),
        )
        .await
        .map_err(tool_error)?
    } else {
        branch.name.clone()
    };
    let message = message
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| land_message(&task));
    let landed = repo
        .land(&tip, &branch.base, mode.into(), &message, ("Chorus", "chorus@chorus.invalid"))
        .await
        .map_err(|refused| match refused {
            Ok(Refused::Conflict(files)) => ServiceError::Precondition(format!(
                "task {task_id}'s change conflicts with '{}' in {}; nothing was changed: continue the task with a follow-up (continue_task_id) that brings '{}' in, then land that",
                branch.base,
                files.join(", "),
                branch.base
            )),
            Ok(Refused::Other(why)) => ServiceError::Precondition(format!(
                "task {task_id}'s change was not landed: {why}; nothing was changed"
            )),
            Err(e) => tool_error(e),
        })?;
    // Landed: what follows tidies up, and the landing is recorded whatever.
    if let Err(e) = repo.remove_worktree(&worktree, None).await {
        warn!(task_id = %task_id, error = %e, "the landed task's worktree could not be removed; the next start of the service removes it");
    }
    // The branch is this task's (made by it, or taken over from the task it
    // continues): landed, it goes.
    if let Err(e) = repo.delete_branch(&branch.name).await {
        warn!(task_id = %task_id, error = %e, "the landed task's branch could not be deleted");
    }
    let landing = Landing {
        commit: landed.commit.clone(),
        by,
        at_ms: now_ms(),
        mode,
    };
    let task = change_branch(state, task_id, move |branch| {
        branch.worktree = None;
        branch.state = BranchState::Landed;
        branch.landed = Some(landing.clone());
        (
            EventKind::TaskLanded,
            json!({
                "branch": branch.name,
                "base": branch.base,
                "commit": landing.commit,
                "by": landing.by,
                "mode": landing.mode.as_str(),
                "fast_forward": landed.fast_forward,
            }),
        )
    })
    .await?;
    info!(task_id = %task_id, commit = %task.branch.as_ref().and_then(|b| b.landed.as_ref()).map_or("", |l| l.commit.as_str()), "task landed");
    Ok(task)
}

/// Discards `task_id`'s change: its worktree and (when the task made it)
/// its branch are removed.
///
/// # Errors
/// FAILED_PRECONDITION when a run of it is going, or its branch was landed
/// or discarded already.
pub async fn discard(state: &AppState, task_id: TaskId, by: String) -> Result<Task, ServiceError> {
    let _held = state.branch_locks.lock(task_id.to_string()).await;
    let (task, branch) = settleable(state, task_id, "discard").await?;
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    remove(state, &workspace, task_id, &branch).await?;
    let discarding = Discarding {
        by,
        at_ms: now_ms(),
    };
    change_branch(state, task_id, move |branch| {
        branch.worktree = None;
        branch.state = BranchState::Discarded;
        branch.discarded = Some(discarding.clone());
        (
            EventKind::TaskDiscarded,
            json!({ "branch": branch.name, "by": discarding.by }),
        )
    })
    .await
}

/// Removes what a task deleted leaves: its worktree, and its branch when it
/// made it and did not land it. Errors are logged: the task is gone.
pub async fn forget(state: &AppState, task: &Task) {
    let Some(branch) = &task.branch else {
        return;
    };
    if !branch.is_live() || branch.state == BranchState::Planned {
        return;
    }
    let workspace = match state.store.get_workspace(task.workspace_id).await {
        Ok(workspace) => workspace,
        Err(e) => {
            warn!(task_id = %task.id, error = %e, "the deleted task's worktree could not be removed");
            return;
        }
    };
    if let Err(e) = remove(state, &workspace, task.id, branch).await {
        warn!(task_id = %task.id, error = %e, "the deleted task's worktree could not be removed; the next start of the service removes it");
    }
}

/// Removes a task's worktree and the branch it made.
async fn remove(
    state: &AppState,
    workspace: &Workspace,
    task_id: TaskId,
    branch: &TaskBranch,
) -> Result<(), ServiceError> {
    let repo = repository(state, workspace);
    if !Repository::is_repository(&workspace.root) {
        return Ok(());
    }
    repo.remove_worktree(&TaskBranch::worktree_name(task_id), None)
        .await
        .map_err(tool_error)?;
    // A task continued by another hands it its branch.
    if branch.state != BranchState::Planned && branch.continued_by.is_none() {
        repo.delete_branch(&branch.name).await.map_err(tool_error)?;
    }
    Ok(())
}

/// The task and its branch, checked to be landable or discardable now:
/// no run of it going, and the branch live.
async fn settleable(
    state: &AppState,
    task_id: TaskId,
    what: &str,
) -> Result<(Task, TaskBranch), ServiceError> {
    let task = state.store.get_task(task_id).await?;
    let Some(branch) = task.branch.clone() else {
        return Err(ServiceError::Precondition(format!(
            "task {task_id} has no branch of its own ({}); there is nothing to {what}",
            task.branch_note
                .as_deref()
                .unwrap_or("it was made before tasks had branches")
        )));
    };
    branch.check_settle(task.status, what)?;
    let runs = state.store.list_runs(task_id).await?;
    let live: Vec<_> = runs
        .into_iter()
        .filter(|r| r.finished_ms.is_none())
        .collect();
    policy::check_no_live_runs(&task, &live)?;
    Ok((task, branch))
}

/// The message of a merge or squash commit: the task's description's first
/// line and its id.
fn land_message(task: &Task) -> String {
    let first = task
        .description
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("A task's change")
        .trim();
    let first: String = first.chars().take(100).collect();
    format!("{first}\n\nLanded by Chorus from task {}.\n", task.id)
}

/// Whether `s` is a full commit id (a base given as one).
fn is_commit_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// A git failure as the service's error.
pub fn tool_error(e: ToolError) -> ServiceError {
    match e {
        ToolError::InvalidArguments { message, .. } => ServiceError::Invalid(message),
        ToolError::ShuttingDown => ServiceError::Unavailable(
            "the service is shutting down; try again on another replica".to_owned(),
        ),
        other => ServiceError::Precondition(other.to_string()),
    }
}

impl From<LandMode> for worktree::LandMode {
    fn from(mode: LandMode) -> Self {
        match mode {
            LandMode::FastForward => Self::FastForward,
            LandMode::Merge => Self::Merge,
            LandMode::Squash => Self::Squash,
        }
    }
}
