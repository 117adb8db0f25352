//! Task status and the one transition table that manual and system changes share.

use std::fmt;
use std::str::FromStr;

use super::DomainError;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Created; not planned yet.
    Pending,
    /// The planner is working on it.
    Planning,
    /// The planner asked questions; waiting for the user's answers.
    AwaitingInput,
    /// A plan exists; ready to start.
    Planned,
    /// An agent is working on it.
    Active,
    /// Paused: blocked, or an agent ended without a report.
    Waiting,
    Completed,
    Failed,
    Canceled,
}

use TaskStatus::*;

impl TaskStatus {
    pub const ALL: [TaskStatus; 9] = [
        Pending,
        Planning,
        AwaitingInput,
        Planned,
        Active,
        Waiting,
        Completed,
        Failed,
        Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Pending => "pending",
            Planning => "planning",
            AwaitingInput => "awaiting_input",
            Planned => "planned",
            Active => "active",
            Waiting => "waiting",
            Completed => "completed",
            Failed => "failed",
            Canceled => "canceled",
        }
    }

    /// The statuses this one may move to. The single table of the system.
    pub fn successors(self) -> &'static [TaskStatus] {
        match self {
            Pending => &[Planning, Failed, Canceled],
            Planning => &[AwaitingInput, Planned, Failed, Canceled],
            AwaitingInput => &[Planning, Failed, Canceled],
            Planned => &[Planning, Active, Failed, Canceled],
            Active => &[Waiting, Completed, Failed, Canceled],
            Waiting => &[Active, Completed, Failed, Canceled],
            Failed | Canceled => &[Pending],
            Completed => &[],
        }
    }

    /// True for statuses no agent works from: completed, failed, canceled.
    pub fn is_terminal(self) -> bool {
        matches!(self, Completed | Failed | Canceled)
    }

    /// What a person has to do for a task in this status, when nothing else
    /// will move it: answer the planner (awaiting_input), start the plan
    /// (planned), start it again or cancel it (waiting). None while the system
    /// works on it or once it is final.
    pub fn needs_you(self) -> Option<&'static str> {
        match self {
            AwaitingInput => Some(
                "answer the planner's questions: SubmitAnswers with one answer per question (chorus task answer)",
            ),
            Planned => {
                Some("start it: StartTask, naming an agent or the plan's (chorus task start)")
            }
            Waiting => Some(
                "start it again: StartTask (chorus task start); or cancel it: CancelTask (chorus task cancel)",
            ),
            Pending | Planning | Active | Completed | Failed | Canceled => None,
        }
    }

    /// Checks a move to `to` against the table.
    pub fn check_transition(self, to: TaskStatus) -> Result<(), DomainError> {
        if self.successors().contains(&to) {
            return Ok(());
        }
        let allowed = self
            .successors()
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>();
        Err(DomainError::Transition(if allowed.is_empty() {
            format!("cannot move a task from {self} to {to}: {self} is final")
        } else {
            format!(
                "cannot move a task from {self} to {to}; from {self} it can move to: {}",
                allowed.join(", ")
            )
        }))
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = DomainError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                let known = Self::ALL.map(TaskStatus::as_str).join(", ");
                DomainError::invalid("status", format!("unknown status '{s}'; one of: {known}"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_allows_exactly_these_moves() {
        let allowed: Vec<(&str, &str)> = TaskStatus::ALL
            .into_iter()
            .flat_map(|from| TaskStatus::ALL.into_iter().map(move |to| (from, to)))
            .filter(|(from, to)| from.check_transition(*to).is_ok())
            .map(|(from, to)| (from.as_str(), to.as_str()))
            .collect();
        assert_eq!(
            allowed,
            [
                ("pending", "planning"),
                ("pending", "failed"),
                ("pending", "canceled"),
                ("planning", "awaiting_input"),
                ("planning", "planned"),
                ("planning", "failed"),
                ("planning", "canceled"),
                ("awaiting_input", "planning"),
                ("awaiting_input", "failed"),
                ("awaiting_input", "canceled"),
                ("planned", "planning"),
                ("planned", "active"),
                ("planned", "failed"),
                ("planned", "canceled"),
                ("active", "waiting"),
                ("active", "completed"),
                ("active", "failed"),
                ("active", "canceled"),
                ("waiting", "active"),
                ("waiting", "completed"),
                ("waiting", "failed"),
                ("waiting", "canceled"),
                ("failed", "pending"),
                ("canceled", "pending"),
            ]
        );
    }

    #[test]
    fn refused_moves_say_what_is_allowed() {
        let err = TaskStatus::Pending
            .check_transition(TaskStatus::Completed)
            .expect_err("refused")
            .to_string();
        assert_eq!(
            err,
            "cannot move a task from pending to completed; from pending it can move to: planning, failed, canceled"
        );
        let err = TaskStatus::Completed
            .check_transition(TaskStatus::Pending)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("completed is final"), "{err}");
    }

    #[test]
    fn statuses_round_trip_through_their_names() {
        for status in TaskStatus::ALL {
            assert_eq!(status.as_str().parse::<TaskStatus>(), Ok(status));
            assert_eq!(serde_json::to_value(status).expect("json"), status.as_str());
        }
        let err = "done"
            .parse::<TaskStatus>()
            .expect_err("unknown")
            .to_string();
        assert!(err.contains("awaiting_input"), "{err}");
    }
}
