//! A task's own branch: in a workspace that is a git repository, each task
//! works in its own worktree on its own branch, and its product is its
//! change, landed into its base or discarded.

use std::path::PathBuf;

use super::{DomainError, TaskId, TaskStatus};

/// How a task's branch lands in its base.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandMode {
    /// Only when the base has not moved since the branch left it.
    FastForward,
    /// A fast-forward when the base has not moved, else a merge commit.
    #[default]
    Merge,
    /// One new commit on the base holding the branch's whole change.
    Squash,
}

impl LandMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FastForward => "fast_forward",
            Self::Merge => "merge",
            Self::Squash => "squash",
        }
    }
}

/// How a workspace's tasks make their changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct WorkspaceChanges {
    /// Each task in its own worktree on its own branch (a repository only).
    pub task_worktrees: bool,
    /// How LandTask lands unless the call says.
    pub land_mode: LandMode,
    /// Days after a task ended that its unlanded worktree is removed (its
    /// branch kept); 0: kept until landed or discarded.
    pub keep_unlanded_days: u32,
}

impl Default for WorkspaceChanges {
    fn default() -> Self {
        Self {
            task_worktrees: true,
            land_mode: LandMode::Merge,
            keep_unlanded_days: 0,
        }
    }
}

const DAY_MS: i64 = 24 * 3600 * 1000;

/// The most days `keep_unlanded_days` may say (ten years).
pub const MAX_KEEP_DAYS: u32 = 3650;

impl WorkspaceChanges {
    pub fn check(&self) -> Result<(), DomainError> {
        if self.keep_unlanded_days > MAX_KEEP_DAYS {
            return Err(DomainError::invalid(
                "keep_unlanded_days",
                format!(
                    "at most {MAX_KEEP_DAYS} (ten years); 0 keeps them until landed or discarded"
                ),
            ));
        }
        Ok(())
    }
}

/// Where a task's branch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchState {
    /// Named, not made yet: its worktree is made when the task first starts.
    Planned,
    /// It has a worktree, where its runs act.
    Open,
    /// Its worktree was removed and the branch kept (with what was not
    /// committed committed on it).
    Kept,
    Landed,
    Discarded,
}

impl BranchState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Planned => "planned",
            Self::Open => "open",
            Self::Kept => "kept",
            Self::Landed => "landed",
            Self::Discarded => "discarded",
        }
    }
}

/// A landing: the base's new commit, by whom, when and how.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Landing {
    pub commit: String,
    pub by: String,
    pub at_ms: i64,
    pub mode: LandMode,
}

/// A discarding: by whom and when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Discarding {
    pub by: String,
    pub at_ms: i64,
}

/// A task's own branch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskBranch {
    /// e.g. `chorus/1a2b3c4d`.
    pub name: String,
    /// What it starts from and lands into: a branch name, or a commit.
    pub base: String,
    /// The commit it started from, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_commit: Option<String>,
    /// Its worktree, while it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<PathBuf>,
    pub state: BranchState,
    /// When its task ended last, for keep_unlanded_days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<Landing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discarded: Option<Discarding>,
    /// The task whose branch this one took over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<TaskId>,
    /// The task that took this branch over (it lands or discards it now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_by: Option<TaskId>,
    /// Whether the task makes its branch (a new one from its base), not
    /// takes over the branch of the task it continues.
    #[serde(default = "yes")]
    pub made: bool,
}

fn yes() -> bool {
    true
}

impl TaskBranch {
    /// The default branch of `task`: `chorus/<first 8 characters of its id>`.
    pub fn default_name(task: TaskId) -> String {
        let id = task.to_string();
        format!("chorus/{}", &id[..8])
    }

    /// The worktree name of `task`'s branch: its id.
    pub fn worktree_name(task: TaskId) -> String {
        task.to_string()
    }

    /// A branch planned for a task; made when it first starts.
    pub fn planned(name: String, base: String, continues: Option<TaskId>) -> Self {
        Self {
            name,
            base,
            start_commit: None,
            worktree: None,
            state: BranchState::Planned,
            ended_ms: None,
            landed: None,
            discarded: None,
            continued_by: None,
            made: continues.is_none(),
            continues,
        }
    }

    /// True while it may still land or be discarded.
    pub fn is_live(&self) -> bool {
        matches!(
            self.state,
            BranchState::Planned | BranchState::Open | BranchState::Kept
        )
    }

    /// Checks a branch name a caller gives (git checks the rest when it is
    /// made): not empty, no option, no whitespace or control characters.
    pub fn check_name(name: &str) -> Result<(), DomainError> {
        let bad = |why: &str| Err(DomainError::invalid("branch", format!("'{name}' {why}")));
        if name.is_empty() {
            return bad("is empty");
        }
        if name.len() > 200 {
            return bad("is longer than 200 bytes");
        }
        if name.starts_with('-') {
            return bad("must not start with '-'");
        }
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("must not contain spaces or control characters");
        }
        if name.contains("..")
            || name.contains("@{")
            || name.ends_with('/')
            || name.ends_with(".lock")
        {
            return bad("is not a valid git branch name");
        }
        Ok(())
    }

    /// Whether its worktree has been kept past `keep_days` (0: forever)
    /// at `now_ms`: its task over (`status`), ended at `ended_ms` (its
    /// last change when it was not recorded), and neither landed nor
    /// discarded.
    pub fn past_keeping(
        &self,
        status: TaskStatus,
        updated_ms: i64,
        keep_days: u32,
        now_ms: i64,
    ) -> bool {
        let ended = self.ended_ms.unwrap_or(updated_ms);
        keep_days > 0
            && self.state == BranchState::Open
            && status.is_terminal()
            && now_ms.saturating_sub(ended) > i64::from(keep_days) * DAY_MS
    }

    /// Checks a run of its task may start: not once its change was landed
    /// or discarded, nor once another task continues it.
    pub fn check_start(&self) -> Result<(), DomainError> {
        if let Some(by) = self.continued_by {
            return Err(DomainError::Transition(format!(
                "task {by} continues this task's work on its branch; start that task"
            )));
        }
        if matches!(self.state, BranchState::Landed | BranchState::Discarded) {
            return Err(DomainError::Transition(format!(
                "the task's change was {}; create a new task for more work (continue_task_id takes a branch that was not)",
                self.state.as_str()
            )));
        }
        Ok(())
    }

    /// Checks `self` may be landed or discarded now, by a task in `status`.
    pub fn check_settle(&self, status: TaskStatus, what: &str) -> Result<(), DomainError> {
        if let Some(by) = self.continued_by {
            return Err(DomainError::Transition(format!(
                "task {by} continues this task's work on its branch; {what} that task's change instead"
            )));
        }
        match self.state {
            BranchState::Landed => {
                return Err(DomainError::Transition(format!(
                    "the task's branch was landed already ({}); there is nothing to {what}",
                    self.landed.as_ref().map_or("", |l| l.commit.as_str())
                )));
            }
            BranchState::Discarded => {
                return Err(DomainError::Transition(format!(
                    "the task's branch was discarded already; there is nothing to {what}"
                )));
            }
            BranchState::Planned if what == "land" => {
                return Err(DomainError::Transition(
                    "the task never started, so its branch was never made; there is nothing to land"
                        .to_owned(),
                ));
            }
            _ => {}
        }
        if matches!(status, TaskStatus::Active | TaskStatus::Planning) {
            return Err(DomainError::Transition(format!(
                "the task is {}; cancel it or let it finish before you {what} its change",
                status.as_str()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_branch_is_named_after_the_task() {
        let id = TaskId::parse("1a2b3c4d-0000-4000-8000-000000000000").expect("id");
        assert_eq!(TaskBranch::default_name(id), "chorus/1a2b3c4d");
        assert_eq!(
            TaskBranch::worktree_name(id),
            "1a2b3c4d-0000-4000-8000-000000000000"
        );
    }

    #[test]
    fn branch_names_that_git_would_read_otherwise_are_refused() {
        for good in ["feature/login", "chorus/x", "fix-1"] {
            assert!(TaskBranch::check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-f", "a b", "a..b", "x@{1}", "x/", "x.lock", "a\nb"] {
            assert!(TaskBranch::check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_live_branch_of_a_task_at_rest_lands() {
        let mut branch = TaskBranch::planned("chorus/x".into(), "main".into(), None);
        assert!(
            branch.check_settle(TaskStatus::Completed, "land").is_err(),
            "never made"
        );
        assert!(
            branch
                .check_settle(TaskStatus::Completed, "discard")
                .is_ok()
        );
        branch.state = BranchState::Open;
        assert!(branch.check_settle(TaskStatus::Completed, "land").is_ok());
        let err = branch
            .check_settle(TaskStatus::Active, "land")
            .expect_err("active");
        assert!(
            err.to_string().contains("cancel it or let it finish"),
            "{err}"
        );
        branch.state = BranchState::Landed;
        assert!(
            branch
                .check_settle(TaskStatus::Completed, "discard")
                .is_err()
        );
    }

    #[test]
    fn an_unlanded_worktree_is_kept_as_long_as_its_workspace_says() {
        let mut branch = TaskBranch::planned("chorus/x".into(), "main".into(), None);
        branch.state = BranchState::Open;
        let ended = 1_000_000;
        let later = |days: i64| ended + days * DAY_MS + 1;
        assert!(branch.past_keeping(TaskStatus::Completed, ended, 7, later(7)));
        assert!(!branch.past_keeping(TaskStatus::Completed, ended, 7, later(6)));
        assert!(
            !branch.past_keeping(TaskStatus::Completed, ended, 0, later(3650)),
            "0 keeps it"
        );
        assert!(
            !branch.past_keeping(TaskStatus::Waiting, ended, 7, later(30)),
            "not over"
        );
        branch.ended_ms = Some(later(5));
        assert!(
            !branch.past_keeping(TaskStatus::Completed, ended, 7, later(7)),
            "its end counts"
        );
        branch.state = BranchState::Kept;
        assert!(
            !branch.past_keeping(TaskStatus::Completed, ended, 1, later(30)),
            "no worktree"
        );
    }

    #[test]
    fn settings_read_with_defaults_for_what_they_leave_out() {
        let read: WorkspaceChanges = serde_json::from_str("{}").expect("json");
        assert_eq!(read, WorkspaceChanges::default());
        assert!(read.task_worktrees);
        let read: WorkspaceChanges =
            serde_json::from_str(r#"{"land_mode":"squash"}"#).expect("json");
        assert_eq!(read.land_mode, LandMode::Squash);
        assert!(
            WorkspaceChanges {
                keep_unlanded_days: MAX_KEEP_DAYS + 1,
                ..WorkspaceChanges::default()
            }
            .check()
            .is_err()
        );
    }
}
