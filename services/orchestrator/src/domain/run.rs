//! Runs: one agent execution each, with a typed state.

use chorus_catalog::args::{CompletionReport, PlannerOutput};

use super::{DomainError, Name, TaskId, Usage};

/// Identifies a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct RunId(pub uuid::Uuid);

impl RunId {
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    pub fn parse(value: &str) -> Result<Self, DomainError> {
        uuid::Uuid::parse_str(value)
            .map(Self)
            .map_err(|_| DomainError::invalid("run id", format!("'{value}' is not a UUID")))
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a run is. Tool calls reach only Active runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Being started: no process or API session yet. Tool calls get "agent is still starting".
    Spawning,
    /// Working: tool calls are routed to it.
    Active,
    /// Waiting for a child run it handed off to.
    AwaitingHandoff,
    /// Ended. Nothing it does is accepted any more.
    Finished,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spawning => "spawning",
            Self::Active => "active",
            Self::AwaitingHandoff => "awaiting_handoff",
            Self::Finished => "finished",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        [
            Self::Spawning,
            Self::Active,
            Self::AwaitingHandoff,
            Self::Finished,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
        .ok_or_else(|| DomainError::invalid("run state", format!("unknown run state '{s}'")))
    }

    /// Checks a state change: Spawning → Active → (AwaitingHandoff ⇄ Active) →
    /// Finished; any state may finish.
    pub fn check_transition(self, to: RunState) -> Result<(), DomainError> {
        let ok = matches!(
            (self, to),
            (Self::Spawning, Self::Active)
                | (Self::Active, Self::AwaitingHandoff)
                | (Self::AwaitingHandoff, Self::Active)
                | (
                    Self::Spawning | Self::Active | Self::AwaitingHandoff,
                    Self::Finished
                )
        );
        if ok {
            Ok(())
        } else {
            Err(DomainError::Transition(format!(
                "a run cannot go from {} to {}",
                self.as_str(),
                to.as_str()
            )))
        }
    }
}

/// One agent execution on a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: RunId,
    pub task_id: TaskId,
    pub agent: Name,
    /// The run that handed off to this one.
    pub parent: Option<RunId>,
    pub state: RunState,
    /// Tool names granted to the run (profiles expanded).
    pub tools: Vec<String>,
    /// Its approval rules, and its handoff ancestors'.
    pub rules: super::approval::RunRules,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    /// Why the run ended (finished normally, failed: ..., canceled, interrupted).
    pub end_reason: Option<String>,
    pub completion_report: Option<CompletionReport>,
    pub planner_output: Option<PlannerOutput>,
    /// The provider's session (a CLI session id), for resuming.
    pub session_id: Option<String>,
    /// Tokens and cost so far.
    pub usage: Usage,
    /// For a run started by Handoff: its number within the task, from 1.
    pub handoff_index: Option<u32>,
    /// The prompt a handoff gave it.
    pub prompt: Option<String>,
    /// Its final text, once it ended.
    pub output: Option<String>,
    /// What its run token was minted for; None for a run that has no token.
    pub token: Option<TokenBinding>,
    /// The orchestrator replica driving the run (its processes live there),
    /// while one does; None for a run that ended or that its caller drives
    /// (OpenRun).
    pub replica: Option<String>,
    /// How many times the run was taken over by another driver: each driver
    /// writes only as the epoch it started with.
    pub epoch: u32,
    /// How long it may take (its clock stops during handoffs); None for a run
    /// its caller drives.
    pub timeout_ms: Option<i64>,
    /// When its driver's lease runs out unless renewed (as the store last
    /// read it; only the store's lease queries write it). None: no driver.
    pub lease_expires_ms: Option<i64>,
}

/// How long a driver's fence holds after a heartbeat began that extended its
/// leases by `lease`: two thirds of it, so that it falls a third of a lease
/// before any lease that heartbeat wrote runs out — before any other replica
/// may claim one of its runs.
pub fn fence_span(lease: std::time::Duration) -> std::time::Duration {
    lease * 2 / 3
}

impl Run {
    /// How long from `now_ms` the run's processes may go on without another
    /// answer that the run is still active: for a run a replica drives, until
    /// a third of a `lease` before the driver's lease runs out (the driver's
    /// own fence falls at two thirds of a lease after each renewal, which is
    /// never later); for a run its caller drives, two thirds of a lease. So
    /// once a run has ended, no process of it lives longer than two thirds
    /// of a lease after the end, whoever can or cannot be reached.
    ///
    /// # Errors
    /// RUN_NOT_ACTIVE when that time has passed: the driver did not renew its
    /// lease, and the run is about to be taken over.
    pub fn fence_in(&self, lease: std::time::Duration, now_ms: i64) -> Result<i64, DomainError> {
        let span = i64::try_from(fence_span(lease).as_millis()).unwrap_or(i64::MAX);
        let (Some(_), Some(expires)) = (&self.replica, self.lease_expires_ms) else {
            return Ok(span);
        };
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let left = expires
            .saturating_sub(lease_ms)
            .saturating_add(span)
            .saturating_sub(now_ms);
        if left <= 0 {
            return Err(DomainError::RunNotActive(format!(
                "run {}'s driver has not renewed its lease in time; the run is being taken over by another replica: retry shortly",
                self.id
            )));
        }
        Ok(left)
    }
}

/// The claims of a run's token that its other fields do not hold: every token
/// presented for the run must carry exactly these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBinding {
    /// The workspace root its paths are confined to.
    pub root: std::path::PathBuf,
    /// When the token expires (whole seconds, in ms).
    pub expires_ms: i64,
    /// The agent's egress list when the run opened (see `Agent::egress`).
    pub egress: Vec<String>,
}

/// Why a handoff failed, as its caller is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandoffFailure {
    /// The agent failed (exit code, signal, API error) or ended without a report.
    AgentFailed,
    TimedOut,
    /// The task was canceled, or the run that handed off ended.
    Canceled,
    /// No such agent, or an internal one.
    TargetUnknown,
    /// Chorus could not run it.
    Internal,
    /// The orchestrator stopped or restarted while it ran.
    Interrupted,
}

impl HandoffFailure {
    pub const ALL: [HandoffFailure; 6] = [
        Self::AgentFailed,
        Self::TimedOut,
        Self::Canceled,
        Self::TargetUnknown,
        Self::Internal,
        Self::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AgentFailed => "agent_failed",
            Self::TimedOut => "timed_out",
            Self::Canceled => "canceled",
            Self::TargetUnknown => "target_unknown",
            Self::Internal => "internal",
            Self::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// The gRPC code name a failed handoff call is recorded with (`tool_executed`).
    pub fn code_name(self) -> &'static str {
        match self {
            Self::AgentFailed => "aborted",
            Self::TimedOut => "deadline_exceeded",
            Self::Canceled => "cancelled",
            Self::TargetUnknown => "not_found",
            Self::Internal => "internal",
            Self::Interrupted => "unavailable",
        }
    }
}

/// How a handoff ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffOutcome {
    /// The agent ended with its completion report.
    Completed,
    Failed(HandoffFailure, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_states_move_forward_only() {
        use RunState::*;
        assert!(Spawning.check_transition(Active).is_ok());
        assert!(Active.check_transition(AwaitingHandoff).is_ok());
        assert!(AwaitingHandoff.check_transition(Active).is_ok());
        for from in [Spawning, Active, AwaitingHandoff] {
            assert!(from.check_transition(Finished).is_ok());
        }
        for to in [Spawning, Active, AwaitingHandoff, Finished] {
            assert!(Finished.check_transition(to).is_err(), "finished -> {to:?}");
        }
        assert!(Spawning.check_transition(AwaitingHandoff).is_err());
        assert!(Active.check_transition(Spawning).is_err());
    }
}
