//! Tasks: what the user asked for, its planning and where it stands.

use super::{DomainError, Name, Stage, TaskStatus, WorkspaceId};

/// Identifies a task.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TaskId(pub uuid::Uuid);

impl TaskId {
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    pub fn parse(value: &str) -> Result<Self, DomainError> {
        uuid::Uuid::parse_str(value)
            .map(Self)
            .map_err(|_| DomainError::invalid("task id", format!("'{value}' is not a UUID")))
    }
}

impl Default for TaskId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a task came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskSource {
    /// e.g. "grpc", "web", "terminal", "test".
    pub kind: String,
    pub user_id: Option<String>,
    pub conversation_id: Option<String>,
    /// The caller's id for the request that made the task (an A2A message's
    /// `messageId`): the same caller sending it again gets the same task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl TaskSource {
    /// What makes a request the same one again: its id, from the same kind
    /// of source and the same caller. None when the request had no id.
    pub fn request_key(&self) -> Option<String> {
        let id = self.request_id.as_deref()?;
        Some(json_key(
            &self.kind,
            self.user_id.as_deref().unwrap_or(""),
            id,
        ))
    }
}

/// Three strings as one key no other three make (a JSON array).
fn json_key(kind: &str, user: &str, id: &str) -> String {
    serde_json::Value::from(vec![kind, user, id]).to_string()
}

/// What starts a task once its plan is made, so that nobody has to: set by
/// a caller that hands a task over whole (an A2A message), None when a person
/// starts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AutoStart {
    /// The agent to start; None: the one the plan assigns.
    pub agent: Option<Name>,
}

/// One planner question and the user's answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Question {
    pub question: String,
    pub answer: Option<String>,
    /// The planning round that asked it: 1 for the planner's first questions,
    /// 2 for those it asks after reading the first answers, and so on.
    #[serde(default = "first_round")]
    pub round: u32,
}

fn first_round() -> u32 {
    1
}

/// The planning fields of a task.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Planning {
    pub summary: Option<String>,
    pub requirements: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub plan: Vec<String>,
    pub questions: Vec<Question>,
    pub assigned_agent: Option<Name>,
}

impl Planning {
    /// The latest planning round that asked questions (0 before any).
    pub fn latest_round(&self) -> u32 {
        self.questions.iter().map(|q| q.round).max().unwrap_or(0)
    }

    /// The questions of the latest round: the ones answers go to.
    pub fn open_questions(&mut self) -> impl Iterator<Item = &mut Question> {
        let round = self.latest_round();
        self.questions.iter_mut().filter(move |q| q.round == round)
    }

    /// Adds a round of the planner's questions after those asked before (which
    /// stay, with their answers: the planner reads them all).
    pub fn ask(&mut self, questions: &[String]) {
        let round = self.latest_round() + 1;
        self.questions
            .extend(questions.iter().map(|question| Question {
                question: question.clone(),
                answer: None,
                round,
            }));
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    pub workspace_id: WorkspaceId,
    pub description: String,
    pub source: TaskSource,
    pub status: TaskStatus,
    /// Why the task is waiting or failed, when it is.
    pub status_reason: Option<String>,
    pub stage: Stage,
    pub planning: Planning,
    /// The agent working on the task now (the innermost run of a handoff chain).
    pub current_agent: Option<Name>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// Sequence number of the task's latest history event.
    pub last_sequence: u64,
    /// What the model calls of all its runs have cost.
    pub usage: super::Usage,
    /// What it may spend, and its tool calls so far.
    pub budget: super::TaskBudget,
    /// Started by itself once planned, when set.
    pub auto_start: Option<AutoStart>,
    /// Its own branch and worktree (a workspace that is a git repository
    /// with task worktrees on).
    pub branch: Option<super::TaskBranch>,
    /// Why it has no branch of its own, when it has none.
    pub branch_note: Option<String>,
    /// Its calls that wait for approval (and the last answered), and the
    /// rules approved for the rest of it.
    pub approvals: super::approval::Approvals,
}

impl Task {
    /// The conversation the task belongs to: its source's, else its own id
    /// (a task alone is a conversation of one).
    pub fn conversation(&self) -> String {
        self.source
            .conversation_id
            .clone()
            .unwrap_or_else(|| self.id.to_string())
    }

    /// True when no agent ever worked on it: it never went active (planning
    /// is not work on it). A task that failed so was refused, not failed.
    pub fn never_started(&self) -> bool {
        self.budget.active_ms == 0 && self.budget.active_since_ms.is_none()
    }

    /// Whether it waits for a person now: its status says so, except a
    /// planned task that starts by itself.
    pub fn needs_you(&self) -> Option<&'static str> {
        if self.status == TaskStatus::Planned && self.auto_start.is_some() {
            return None;
        }
        self.status.needs_you()
    }

    /// Checks a task description: not blank, at most 64 KiB.
    pub fn check_description(description: &str) -> Result<(), DomainError> {
        if description.trim().is_empty() {
            return Err(DomainError::invalid("description", "must not be empty"));
        }
        if description.len() > 64 * 1024 {
            return Err(DomainError::invalid(
                "description",
                format!("is {} bytes; the limit is 65536", description.len()),
            ));
        }
        Ok(())
    }
}
