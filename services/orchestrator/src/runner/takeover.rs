//! What a run's driver does about a takeover: at shutdown it hands a
//! resumable run on instead of ending it; a driver that resumed a run taken
//! over from a replica that stopped first waits for the handoff that run was
//! waiting for, and tells the session how it ended.

use serde_json::json;
use tracing::{info, warn};

use crate::domain::{RunState, policy};
use crate::providers::{AttemptEnd, AttemptError, RunContext};
use crate::state::AppState;

/// The message that resumes a run taken over from a replica that died or
/// shut down.
pub const RESUMED: &str = "Chorus resumed you after an interruption: the orchestrator that ran you stopped. Your work so far is above; a tool call that was running when it stopped may not have finished, so check its effect before repeating it. Continue the task, and submit your completion report when you are done.";
/// The planner's version.
pub const PLANNER_RESUMED: &str = "Chorus resumed you after an interruption: the orchestrator that ran you stopped. Your work so far is above; continue, and submit your planner output with planner-output when you are done.";

/// At shutdown, leaves a run that may be resumed (an API agent, or a CLI
/// with a session) to a live replica, or to this replica's next start,
/// instead of ending it: what it cost, its session and the time it has left
/// are kept, and its lease ends now. False when it cannot be (it has no
/// session, it ended meanwhile, or the store failed): it is ended as
/// interrupted.
pub(super) async fn hand_on(state: &AppState, ctx: &RunContext, session: Option<String>) -> bool {
    matches!(keep_for_another(state, ctx, session).await, Kept::HandedOn)
}

/// How often a driver whose fence fell tries to hand its run on while the
/// database does not answer.
const HAND_ON_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// After this replica's fence fell (the run's processes killed by their
/// launchers, or never started), leaves the run to whichever replica can
/// drive it — this one once a heartbeat reaches the database again, or
/// another — as at shutdown: the run is not ended. While the database does
/// not answer it tries again, for up to a lease; then the run's lease has
/// run out, and the replicas' claims take it over. False when the run cannot
/// be resumed (a CLI stopped before its session began) or ended meanwhile:
/// its end is recorded as usual.
pub(super) async fn hand_on_when_fenced(
    state: &AppState,
    ctx: &RunContext,
    session: Option<String>,
) -> bool {
    let give_up = tokio::time::Instant::now() + state.store.replica().lease;
    loop {
        match keep_for_another(state, ctx, session.clone()).await {
            Kept::HandedOn => return true,
            Kept::Refused => return false,
            Kept::Unwritten(e) if tokio::time::Instant::now() >= give_up => {
                warn!(run_id = %ctx.run_id, error = %e, "cannot hand on a run whose fence fell; it is taken over once its lease runs out");
                return true;
            }
            Kept::Unwritten(_) => tokio::time::sleep(HAND_ON_RETRY).await,
        }
    }
}

/// What became of a run to be left to another driver.
enum Kept {
    /// Its lease ended now: a live replica claims it.
    HandedOn,
    /// It cannot be resumed, or it is no longer this driver's.
    Refused,
    /// The store could not be written.
    Unwritten(crate::store::StoreError),
}

/// Keeps what resuming `ctx`'s run needs (its session, the time it has left)
/// and ends its lease now.
async fn keep_for_another(state: &AppState, ctx: &RunContext, session: Option<String>) -> Kept {
    let left = i64::try_from(ctx.clock.left().as_millis())
        .unwrap_or(i64::MAX)
        .max(1000);
    // A provider that continues a run without a session it named (an API
    // agent: its stored messages) can be handed on without one.
    let api = ctx
        .provider
        .provider()
        .continue_session(ctx, None)
        .is_some();
    let (me, epoch) = super::driver::driver_of(state, ctx);
    let kept = state
        .store
        .change_run(ctx.run_id, move |run, _task| {
            policy::check_driver(run, &me, epoch)?;
            if run.state == RunState::Finished || run.state == RunState::Spawning {
                return Err(crate::domain::DomainError::RunNotActive(
                    "not resumable".to_owned(),
                ));
            }
            if session.is_some() {
                run.session_id.clone_from(&session);
            }
            if !api && run.session_id.is_none() {
                return Err(crate::domain::DomainError::RunNotActive(
                    "no session to resume".to_owned(),
                ));
            }
            run.timeout_ms = Some(left);
            Ok(Vec::new())
        })
        .await;
    match kept {
        Ok(_) => {}
        Err(crate::store::StoreError::Domain(_) | crate::store::StoreError::NotFound { .. }) => {
            return Kept::Refused;
        }
        Err(e) => return Kept::Unwritten(e),
    }
    match state
        .store
        .release_runs(vec![(ctx.run_id, ctx.epoch)])
        .await
    {
        Ok(()) => {
            info!(run_id = %ctx.run_id, "run handed on: a live replica resumes it (or this one, when it can drive again)");
        }
        Err(e) => {
            warn!(run_id = %ctx.run_id, error = %e, "cannot end the run's lease; it is taken over when the lease runs out");
        }
    }
    Kept::HandedOn
}

/// How often a resumed run waiting for its handoff checks the store besides
/// when its task changes.
const RECHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// For a resumed run that waits for a handoff: waits until the handoff ends
/// (its child may run on any replica) and says how it ended, for the
/// session that never saw it. None for a run that does not wait.
pub(super) async fn await_handoff(
    state: &AppState,
    ctx: &RunContext,
) -> Result<Option<String>, AttemptError> {
    let stopped = || AttemptError::Stopped {
        partial: AttemptEnd::default(),
    };
    let failed = |e: crate::store::StoreError| AttemptError::Failed {
        reason: format!("cannot read the resumed run: {e}"),
        partial: AttemptEnd::default(),
    };
    let mut changes = state.hub.subscribe(ctx.task_id);
    let mut waited = false;
    loop {
        let run = state.store.get_run(ctx.run_id).await.map_err(failed)?;
        match run.state {
            RunState::AwaitingHandoff => waited = true,
            RunState::Finished => return Err(stopped()),
            RunState::Spawning | RunState::Active if !waited => return Ok(None),
            RunState::Spawning | RunState::Active => break,
        }
        tokio::select! {
            () = changes.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
            () = ctx.stop.cancelled() => return Err(stopped()),
        }
    }
    let runs = state.store.list_runs(ctx.task_id).await.map_err(failed)?;
    let Some(child) = runs
        .iter()
        .filter(|r| r.parent == Some(ctx.run_id) && r.handoff_index.is_some())
        .max_by_key(|r| r.handoff_index)
    else {
        return Ok(None);
    };
    let outcome = match &child.completion_report {
        Some(report) if child.state == RunState::Finished => json!({
            "outcome": "completed",
            "output": child.output,
            "completion_report": report,
        }),
        _ => json!({
            "outcome": "failed",
            "reason": child.end_reason,
        }),
    };
    Ok(Some(format!(
        "While you were stopped, your handoff to '{}' (run {}) ended: {outcome}",
        child.agent, child.id
    )))
}
