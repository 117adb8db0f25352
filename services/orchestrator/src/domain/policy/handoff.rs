//! Handoff rules: a run hands part of the work to a child run and waits for it;
//! the child's end (its report, or why it failed) goes back to the parent, which
//! works again. Only a root run's report decides the task. A run that ends takes
//! its unfinished children with it.

use chorus_tool_exec::record::ToolCallRecord;
use serde_json::{Value, json};

use super::{Events, change_status, end_run};
use crate::domain::{
    DomainError, EventKind, HandoffFailure, HandoffOutcome, Run, RunId, RunState, Task, TaskStatus,
};

/// Most bytes of a prompt or output kept in a handoff event (the run keeps all).
const EVENT_TEXT_BYTES: usize = 4096;

/// Starts a handoff to `child` (a new, spawning run). With a parent, the parent
/// must be active and starts waiting for the child; without one (a caller that
/// is not an agent) the task must be able to go active, and does. Either way the
/// child's agent becomes the task's current agent. Records
/// `agent_handoff_started`.
pub fn begin_handoff(
    task: &mut Task,
    child: &Run,
    parent: Option<&mut Run>,
) -> Result<Events, DomainError> {
    let mut events = Events::new();
    let from = match parent {
        Some(parent) => {
            if parent.state != RunState::Active {
                return Err(DomainError::RunNotActive(format!(
                    "run {} ({}) is {}; only an active run can hand off",
                    parent.id,
                    parent.agent,
                    parent.state.as_str()
                )));
            }
            parent.state = RunState::AwaitingHandoff;
            Some(parent.agent.clone())
        }
        None => {
            events.push(change_status(task, TaskStatus::Active, None)?);
            None
        }
    };
    task.current_agent = Some(child.agent.clone());
    events.push((
        EventKind::AgentHandoffStarted,
        json!({
            "run_id": child.id.to_string(),
            "agent": child.agent.as_str(),
            "parent_run_id": child.parent.map(|p| p.to_string()),
            "from_agent": from.as_ref().map(|n| n.as_str()),
            "handoff_index": child.handoff_index,
            "prompt": crate::providers::cut(child.prompt.as_deref().unwrap_or_default(), EVENT_TEXT_BYTES),
        }),
    ));
    Ok(events)
}

/// The `agent_handoff_completed` event of a handoff run that ended with `outcome`.
pub fn handoff_completed(child: &Run, outcome: &HandoffOutcome) -> (EventKind, Value) {
    let mut data = json!({
        "run_id": child.id.to_string(),
        "agent": child.agent.as_str(),
        "parent_run_id": child.parent.map(|p| p.to_string()),
        "handoff_index": child.handoff_index,
        "usage": child.usage.to_json(),
    });
    match outcome {
        HandoffOutcome::Completed => {
            data["outcome"] = json!("completed");
            data["output"] = json!(crate::providers::cut(
                child.output.as_deref().unwrap_or_default(),
                EVENT_TEXT_BYTES
            ));
            data["completion_report"] = json!(child.completion_report);
        }
        HandoffOutcome::Failed(failure, reason) => {
            data["outcome"] = json!("failed");
            data["failure"] = json!(failure.as_str());
            data["reason"] = json!(reason);
        }
    }
    (EventKind::AgentHandoffCompleted, data)
}

/// Ends a handoff whose child run has just ended: records
/// `agent_handoff_completed`; a parent still waiting works again, its agent is the
/// task's current agent again, and its handoff call is recorded (`tool_executed`).
pub fn end_handoff(
    child: &Run,
    parent: Option<&mut Run>,
    task: &mut Task,
    outcome: &HandoffOutcome,
    now_ms: i64,
) -> Result<Events, DomainError> {
    let mut events = vec![handoff_completed(child, outcome)];
    let Some(parent) = parent else {
        return Ok(events);
    };
    if parent.state != RunState::AwaitingHandoff {
        return Ok(events);
    }
    parent.state.check_transition(RunState::Active)?;
    parent.state = RunState::Active;
    if !task.status.is_terminal() {
        task.current_agent = Some(parent.agent.clone());
    }
    let (status, excerpt) = match outcome {
        HandoffOutcome::Completed => (
            "ok",
            json!({
                "agent": child.agent.as_str(),
                "run_id": child.id.to_string(),
                "output": child.output,
                "completion_report": child.completion_report,
            })
            .to_string(),
        ),
        HandoffOutcome::Failed(failure, reason) => (failure.code_name(), reason.clone()),
    };
    let input = json!({ "agent": child.agent.as_str(), "prompt": child.prompt.as_deref().unwrap_or_default() });
    let duration_ms = u64::try_from(now_ms.saturating_sub(child.started_ms)).unwrap_or(0);
    events.push(super::tool_executed(
        parent,
        ToolCallRecord::new("handoff", &input, status, duration_ms, &excerpt),
    ));
    Ok(events)
}

/// The runs of `runs` below `ancestor`, deepest first (a child before its parent).
fn descendants_deepest_first(ancestor: RunId, runs: &[Run]) -> Vec<usize> {
    let mut order: Vec<usize> = Vec::new();
    let mut frontier = vec![ancestor];
    while let Some(parent) = frontier.pop() {
        for (i, run) in runs.iter().enumerate() {
            if run.parent == Some(parent) && !order.contains(&i) {
                order.push(i);
                frontier.push(run.id);
            }
        }
    }
    // Breadth of the walk aside, a child is always found after its parent.
    order.reverse();
    order
}

/// How runs are ended from outside (a cancel, a parent's end, a restart): the
/// event each gets, how their handoffs fail, why, and when.
#[derive(Debug, Clone, Copy)]
pub struct EndFromOutside<'a> {
    pub kind: EventKind,
    pub failure: HandoffFailure,
    pub reason: &'a str,
    pub now_ms: i64,
}

/// Ends the unfinished runs of `runs` below `ancestor`, deepest first.
pub fn end_descendants(
    ancestor: RunId,
    runs: &mut [Run],
    task: &mut Task,
    ending: EndFromOutside<'_>,
) -> Result<Events, DomainError> {
    let mut events = Events::new();
    for i in descendants_deepest_first(ancestor, runs) {
        let run = &mut runs[i];
        if run.state != RunState::Finished {
            events.extend(end_run_and_handoff(run, task, ending)?);
        }
    }
    Ok(events)
}

/// Ends `run` and, when it is a handoff run, fails its handoff.
fn end_run_and_handoff(
    run: &mut Run,
    task: &mut Task,
    ending: EndFromOutside<'_>,
) -> Result<Events, DomainError> {
    let reason = ending.reason.to_owned();
    let mut events = end_run(
        run,
        task,
        ending.kind,
        reason.clone(),
        Value::Null,
        ending.now_ms,
    )?;
    if run.handoff_index.is_some() {
        events.push(handoff_completed(
            run,
            &HandoffOutcome::Failed(ending.failure, reason),
        ));
    }
    Ok(events)
}

/// Ends every unfinished run of a task, children before their parents.
pub fn end_all_runs(
    runs: &mut [Run],
    task: &mut Task,
    ending: EndFromOutside<'_>,
) -> Result<Events, DomainError> {
    let mut events = Events::new();
    let roots: Vec<RunId> = runs
        .iter()
        .filter(|r| r.parent.is_none_or(|p| !runs.iter().any(|o| o.id == p)))
        .map(|r| r.id)
        .collect();
    for root in roots {
        events.extend(end_descendants(root, runs, task, ending)?);
        if let Some(run) = runs
            .iter_mut()
            .find(|r| r.id == root && r.state != RunState::Finished)
        {
            events.extend(end_run_and_handoff(run, task, ending)?);
        }
    }
    Ok(events)
}
