//! What reaches a live run from outside its driver, read from its task's
//! history rather than called in memory, so it works the same whichever
//! replica the other call came to: the run's clock stops while a handoff of
//! its runs (the Handoff call may have been served anywhere) and starts again
//! when the handoff ends; its processes stop when its end was recorded by
//! someone else (CancelTask, its parent's end, a replica that took it over).
//! A missed event costs latency only: the lease heartbeat also stops runs
//! this replica no longer drives.

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::domain::{Event, EventKind, RunId, TaskId};
use crate::execution::RunClock;
use crate::history;
use crate::state::AppState;

/// Events buffered between the history follower and the supervisor.
const BUFFER: usize = 64;

/// Follows `task`'s history after `after` until `done` fires.
pub(super) async fn supervise(
    state: AppState,
    run: RunId,
    task: TaskId,
    after: u64,
    clock: RunClock,
    stop: CancellationToken,
    done: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel(BUFFER);
    let (store, hub, cancel) = (state.store.clone(), state.hub.clone(), done.clone());
    let follower = tokio::spawn(async move {
        history::watch_task(&store, &hub, task, after, history::Until::NEVER, tx, cancel).await
    });
    loop {
        let event = tokio::select! {
            () = done.cancelled() => break,
            event = rx.recv() => event,
        };
        match event {
            Some(Ok(event)) => react(&event, run, &clock, &stop),
            Some(Err(e)) => {
                warn!(run_id = %run, error = %e, "cannot follow the run's task; the lease heartbeat still stops it if it is ended elsewhere");
                break;
            }
            None => break,
        }
    }
    follower.abort();
}

/// What an event of the task means for the live run `run`.
fn react(event: &Event, run: RunId, clock: &RunClock, stop: &CancellationToken) {
    let field = |name: &str| event.data.get(name).and_then(Value::as_str);
    let id = run.to_string();
    let own = field("run_id") == Some(id.as_str());
    let parented = field("parent_run_id") == Some(id.as_str());
    match event.kind {
        EventKind::AgentHandoffStarted if parented => {
            clock.pause();
        }
        EventKind::AgentHandoffCompleted if parented => clock.resume(),
        EventKind::AgentCompleted
        | EventKind::RunFailed
        | EventKind::RunCanceled
        | EventKind::RunInterrupted
            if own =>
        {
            stop.cancel();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn event(kind: EventKind, data: Value) -> Event {
        Event {
            task_id: TaskId::new(),
            sequence: 1,
            kind,
            data,
            at_ms: 0,
        }
    }

    #[test]
    fn a_handoff_of_the_run_stops_its_clock_until_it_ends() {
        let run = RunId::new();
        let clock = RunClock::start(Duration::from_secs(60));
        let stop = CancellationToken::new();
        let parented = serde_json::json!({ "run_id": RunId::new().to_string(), "parent_run_id": run.to_string() });
        react(
            &event(EventKind::AgentHandoffStarted, parented.clone()),
            run,
            &clock,
            &stop,
        );
        assert!(clock.is_paused());
        react(
            &event(EventKind::AgentHandoffCompleted, parented),
            run,
            &clock,
            &stop,
        );
        assert!(!clock.is_paused());
        // Another run's handoff leaves it alone.
        let other = serde_json::json!({ "run_id": run.to_string(), "parent_run_id": RunId::new().to_string() });
        react(
            &event(EventKind::AgentHandoffStarted, other),
            run,
            &clock,
            &stop,
        );
        assert!(!clock.is_paused());
        assert!(!stop.is_cancelled());
    }

    #[test]
    fn the_runs_end_recorded_elsewhere_stops_it_and_no_other_does() {
        let run = RunId::new();
        let clock = RunClock::start(Duration::from_secs(60));
        let stop = CancellationToken::new();
        let other = serde_json::json!({ "run_id": RunId::new().to_string() });
        react(&event(EventKind::RunCanceled, other), run, &clock, &stop);
        assert!(!stop.is_cancelled());
        let own = serde_json::json!({ "run_id": run.to_string() });
        react(&event(EventKind::RunCanceled, own), run, &clock, &stop);
        assert!(stop.is_cancelled());
    }
}
