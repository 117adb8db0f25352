//! History events: every change to a task, numbered per task without gaps.

use super::{DomainError, TaskId, TaskStatus};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    TaskCreated,
    StatusChanged,
    StageChanged,
    PlanningUpdated,
    PlanningStarted,
    PlanningCompleted,
    PlanningQuestionsReturned,
    PlanningFailed,
    AnswersSubmitted,
    AgentStarted,
    AgentCompleted,
    AgentProgress,
    AgentHandoffStarted,
    AgentHandoffCompleted,
    ToolExecuted,
    ToolDenied,
    CommentAdded,
    CompletionReportSubmitted,
    PlannerOutputSubmitted,
    RunOpened,
    RunFailed,
    RunCanceled,
    RunInterrupted,
    /// A live replica took over a run whose replica died or shut down, and
    /// resumed its session.
    RunResumed,
    /// The run waits for a place: its replica drives as many runs as it
    /// may at once (`--max-running-runs`); it starts when one ends.
    RunQueued,
    /// What the task spent passed 80 % of a limit of its budget.
    BudgetWarning,
    /// What the task spent reached a limit of its budget: its runs stopped.
    BudgetExceeded,
    /// The task's budget was set.
    BudgetChanged,
    /// The task's worktree was made on its branch.
    BranchOpened,
    /// The task's worktree was removed and its branch kept (canceled, or
    /// past the workspace's keep_unlanded_days).
    BranchKept,
    /// The task's branch was landed into its base.
    TaskLanded,
    /// The task's worktree and branch were discarded.
    TaskDiscarded,
    /// A call waits for a person's answer (an `ask` approval rule).
    ApprovalRequested,
    /// A waiting call was answered: approved, denied, or ended by its
    /// deadline or its run's end.
    ApprovalAnswered,
}

impl EventKind {
    pub const ALL: [EventKind; 34] = [
        Self::TaskCreated,
        Self::StatusChanged,
        Self::StageChanged,
        Self::PlanningUpdated,
        Self::PlanningStarted,
        Self::PlanningCompleted,
        Self::PlanningQuestionsReturned,
        Self::PlanningFailed,
        Self::AnswersSubmitted,
        Self::AgentStarted,
        Self::AgentCompleted,
        Self::AgentProgress,
        Self::AgentHandoffStarted,
        Self::AgentHandoffCompleted,
        Self::ToolExecuted,
        Self::ToolDenied,
        Self::CommentAdded,
        Self::CompletionReportSubmitted,
        Self::PlannerOutputSubmitted,
        Self::RunOpened,
        Self::RunFailed,
        Self::RunCanceled,
        Self::RunInterrupted,
        Self::RunResumed,
        Self::RunQueued,
        Self::BudgetWarning,
        Self::BudgetExceeded,
        Self::BudgetChanged,
        Self::BranchOpened,
        Self::BranchKept,
        Self::TaskLanded,
        Self::TaskDiscarded,
        Self::ApprovalRequested,
        Self::ApprovalAnswered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TaskCreated => "task_created",
            Self::StatusChanged => "status_changed",
            Self::StageChanged => "stage_changed",
            Self::PlanningUpdated => "planning_updated",
            Self::PlanningStarted => "planning_started",
            Self::PlanningCompleted => "planning_completed",
            Self::PlanningQuestionsReturned => "planning_questions_returned",
            Self::PlanningFailed => "planning_failed",
            Self::AnswersSubmitted => "answers_submitted",
            Self::AgentStarted => "agent_started",
            Self::AgentCompleted => "agent_completed",
            Self::AgentProgress => "agent_progress",
            Self::AgentHandoffStarted => "agent_handoff_started",
            Self::AgentHandoffCompleted => "agent_handoff_completed",
            Self::ToolExecuted => "tool_executed",
            Self::ToolDenied => "tool_denied",
            Self::CommentAdded => "comment_added",
            Self::CompletionReportSubmitted => "completion_report_submitted",
            Self::PlannerOutputSubmitted => "planner_output_submitted",
            Self::RunOpened => "run_opened",
            Self::RunFailed => "run_failed",
            Self::RunCanceled => "run_canceled",
            Self::RunInterrupted => "run_interrupted",
            Self::RunResumed => "run_resumed",
            Self::RunQueued => "run_queued",
            Self::BudgetWarning => "budget_warning",
            Self::BudgetExceeded => "budget_exceeded",
            Self::BudgetChanged => "budget_changed",
            Self::BranchOpened => "branch_opened",
            Self::BranchKept => "branch_kept",
            Self::TaskLanded => "task_landed",
            Self::TaskDiscarded => "task_discarded",
            Self::ApprovalRequested => "approval_requested",
            Self::ApprovalAnswered => "approval_answered",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| DomainError::invalid("event kind", format!("unknown event kind '{s}'")))
    }
}

/// One history event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub task_id: TaskId,
    /// 1, 2, 3, ... per task, with no gaps.
    pub sequence: u64,
    pub kind: EventKind,
    /// A JSON object with the event's facts.
    pub data: serde_json::Value,
    pub at_ms: i64,
}

/// An event that leaves a task waiting for a person: a status change (the
/// status it entered, why, and what to do), or a call that asks for approval
/// (`approval`, the approval's id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedsYou {
    /// The status entered (awaiting_input, planned, waiting), or `approval`.
    pub status: &'static str,
    pub reason: Option<String>,
    pub action: String,
    /// For an approval: its id.
    pub approval_id: Option<String>,
}

/// What to do about a call that asks for approval.
pub const APPROVAL_ACTION: &str = "approve or deny the call: AnswerApproval with the task and approval ids (chorus approve TASK APPROVAL [--for-task | --deny REASON])";

impl Event {
    /// The status this event moved its task to, for a status change.
    pub fn status_entered(&self) -> Option<TaskStatus> {
        if self.kind != EventKind::StatusChanged {
            return None;
        }
        self.data.get("to")?.as_str()?.parse().ok()
    }

    /// Whether this event leaves the task waiting for a person (see
    /// [`TaskStatus::needs_you`]), or asks for a call's approval.
    pub fn needs_you(&self) -> Option<NeedsYou> {
        let text = |name: &str| {
            self.data
                .get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        if self.kind == EventKind::ApprovalRequested {
            return Some(NeedsYou {
                status: "approval",
                reason: Some(format!(
                    "{} asks to run {} (rule '{}')",
                    text("agent").unwrap_or_default(),
                    text("tool").unwrap_or_default(),
                    text("rule").unwrap_or_default()
                )),
                action: APPROVAL_ACTION.to_owned(),
                approval_id: text("approval_id"),
            });
        }
        let status = self.status_entered()?;
        Some(NeedsYou {
            status: status.as_str(),
            action: status.needs_you()?.to_owned(),
            reason: text("reason"),
            approval_id: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Ok(kind));
            assert_eq!(serde_json::to_value(kind).expect("json"), kind.as_str());
        }
    }
}
