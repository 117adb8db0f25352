//! What starting and ending runs share: timeouts, prompts, a run's first
//! message, and the waits of a cancel (until runs are released and their
//! calls' processes are gone).

use std::fmt::Write as _;
use std::time::Duration;

use tracing::{info, warn};

use crate::domain::{Run, RunId, Task, TaskId, now_ms};
use crate::error::ServiceError;
use crate::state::AppState;

/// The longest a run may be given (StartTask, PlanTask).
pub const MAX_RUN_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Most bytes of a prompt given with StartTask or Handoff.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// A request's timeout in seconds, or `default` for 0.
pub fn timeout_or(secs: u32, default: Duration) -> Duration {
    match secs {
        0 => default,
        secs => Duration::from_secs(u64::from(secs)),
    }
}

/// [`timeout_or`], refused (INVALID_ARGUMENT naming the bound) above `longest`.
pub fn bounded_timeout(
    secs: u32,
    default: Duration,
    longest: Duration,
) -> Result<Duration, ServiceError> {
    let timeout = timeout_or(secs, default);
    if timeout > longest {
        return Err(ServiceError::Invalid(format!(
            "timeout_secs: at most {} s ({} h)",
            longest.as_secs(),
            longest.as_secs() / 3600
        )));
    }
    Ok(timeout)
}

/// Checks a prompt against [`MAX_PROMPT_BYTES`].
pub fn check_prompt(prompt: &str) -> Result<(), ServiceError> {
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(ServiceError::Invalid(format!(
            "prompt: {} bytes, over the {MAX_PROMPT_BYTES}-byte limit; put long material in the workspace's files",
            prompt.len()
        )));
    }
    Ok(())
}

/// The first message of a run: the task and what its plan says.
pub fn task_message(task: &Task, extra: &str) -> String {
    let mut out = format!("Task {}: {}\n", task.id, task.description.trim());
    let planning = &task.planning;
    if let Some(summary) = planning.summary.as_deref().filter(|s| !s.trim().is_empty()) {
        let _ = write!(out, "\nSummary: {}\n", summary.trim());
    }
    for (title, items) in [
        ("Requirements", &planning.requirements),
        ("Acceptance criteria", &planning.acceptance_criteria),
        ("Plan", &planning.plan),
    ] {
        if !items.is_empty() {
            let _ = write!(out, "\n{title}:\n");
            for item in items {
                let _ = writeln!(out, "- {}", item.trim());
            }
        }
    }
    if !extra.is_empty() {
        let _ = write!(out, "\n{extra}\n");
    }
    out
}

/// The sequence just before `events` (what a run's supervisor follows from).
pub fn before(events: &[crate::domain::Event]) -> u64 {
    events.first().map_or(0, |e| e.sequence.saturating_sub(1))
}

/// How often a wait for released runs checks the store besides when the
/// task changes.
const RECHECK: Duration = Duration::from_millis(100);

/// How long after a run's fence fell its processes may still take to die:
/// its launchers look at the fence ten times a second, then kill.
const FENCE_GRACE: Duration = Duration::from_millis(500);

/// Waits until no tool call of `runs` (of `task`, ended at `ended_ms`) may
/// still have processes: each recorded by its tool-exec (which stops it at
/// its next question, within a second), or — a tool-exec that cannot reach
/// an orchestrator, or died — its fence fallen: no answer after the end
/// extended it, so it falls two thirds of a lease after the end at the
/// latest, and its launcher has killed the processes by itself.
pub async fn wait_calls_stopped(
    state: &AppState,
    task: TaskId,
    runs: Vec<RunId>,
    ended_ms: i64,
) -> Result<(), ServiceError> {
    if runs.is_empty() {
        return Ok(());
    }
    let mut changes = state.hub.subscribe(task);
    let lease = state.store.replica().lease;
    let longest_fence = i64::try_from((crate::domain::fence_span(lease) + FENCE_GRACE).as_millis())
        .unwrap_or(i64::MAX);
    let fallen_ms = ended_ms.saturating_add(longest_fence);
    loop {
        let left = state.store.calls_in_flight(runs.clone()).await?;
        if left == 0 {
            return Ok(());
        }
        let wait = fallen_ms.saturating_sub(now_ms());
        if wait <= 0 {
            info!(task_id = %task, calls = left, "tool calls of the ended runs were not recorded, but their fences fell: their processes are dead");
            return Ok(());
        }
        let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0));
        tokio::select! {
            () = changes.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Waits until every process of the task's runs is dead: each run released by
/// its driver (which records its end once its processes are), or — a driver
/// paused, cut from the database or hung does not release — its driver's
/// fence fallen (see `execution::fence`), after which the launchers have
/// killed them by themselves. What proves a fence fell is its replica's
/// heartbeat, which the launchers watch, not the run's lease: a healthy
/// driver stops extending an ended run's lease at once, while its processes
/// may take their kill grace to die. Bounded by twice the lease and the kill
/// grace; past that it logs and returns.
/// With `only`, that run of the task alone.
pub async fn wait_released(
    state: &AppState,
    task: TaskId,
    only: Option<RunId>,
) -> Result<(), ServiceError> {
    let mut changes = state.hub.subscribe(task);
    let lease = state.store.replica().lease;
    let deadline = tokio::time::Instant::now() + 2 * lease + state.runner.config().kill_grace;
    let mut fell: Option<tokio::time::Instant> = None;
    loop {
        let held: Vec<Run> = state
            .store
            .list_runs(task)
            .await?
            .into_iter()
            .filter(|r| r.replica.is_some() && only.is_none_or(|id| id == r.id))
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        let replicas = state.store.list_replicas().await?;
        let now = now_ms();
        let fallen = |run: &Run| {
            replicas
                .iter()
                .find(|r| run.replica.as_deref() == Some(r.id.as_str()))
                .is_none_or(|r| r.fence_fallen(now))
        };
        if held.iter().all(fallen) {
            let since = *fell.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= FENCE_GRACE {
                info!(task_id = %task, runs = held.len(), "ended runs of the task were not released, but their drivers' fences fell: their processes are dead");
                return Ok(());
            }
        } else {
            fell = None;
        }
        tokio::select! {
            () = changes.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
            () = tokio::time::sleep_until(deadline) => {
                warn!(task_id = %task, "ended runs of the task are still held by a replica; their processes end when it notices or its fence falls");
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Planning, TaskSource, TaskStatus};

    #[test]
    fn the_message_carries_the_task_and_its_plan() {
        let mut task = Task {
            id: crate::domain::TaskId::new(),
            workspace_id: crate::domain::WorkspaceId::new(),
            description: "Fix the bug".to_owned(),
            source: TaskSource::default(),
            status: TaskStatus::Planned,
            status_reason: None,
            stage: crate::domain::Stage::Backlog,
            planning: Planning::default(),
            current_agent: None,
            created_ms: 0,
            updated_ms: 0,
            last_sequence: 0,
            usage: crate::domain::Usage::default(),
            budget: crate::domain::TaskBudget::default(),
            auto_start: None,
            branch: None,
            branch_note: None,
            approvals: Default::default(),
        };
        task.planning = Planning {
            summary: Some("A crash on start".to_owned()),
            requirements: vec!["no crash".to_owned()],
            acceptance_criteria: vec!["starts".to_owned()],
            plan: vec!["read main.rs".to_owned(), "fix it".to_owned()],
            ..Planning::default()
        };
        let message = task_message(&task, "Be brief.");
        assert!(message.starts_with(&format!("Task {}: Fix the bug\n", task.id)));
        for part in [
            "Summary: A crash on start",
            "Requirements:\n- no crash",
            "Acceptance criteria:\n- starts",
            "Plan:\n- read main.rs\n- fix it",
            "Be brief.",
        ] {
            assert!(message.contains(part), "{part} missing from {message}");
        }
    }
}
