//! Rules of who drives a run: the check that a driver still does, the
//! interruption of runs whose replica is gone, their resumption elsewhere,
//! and a run waiting for a place on its replica.

use serde_json::{Value, json};

use super::{Events, change_status, end_run, handoff};
use crate::domain::{
    DomainError, EventKind, HandoffFailure, HandoffOutcome, Run, RunId, RunState, Task, TaskStatus,
    TokenBinding,
};

/// Marks a task's unfinished runs interrupted after the orchestrator that ran
/// them stopped (`run_interrupted`; their handoffs fail as interrupted). An
/// active task waits with the reason; a task being planned fails, to be planned
/// again.
pub fn interrupt_task(
    task: &mut Task,
    runs: &mut [Run],
    reason: &str,
    now_ms: i64,
) -> Result<Events, DomainError> {
    let mut events = handoff::end_all_runs(
        runs,
        task,
        handoff::EndFromOutside {
            kind: EventKind::RunInterrupted,
            failure: HandoffFailure::Interrupted,
            reason,
            now_ms,
        },
    )?;
    events.extend(interrupted_task(task, reason)?);
    Ok(events)
}

/// What becomes of a task whose root run was interrupted: an active task
/// waits to be started again, a planning one fails to be planned again.
fn interrupted_task(task: &mut Task, reason: &str) -> Result<Events, DomainError> {
    Ok(match task.status {
        TaskStatus::Active => vec![change_status(
            task,
            TaskStatus::Waiting,
            Some(format!("{reason}; start it again")),
        )?],
        TaskStatus::Planning => vec![
            (EventKind::PlanningFailed, json!({ "reason": reason })),
            change_status(
                task,
                TaskStatus::Failed,
                Some(format!(
                    "{reason}; plan it again (move it to pending, then PlanTask)"
                )),
            )?,
        ],
        _ => Vec::new(),
    })
}

/// Checks that the driver of `epoch` on replica `replica` still drives `run`:
/// a run taken over (a new epoch) or released is written by its new driver
/// only.
pub fn check_driver(run: &Run, replica: &str, epoch: u32) -> Result<(), DomainError> {
    if run.replica.as_deref() == Some(replica) && run.epoch == epoch {
        return Ok(());
    }
    Err(DomainError::RunNotActive(format!(
        "run {} is driven by {} (epoch {}) now, not by replica '{replica}' (epoch {epoch})",
        run.id,
        run.replica
            .as_deref()
            .map_or_else(|| "no replica".to_owned(), |r| format!("replica '{r}'")),
        run.epoch
    )))
}

/// Ends the `claimed` runs of `runs` (the task's unfinished runs), whose
/// replica is gone, as interrupted (`run_interrupted`), children before their
/// parents. What each takes with it is what its own end would: its unfinished
/// handoff children are canceled; the handoff of a child fails as
/// interrupted, and its parent works again; a root run's task waits (or, when
/// it was being planned, fails to be planned again).
pub fn interrupt_runs(
    task: &mut Task,
    runs: &mut [Run],
    claimed: &[RunId],
    reason: &str,
    now_ms: i64,
) -> Result<Events, DomainError> {
    let depth = |id: RunId, runs: &[Run]| {
        let mut depth = 0;
        let mut at = runs.iter().find(|r| r.id == id).and_then(|r| r.parent);
        while let Some(parent) = at {
            depth += 1;
            at = runs.iter().find(|r| r.id == parent).and_then(|r| r.parent);
        }
        depth
    };
    let mut order: Vec<RunId> = claimed.to_vec();
    order.sort_by_key(|id| std::cmp::Reverse(depth(*id, runs)));
    let mut events = Events::new();
    for id in order {
        let Some(i) = runs.iter().position(|r| r.id == id) else {
            continue;
        };
        if runs[i].state == RunState::Finished {
            continue;
        }
        let why = format!(
            "the run of '{}' that handed off to it was interrupted",
            runs[i].agent
        );
        events.extend(handoff::end_descendants(
            id,
            runs,
            task,
            handoff::EndFromOutside {
                kind: EventKind::RunCanceled,
                failure: HandoffFailure::Canceled,
                reason: &why,
                now_ms,
            },
        )?);
        let run = &mut runs[i];
        events.extend(end_run(
            run,
            task,
            EventKind::RunInterrupted,
            reason.to_owned(),
            Value::Null,
            now_ms,
        )?);
        run.replica = None;
        let run = run.clone();
        match run.parent {
            Some(parent) if run.handoff_index.is_some() => {
                let parent = runs.iter_mut().find(|r| r.id == parent);
                events.extend(handoff::end_handoff(
                    &run,
                    parent,
                    task,
                    &HandoffOutcome::Failed(HandoffFailure::Interrupted, reason.to_owned()),
                    now_ms,
                )?);
            }
            Some(_) => {}
            None => events.extend(interrupted_task(task, reason)?),
        }
    }
    Ok(events)
}

/// Takes `run` over for replica `replica`, to resume it there: the run is
/// leased to `replica` with the next epoch (its earlier driver writes nothing
/// more) and `token` (a new expiry: tokens of the earlier epoch no longer
/// match it). Records `run_resumed`, naming the replica it left.
pub fn resume_run(
    run: &mut Run,
    replica: &str,
    token: TokenBinding,
    reason: &str,
) -> Result<(EventKind, Value), DomainError> {
    if run.state == RunState::Finished {
        return Err(DomainError::RunNotActive(format!(
            "run {} has already finished; it cannot be resumed",
            run.id
        )));
    }
    let from = run.replica.replace(replica.to_owned());
    run.epoch += 1;
    run.token = Some(token);
    Ok((
        EventKind::RunResumed,
        json!({
            "run_id": run.id.to_string(),
            "agent": run.agent.as_str(),
            "from_replica": from,
            "replica": replica,
            "epoch": run.epoch,
            "session_id": run.session_id,
            "reason": reason,
        }),
    ))
}

/// A run waits for a place: its replica drives `limit` runs at once
/// (`--max-running-runs`), `waiting` runs wait now with this one. Records
/// `run_queued`; refused for a run that has finished.
pub fn queue_run(
    run: &Run,
    limit: usize,
    waiting: usize,
) -> Result<(EventKind, Value), DomainError> {
    if run.state == RunState::Finished {
        return Err(DomainError::RunNotActive(format!(
            "run {} has already finished; it waits for nothing",
            run.id
        )));
    }
    Ok((
        EventKind::RunQueued,
        json!({
            "run_id": run.id.to_string(),
            "agent": run.agent.as_str(),
            "replica": run.replica,
            "limit": limit,
            "waiting": waiting,
            "reason": format!(
                "this replica drives at most {limit} {} at once (--max-running-runs): the run starts when one ends; its time limit counts from then",
                if limit == 1 { "run" } else { "runs" }
            ),
        }),
    ))
}
