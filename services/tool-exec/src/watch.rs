//! While a call's processes run (bash, git), its run is asked about again
//! every [`RECHECK`]: each yes moves the call's fence — the time until which
//! the launcher lets the processes run, given by the orchestrator as the run
//! driver's lease allows — and a no (the run ended, or its driver lost it)
//! stops the call, which is then recorded as stopped. An orchestrator that
//! cannot be reached moves nothing: the fence runs out by itself, and the
//! launcher kills the processes with nobody's help.

use std::sync::Arc;
use std::time::Duration;

use chorus_sandbox::fence::{Fences, now_ms};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::Code;
use tracing::{info, warn};

use crate::gate::{Authorized, RunGate};
use crate::runner::Watched;

/// How often the run of a call with processes is asked about again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The watch of one call; dropping it ends the watch and takes the call's
/// fence down.
#[derive(Debug)]
pub struct CallWatch {
    watched: Watched,
    fences: Arc<Fences>,
    name: String,
    _stop: DropGuard,
}

impl CallWatch {
    /// Watches call `name` of `tool` by the run holding `token`, authorized
    /// with `first` when asked at `asked`.
    pub fn start(
        gate: Arc<dyn RunGate>,
        fences: Arc<Fences>,
        name: String,
        token: String,
        tool: String,
        first: Authorized,
        asked: Instant,
    ) -> Self {
        let fence = first.fence.map(|fence| {
            hold(&fences, &name, asked, fence);
            fences.path(&name)
        });
        let watched = Watched {
            fence,
            run_ended: CancellationToken::new(),
            network_questions: None,
        };
        let stop = CancellationToken::new();
        tokio::spawn(keep(
            gate,
            Arc::clone(&fences),
            name.clone(),
            token,
            tool,
            watched.run_ended.clone(),
            stop.clone(),
        ));
        Self {
            watched,
            fences,
            name,
            _stop: stop.drop_guard(),
        }
    }

    pub fn watched(&self) -> &Watched {
        &self.watched
    }
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        self.fences.remove(&self.name);
    }
}

/// Asks again every [`RECHECK`] until `stop`.
async fn keep(
    gate: Arc<dyn RunGate>,
    fences: Arc<Fences>,
    name: String,
    token: String,
    tool: String,
    run_ended: CancellationToken,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECHECK) => {}
        }
        let asked = Instant::now();
        let answer = tokio::select! {
            () = stop.cancelled() => return,
            answer = gate.authorize(&token, &tool, crate::gate::Question::default()) => answer,
        };
        match answer {
            Ok(Authorized {
                fence: Some(fence), ..
            }) => hold(&fences, &name, asked, fence),
            Ok(Authorized { fence: None, .. }) => {}
            Err(e) if matches!(e.code(), Code::FailedPrecondition | Code::Unauthenticated) => {
                info!(tool = %tool, reason = %e, "the run of a call in progress is no longer active: stopping the call");
                fences.remove(&name);
                run_ended.cancel();
                return;
            }
            // Not reachable now: the fence runs out unless a later answer
            // comes in time.
            Err(_) => {}
        }
    }
}

/// Holds the call's fence until `fence` after `asked`.
fn hold(fences: &Fences, name: &str, asked: Instant, fence: Duration) {
    let left = fence.saturating_sub(asked.elapsed());
    let until = now_ms().saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX));
    if let Err(e) = fences.set(name, until) {
        warn!(error = %e, "cannot move a call's fence: its processes stop when it runs out");
    }
}
