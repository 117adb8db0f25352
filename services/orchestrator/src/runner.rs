//! Running agents: StartTask launches a run, a driver task carries it from
//! spawning to its end, CancelTask and shutdown stop it. The database holds the
//! run's state; this module holds only what cannot be stored — the stop token of
//! each live run and a way to wait for its end.
//!
//! Files: `start` (what starting and canceling runs share; the use cases are
//! `core::tasks`), `driver` (one run, attempt by attempt, to its recorded
//! end), `launch`, `lease`, `supervise`, `takeover`. What a run is carried
//! out with — processes, tool calls, the fence, the settings — is
//! `crate::execution`, which the providers build on too.

mod driver;
pub mod handoff;
mod launch;
pub mod lease;
pub mod plan;
mod run_dir;
pub mod start;
mod supervise;
mod takeover;
mod trace;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chorus_sandbox::Sandbox;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, warn};

use crate::domain::{RunId, policy};
use crate::execution::{Facilities, RunnerConfig, fence};
use crate::providers::RunContext;
use crate::state::AppState;

pub use launch::Launch;
pub use start::{task_message, timeout_or, wait_calls_stopped, wait_released};
pub use takeover::{PLANNER_RESUMED, RESUMED};

/// A run this process drives.
#[derive(Debug)]
struct Live {
    /// The epoch its driver writes as.
    epoch: u32,
    stop: CancellationToken,
    /// Fires when the driver is done: processes dead, end recorded.
    done: CancellationToken,
    /// Stopped because the replica's fence fell, not ended: the run goes on
    /// (here once the fence is up again, or on another replica).
    fenced: bool,
}

/// The live runs of this process and how to run agents.
#[derive(Debug)]
pub struct Runner {
    facilities: Facilities,
    live: Mutex<HashMap<RunId, Live>>,
    /// Places of top-level runs driven at once (`max_running_runs`).
    places: Arc<Semaphore>,
    /// Runs waiting for a place now.
    queued: AtomicUsize,
}

/// How long shutdown waits for a run's driver to finish.
const STOP_WAIT: Duration = Duration::from_secs(20);

impl Runner {
    pub fn new(config: RunnerConfig, processes: Sandbox) -> Self {
        let places = config.max_running_runs.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            facilities: Facilities::new(config, processes),
            live: Mutex::new(HashMap::new()),
            places: Arc::new(Semaphore::new(places)),
            queued: AtomicUsize::new(0),
        }
    }

    /// What runs are carried out with.
    pub fn facilities(&self) -> &Facilities {
        &self.facilities
    }

    pub fn config(&self) -> &RunnerConfig {
        self.facilities.config()
    }

    /// The replica's fence, when it has one.
    pub fn fence(&self) -> Option<&fence::ReplicaFence> {
        self.facilities.fence()
    }

    /// The sandbox CLI agents run in.
    pub fn processes(&self) -> &Sandbox {
        self.facilities.processes()
    }

    /// The HTTP client of API agents' model calls.
    pub fn http(&self) -> &reqwest::Client {
        self.facilities.http()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Live>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the driver of a run that was just opened or taken over here,
    /// and its supervisor, which follows the task's history from `after`:
    /// the run's clock stops while a handoff of its runs, and its processes
    /// stop when another call or replica ends it.
    fn launch(
        self: &Arc<Self>,
        state: AppState,
        ctx: RunContext,
        parent: Option<RunId>,
        after: u64,
        first: crate::providers::Attempt,
    ) {
        let done = CancellationToken::new();
        let run_id = ctx.run_id;
        self.lock().insert(
            run_id,
            Live {
                epoch: ctx.epoch,
                stop: ctx.stop.clone(),
                done: done.clone(),
                fenced: false,
            },
        );
        tokio::spawn(supervise::supervise(
            state.clone(),
            ctx.run_id,
            ctx.task_id,
            after,
            ctx.clock.clone(),
            ctx.stop.clone(),
            done.clone(),
        ));
        let runner = Arc::clone(self);
        // The call that starts the run (a handoff's parent, or StartTask).
        let caller = tracing::Span::current();
        let child = parent.is_some();
        tokio::spawn(async move {
            // Unregisters and signals the end even if the driver panics.
            let _guard = LiveGuard {
                runner: Arc::clone(&runner),
                run_id,
                done,
            };
            let mut ctx = ctx;
            ctx.span = trace::run_span(&state, &ctx, child, &caller).await;
            let span = ctx.span.clone();
            // A handoff's child works in its parent's place: the parent
            // waits for it, and a child waiting behind its own parent's
            // place would wait forever.
            let _place = if child {
                None
            } else {
                runner.admit(&state, &ctx).instrument(span.clone()).await
            };
            driver::drive(&state, &runner, ctx, first)
                .instrument(span)
                .await;
        });
    }

    /// The runs this process drives, with the epoch each driver writes as.
    pub fn driven(&self) -> Vec<(RunId, u32)> {
        self.lock().iter().map(|(id, l)| (*id, l.epoch)).collect()
    }

    /// Stops the drivers of `runs` (they are no longer this replica's, or it
    /// lost the database) without waiting.
    pub fn stop_runs(&self, runs: &[RunId]) {
        let live = self.lock();
        for id in runs {
            if let Some(l) = live.get(id) {
                l.stop.cancel();
            }
        }
    }

    /// Stops the drivers of `runs` because this replica lost its fence (it
    /// cannot prove its leases): they hand their runs on instead of ending
    /// them.
    pub fn fence_runs(&self, runs: &[RunId]) {
        let mut live = self.lock();
        for id in runs {
            if let Some(l) = live.get_mut(id) {
                l.fenced = true;
                l.stop.cancel();
            }
        }
    }

    /// Whether `run`'s driver was stopped by [`Runner::fence_runs`].
    fn was_fenced(&self, run: RunId) -> bool {
        self.lock().get(&run).is_some_and(|l| l.fenced)
    }

    /// Waits up to `patience` for this replica to be able to drive runs: its
    /// fence up (at once without a fence). Whether it is.
    pub async fn able_to_drive(&self, patience: Duration) -> bool {
        match self.fence() {
            Some(fence) => fence.held() || fence.wait_held(patience).await,
            None => true,
        }
    }

    /// Stops every live run (orchestrator shutdown) and waits for them.
    pub async fn shutdown(&self) {
        let waits: Vec<CancellationToken> = {
            let live = self.lock();
            live.values()
                .map(|l| {
                    l.stop.cancel();
                    l.done.clone()
                })
                .collect()
        };
        for done in waits {
            if tokio::time::timeout(STOP_WAIT, done.cancelled())
                .await
                .is_err()
            {
                warn!("a run did not stop in time");
            }
        }
    }

    /// How many runs are live in this process (those waiting for a place
    /// among them).
    pub fn live_runs(&self) -> usize {
        self.lock().len()
    }

    /// How many of them wait for a place (see [`Runner::admit`]).
    pub fn queued_runs(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// A place to drive the top-level run of `ctx`
    /// (`RunnerConfig::max_running_runs`): at once when one is free. Else
    /// the run waits for one, its task saying so (`run_queued`) and its
    /// clock stopped, until a run ends; stopped meanwhile (canceled, the
    /// service stopping), it goes on without a place at once, and its end
    /// is recorded as usual.
    async fn admit(&self, state: &AppState, ctx: &RunContext) -> Option<OwnedSemaphorePermit> {
        if let Ok(place) = Arc::clone(&self.places).try_acquire_owned() {
            return Some(place);
        }
        let waiting = self.queued.fetch_add(1, Ordering::SeqCst) + 1;
        let paused = ctx.clock.pause();
        let limit = self.config().max_running_runs;
        let (me, epoch) = driver::driver_of(state, ctx);
        let queued = state
            .store
            .change_run(ctx.run_id, move |run, _| {
                policy::check_driver(run, &me, epoch)?;
                Ok(vec![policy::queue_run(run, limit, waiting)?])
            })
            .await;
        match queued {
            Ok(_) => {
                info!(run_id = %ctx.run_id, waiting, limit, "the run waits for a place (--max-running-runs)")
            }
            Err(e) => {
                warn!(run_id = %ctx.run_id, error = %e, "the run waits for a place; its task could not be told")
            }
        }
        let place = tokio::select! {
            place = Arc::clone(&self.places).acquire_owned() => place.ok(),
            () = ctx.stop.cancelled() => None,
        };
        self.queued.fetch_sub(1, Ordering::SeqCst);
        if paused {
            ctx.clock.resume();
        }
        place
    }
}

struct LiveGuard {
    runner: Arc<Runner>,
    run_id: RunId,
    done: CancellationToken,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.runner.lock().remove(&self.run_id);
        self.done.cancel();
    }
}
