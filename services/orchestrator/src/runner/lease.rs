//! Leases: this replica's heartbeat, and the claim of runs whose replica is
//! gone.
//!
//! Every [`Leases::beat`] extends the leases of the runs this process drives
//! and learns which of them it drives no more (ended by a call on another
//! replica, or taken over): their processes stop. A replica that cannot reach
//! the database for two thirds of a lease stops all of its runs, before any
//! other replica may claim them. Runs whose lease ran out are claimed by a
//! live replica: ended runs are released; unfinished ones are resumed there
//! (`run_resumed`, a new epoch and token, the CLI's session or the API
//! agent's stored conversation continued) when they can be, else recorded
//! interrupted (`run_interrupted`: a handoff among them fails as interrupted
//! and its parent works again; a root run's task waits, or fails to be
//! planned). At start-up a replica on SQLite claims its own runs at once (the
//! file lock proves the process that had them is gone); on PostgreSQL they
//! are claimed once their leases ran out, like any replica's. There is
//! no process to look for: every process of a run lived in its sandbox, which
//! the kernel killed when its orchestrator died (parent-death signal to the
//! launcher, whose PID namespace died with it).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Launch;
use crate::domain::{Run, RunId, RunState, TokenBinding, fence_span, now_ms, policy};
use crate::state::AppState;
use crate::store::StoreError;

/// Why claimed runs that cannot be resumed ended.
pub const INTERRUPTED: &str = "interrupted: the orchestrator stopped while it ran";
/// Why claimed runs were resumed (`run_resumed`).
const RESUMED_REASON: &str = "the replica that drove it stopped";

/// Claims the runs whose lease ran out (with `own`, also every run leased to
/// this replica id): each is resumed here when it can be (see
/// [`resumable`]), else recorded interrupted. Returns how many were claimed.
///
/// # Errors
/// The store could not be read or written.
pub async fn claim(state: &AppState, own: bool) -> Result<usize, StoreError> {
    claim_paced(state, own, Duration::ZERO).await
}

/// Resumes started at once after a restart, at most one per this: the port
/// serves first, and hundreds of agents do not all start in the same instant.
const RESUME_PACE: Duration = Duration::from_millis(5);

/// At start, while the port serves: the runs an earlier process of this
/// replica left unfinished. With SQLite the database file's lock proves that
/// process is gone (and with it, by their parent-death signals, every process
/// of its runs), so they are claimed at once. With PostgreSQL a process that
/// lost its database sessions may still be driving them until their fences
/// expire: they are claimed like any other replica's, once their leases ran
/// out (the heartbeat's claims), unless that process handed them on.
async fn take_back(state: &AppState) {
    if state.store.backend() != crate::store::Backend::Sqlite {
        return;
    }
    if let Err(e) = claim_paced(state, true, RESUME_PACE).await {
        warn!(error = %e, "cannot take back the runs an earlier process left");
    }
}

/// [`claim`], waiting `pace` after each resume it starts.
async fn claim_paced(state: &AppState, own: bool, pace: Duration) -> Result<usize, StoreError> {
    let mut claimed = 0;
    for (task, runs) in state.store.claimable_runs(own).await? {
        let mut plans: HashMap<RunId, Resume> = HashMap::new();
        for run in &runs {
            if let Some(plan) = resumable(state, run).await {
                plans.insert(run.id, plan);
            }
        }
        let candidates: Vec<RunId> = runs.iter().map(|r| r.id).collect();
        let bindings: HashMap<RunId, TokenBinding> = plans
            .iter()
            .map(|(id, plan)| (*id, plan.launch.token_binding()))
            .collect();
        let now = now_ms();
        let claimed_here = state
            .store
            .claim_runs(task, own, candidates, move |task, claim| {
                let (resume, interrupt): (Vec<RunId>, Vec<RunId>) = claim
                    .claimed
                    .iter()
                    .copied()
                    .partition(|id| bindings.contains_key(id));
                let mut events =
                    policy::interrupt_runs(task, claim.runs, &interrupt, INTERRUPTED, now)?;
                for id in resume {
                    // Ended with a run it depended on, just above.
                    let Some(run) = claim
                        .runs
                        .iter_mut()
                        .find(|r| r.id == id && r.state != RunState::Finished)
                    else {
                        continue;
                    };
                    let binding = bindings[&id].clone();
                    events.push(policy::resume_run(
                        run,
                        claim.replica,
                        binding,
                        RESUMED_REASON,
                    )?);
                    // Whoever waited for an approval went with the old
                    // replica: the resumed agent asks again if it must.
                    events.extend(task.approvals.end_run_because(
                        id,
                        now,
                        Some("its run was taken over by another replica; the agent asks again if it still needs the call"),
                    ));
                }
                Ok(events)
            })
            .await;
        let (taken, events) = match claimed_here {
            Ok((_, taken, events)) => (taken, events),
            // One task's failure (its row locked by a stuck session) holds
            // up no other task's runs: it is tried again at the next round.
            Err(e) => {
                warn!(task_id = %task, error = %e, "cannot claim the runs of a task now; trying again at the next round");
                continue;
            }
        };
        claimed += taken.len();
        let after = crate::runner::start::before(&events);
        for run in taken {
            if run.state == RunState::Finished {
                // Settled here: nothing will resume it, its directory goes.
                remove_run_dir(state, run.id).await;
                continue;
            }
            if let Some(plan) = plans.remove(&run.id) {
                info!(run_id = %run.id, task_id = %run.task_id, epoch = run.epoch, "resuming a run whose replica stopped");
                plan.launch.resume(state, &run, plan.session, after);
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
            }
        }
    }
    if claimed > 0 {
        info!(runs = claimed, "claimed the runs of a replica that is gone");
    }
    Ok(claimed)
}

/// Claims the runs of replicas that are gone every `period`, and at once
/// when another replica hands runs on, until `stop`; none from `draining` on.
/// First of all, this replica id's own runs an earlier process left.
async fn claims(
    state: AppState,
    period: Duration,
    stop: CancellationToken,
    draining: CancellationToken,
) {
    take_back(&state).await;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let claim_now = std::sync::Arc::clone(&state.claim_now);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
            // Another replica handed runs on: claim them now.
            () = claim_now.notified() => {}
        }
        // A replica that cannot drive runs (its fence down: no heartbeat
        // has reached the database since it lost it) claims none: their
        // starts would fail.
        if draining.is_cancelled() || !state.runner.able_to_drive(Duration::ZERO).await {
            continue;
        }
        if let Err(e) = claim(&state, false).await {
            warn!(error = %e, "cannot claim the runs of replicas that are gone");
        }
        forget_calls_past_their_fences(&state).await;
    }
}

/// Forgets the tool calls in flight of runs that ended more than a lease ago:
/// their fences have fallen, so they have no process left even if their
/// tool-exec died before recording them.
async fn forget_calls_past_their_fences(state: &AppState) {
    let lease = i64::try_from(state.store.replica().lease.as_millis()).unwrap_or(i64::MAX);
    match state
        .store
        .forget_calls_of_runs_ended_before(now_ms().saturating_sub(lease))
        .await
    {
        Ok(0) => {}
        Ok(n) => info!(
            calls = n,
            "forgot tool calls never recorded whose runs ended a lease ago"
        ),
        Err(e) => warn!(error = %e, "cannot forget the tool calls of runs that ended"),
    }
}

/// Removes the directory of a run that ended in a claim (unless the
/// operator keeps them).
async fn remove_run_dir(state: &AppState, run: RunId) {
    let config = state.runner.config();
    if config.keep_run_dirs {
        return;
    }
    let dir = config.runs_dir.join(run.to_string());
    if let Err(e) = tokio::fs::remove_dir_all(&dir).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(run_id = %run, dir = %dir.display(), error = %e, "cannot remove the directory of a run that ended");
    }
}

/// How a claimed run is resumed here.
struct Resume {
    launch: Launch,
    /// The CLI's session, or the run id (an API agent's stored conversation).
    session: String,
}

/// Whether `run` can be resumed here, and how: an API agent with a stored
/// conversation; a CLI agent with a session whose files this replica sees
/// (its run directory: the same host, or a runs directory shared by the
/// replicas); everything its launch needs (agent, provider, sandbox) as
/// when it started. Runs ended, or driven by their callers, are not.
async fn resumable(state: &AppState, run: &Run) -> Option<Resume> {
    if run.state == RunState::Finished || run.state == RunState::Spawning {
        return None;
    }
    let timeout = Duration::from_millis(u64::try_from(run.timeout_ms?).ok()?.max(1000));
    let task = state.store.get_task(run.task_id).await.ok()?;
    let workspace = state.store.get_workspace(task.workspace_id).await.ok()?;
    let agent = state
        .store
        .get_agent(workspace.id, run.agent.clone())
        .await
        .ok()?;
    // Where it acted: the root its token was minted for (its task's
    // worktree, on storage the replicas share).
    let root = run.token.as_ref().map_or_else(
        || crate::core::branches::root_of(&task, &workspace),
        |t| t.root.clone(),
    );
    let mut launch = Launch::prepare_agent(state, workspace, agent, timeout)
        .await
        .map_err(|e| info!(run_id = %run.id, reason = %e, "a run of a replica that is gone cannot be resumed here"))
        .ok()?
        .in_root(root);
    // The grant the run was opened with, not the agent's current one.
    launch.tools.clone_from(&run.tools);
    let session = launch.provider().resumable(state, run).await?;
    Some(Resume { launch, session })
}

/// This replica's heartbeat and claims.
#[derive(Debug)]
pub struct Leases {
    state: AppState,
    /// NOT_SERVING while a heartbeat fails.
    health: chorus_serve::Health,
    /// When the database last took a heartbeat.
    last_beat: Instant,
    fenced: bool,
}

/// The name health gives the leases when they cannot be renewed.
const LEASES: &str = "the run leases";

impl Leases {
    /// The keeper of this replica's leases; the replica's fence is held from
    /// now (no lease this process wrote so far ends before two thirds of a
    /// lease from now).
    pub fn new(state: AppState, health: chorus_serve::Health) -> Self {
        let leases = Self {
            state,
            health,
            last_beat: Instant::now(),
            fenced: false,
        };
        leases.hold_fence(now_ms());
        leases
    }

    /// Moves the replica's fence to [`fence_span`] of a lease after
    /// `since_ms`; whether it was down (by its time: the replica was paused,
    /// or taken down).
    fn hold_fence(&self, since_ms: i64) -> bool {
        let Some(fence) = self.state.runner.fence() else {
            return false;
        };
        match fence.hold(since_ms, self.state.store.replica().lease) {
            Ok(was_down) => was_down,
            Err(e) => {
                warn!(error = %e, "cannot move the replica's fence: its CLI agents stop when it runs out");
                false
            }
        }
    }

    /// How often the heartbeat runs: three times per lease.
    pub fn period(&self) -> Duration {
        self.state.store.replica().lease / 3
    }

    /// Beats every [`Leases::period`] until `stop` fires, and claims beside
    /// it (from `draining` on only beats: a replica about to stop takes no
    /// more runs); `lost` fires if the replica's id went to another process.
    /// Claims run in a task of their own: resuming many runs takes time, and
    /// a heartbeat that waited for it would let the replica's fence run out.
    pub async fn keep(
        mut self,
        stop: CancellationToken,
        draining: CancellationToken,
        lost: CancellationToken,
    ) {
        let claims = tokio::spawn(claims(
            self.state.clone(),
            self.period(),
            stop.clone(),
            draining,
        ));
        let mut tick = tokio::time::interval(self.period());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = lost.cancelled() => {
                    self.fence("another process holds this replica's id");
                    break;
                }
                _ = tick.tick() => self.beat().await,
            }
        }
        claims.abort();
    }

    /// One heartbeat: extends the leases of the runs this process drives, and
    /// stops those it drives no more. A heartbeat that has not reached the
    /// database within a beat's period has failed (a hung connection must not
    /// hold the leases' keeper: the runs stop at two thirds of a lease
    /// whatever the database does).
    pub async fn beat(&mut self) {
        let driven = self.state.runner.driven();
        let period = self.period();
        // Before the write: every lease it extends ends a lease after this.
        let since = now_ms();
        let beat = match tokio::time::timeout(period, self.state.store.heartbeat(driven)).await {
            Ok(beat) => beat,
            Err(_) => Err(StoreError::Database(format!(
                "the heartbeat did not reach the database within {period:?}"
            ))),
        };
        if let Err(e) = &beat {
            self.health
                .depends(
                    LEASES,
                    Err(format!("this replica cannot renew its run leases: {e}")),
                )
                .await;
        }
        match beat {
            Ok(beat) => {
                let was_down = self.hold_fence(since) || self.fenced;
                self.health.depends(LEASES, Ok(())).await;
                self.last_beat = Instant::now();
                if was_down {
                    // Able to drive again: the runs handed on meanwhile
                    // (this replica's among them) are claimed now.
                    self.state.claim_now.notify_one();
                }
                self.fenced = false;
                if !beat.lost.is_empty() {
                    info!(
                        runs = beat.lost.len(),
                        "runs ended or taken over elsewhere: stopping their processes"
                    );
                    self.state.runner.stop_runs(&beat.lost);
                }
            }
            Err(StoreError::ReplicaTaken { id }) => {
                self.fence(&format!("another process holds replica id '{id}'"));
            }
            Err(e) => {
                let lease = self.state.store.replica().lease;
                if self.last_beat.elapsed() >= fence_span(lease) {
                    self.fence(&format!(
                        "no heartbeat reached the database for {:?} ({e})",
                        self.last_beat.elapsed()
                    ));
                } else {
                    warn!(error = %e, "a heartbeat failed");
                }
            }
        }
    }

    /// Stops every run this process drives: another replica may claim them.
    fn fence(&mut self, why: &str) {
        let driven: Vec<_> = self
            .state
            .runner
            .driven()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        if !self.fenced || !driven.is_empty() {
            warn!(
                runs = driven.len(),
                why, "stopping every run of this replica: their leases cannot be kept"
            );
        }
        self.fenced = true;
        if let Some(fence) = self.state.runner.fence() {
            fence.drop_all();
        }
        self.state.runner.fence_runs(&driven);
    }
}
