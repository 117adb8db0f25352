//! One run from spawning to its recorded end.
//!
//! Spawning: the run directory is prepared (HOME, TMPDIR, generated files). Then
//! the run goes active (`agent_started`) and the first attempt starts; its
//! progress becomes `agent_progress` events as it arrives. When an attempt ends
//! normally without a completion report, the session is resumed once with a
//! reminder. The end is recorded in one transaction:
//!
//! - a completion report was submitted → `agent_completed` (the report already
//!   decided the task's status);
//! - the attempt failed or timed out → `run_failed` and the task fails with the
//!   reason;
//! - it ended without a report, even after the reminder → `agent_completed` and
//!   the task waits, with the reason;
//! - the orchestrator is shutting down → `run_interrupted` and the task waits;
//! - CancelTask already ended the run → only its usage and session are kept;
//! - the replica's fence fell (it could not prove its leases: paused, cut
//!   from the database) → nothing: the run is handed on, and this replica
//!   or another resumes it (see `takeover`); only a run that cannot be
//!   resumed (a CLI stopped before its session began) ends, interrupted.
//!
//! No attempt starts while the replica's fence is down: it waits (up to a
//! lease) for a heartbeat to reach the database.

use std::sync::Arc;

use chorus_tool_exec::record::input_excerpt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::Runner;
use crate::domain::policy::{handoff, planning};
use crate::domain::{
    AgentKind, EventKind, HandoffFailure, HandoffOutcome, Name, Run, RunState, TaskStatus, now_ms,
    policy,
};
use crate::execution::{HOME_DIR, TMP_DIR, WORK_DIR};
use crate::providers::{Attempt, AttemptEnd, AttemptEnv, AttemptError, Progress, RunContext};
use crate::state::AppState;

/// The message that resumes a run that ended without reporting.
pub const REMINDER: &str = "You ended without submitting your completion report. If your work is done, submit it now; if you cannot finish, submit it with status blocked or failed and say why. Submitting the report must be your last action.";
/// The planner's version of the reminder.
pub const PLANNER_REMINDER: &str = "You ended without submitting your planner output. Submit it now with planner-output; it must be your last action.";

pub(super) async fn drive(state: &AppState, runner: &Arc<Runner>, ctx: RunContext, first: Attempt) {
    let run_id = ctx.run_id;
    let mut outcome = run_attempts(state, runner, &ctx, first).await;
    if let Err(AttemptError::Stopped { partial }) = &outcome.result
        && runner.was_fenced(run_id)
    {
        outcome.result = Err(AttemptError::Fenced {
            reason: "this replica stopped it: no heartbeat reached the database for two thirds of a lease".to_owned(),
            partial: partial.clone(),
        });
    }
    // A run that reported before its fence fell is over: its end is
    // recorded as usual.
    if !state.shutdown.is_cancelled()
        && matches!(outcome.result, Err(AttemptError::Fenced { .. }))
        && !reported(state, &ctx).await
        && super::takeover::hand_on_when_fenced(state, &ctx, outcome.session_id.clone()).await
    {
        super::trace::ended(&ctx.span, &ctx, "handed on", None);
        return;
    }
    if state.shutdown.is_cancelled()
        && matches!(outcome.result, Err(AttemptError::Stopped { .. }))
        && super::takeover::hand_on(state, &ctx, outcome.session_id.clone()).await
    {
        // Its directory stays: the replica that resumes the session needs it.
        super::trace::ended(&ctx.span, &ctx, "handed on", None);
        return;
    }
    // Every process of the run is dead: its directory can go before the end is
    // announced.
    if !runner.config().keep_run_dirs
        && let Err(e) = tokio::fs::remove_dir_all(&ctx.run_dir).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(run_id = %run_id, dir = %ctx.run_dir.display(), error = %e, "cannot remove the run directory");
    }
    record_end(state, &ctx, outcome).await;
}

/// How a run's attempts ended.
#[derive(Debug)]
struct Outcome {
    result: Result<AttemptEnd, AttemptError>,
    session_id: Option<String>,
    /// The reminder was sent.
    resumed: bool,
}

async fn run_attempts(
    state: &AppState,
    runner: &Arc<Runner>,
    ctx: &RunContext,
    first: Attempt,
) -> Outcome {
    let mut outcome = Outcome {
        result: Ok(AttemptEnd::default()),
        session_id: None,
        resumed: false,
    };
    if let Err(reason) = prepare(ctx).await {
        outcome.result = Err(AttemptError::Failed {
            reason,
            partial: AttemptEnd::default(),
        });
        return outcome;
    }
    let mut attempt = first;
    if ctx.resumed {
        // Taken over: the run is active already, or waits for a handoff
        // whose outcome its session has not seen.
        match super::takeover::await_handoff(state, ctx).await {
            Ok(Some(note)) => attempt.message = format!("{}\n\n{note}", attempt.message),
            Ok(None) => {}
            Err(e) => {
                outcome.result = Err(e);
                return outcome;
            }
        }
        return run_attempt_loop(state, runner, ctx, attempt, outcome).await;
    }
    // Spawning → active: from now on its tool calls are accepted. The event
    // says which provider runs it (an agent without its own runs on the
    // workspace's).
    let provider = ctx.provider.name.to_string();
    let (me, epoch) = driver_of(state, ctx);
    match state
        .store
        .change_run(ctx.run_id, move |run, task| {
            policy::check_driver(run, &me, epoch)?;
            let (kind, mut data) = policy::activate_run(run, task)?;
            data["provider"] = serde_json::Value::String(provider);
            data["replica"] = serde_json::Value::String(me);
            Ok(vec![(kind, data)])
        })
        .await
    {
        Ok(_) => {}
        Err(e) => {
            // Canceled while spawning, or the store failed: nothing was started.
            outcome.result = Err(AttemptError::Failed {
                reason: format!("the run could not become active: {e}"),
                partial: AttemptEnd::default(),
            });
            return outcome;
        }
    }

    run_attempt_loop(state, runner, ctx, attempt, outcome).await
}

/// Runs attempts from `attempt` on: a second one resumes the session with a
/// reminder when the first ended without the run's report.
async fn run_attempt_loop(
    state: &AppState,
    runner: &Arc<Runner>,
    ctx: &RunContext,
    mut attempt: Attempt,
    mut outcome: Outcome,
) -> Outcome {
    let (progress_tx, progress_rx) = mpsc::unbounded_channel();
    let recorder = tokio::spawn(record_progress(state.clone(), ctx.clone(), progress_rx));
    loop {
        let result = run_attempt(state, runner, ctx, &attempt, &progress_tx).await;
        let partial = match &result {
            Ok(end) => end.clone(),
            Err(e) => e.partial().clone(),
        };
        if partial.session_id.is_some() {
            outcome.session_id.clone_from(&partial.session_id);
        }
        outcome.result = result;
        let may_resume = outcome.result.is_ok() && !outcome.resumed && !ctx.stop.is_cancelled();
        if !may_resume || reported(state, ctx).await {
            break;
        }
        let resume = ctx
            .provider
            .provider()
            .continue_session(ctx, outcome.session_id.as_deref());
        let Some(resume) = resume else { break };
        info!(run_id = %ctx.run_id, "the agent ended without reporting; resuming it once with a reminder");
        let _ = progress_tx.send(Progress::Text(String::new()));
        outcome.resumed = true;
        attempt = Attempt {
            message: reminder(ctx.agent_kind).to_owned(),
            resume: Some(resume),
        };
    }
    drop(progress_tx);
    if let Err(e) = recorder.await {
        warn!(run_id = %ctx.run_id, error = %e, "the progress recorder failed");
    }
    outcome
}

/// The message that resumes an agent of `kind` that ended without its report.
fn reminder(kind: AgentKind) -> &'static str {
    match kind {
        AgentKind::UserDefined => REMINDER,
        AgentKind::Internal => PLANNER_REMINDER,
    }
}

/// Creates the run directory — HOME, TMPDIR, the CLI's empty working
/// directory and the provider's files — owned by the user the run's processes
/// run as, and readable by nobody else; a resumed run's directory is repaired
/// without following anything its agent left there (see [`super::run_dir`]).
async fn prepare(ctx: &RunContext) -> Result<(), String> {
    let run_dir = ctx.run_dir.clone();
    let owner = match ctx.identity {
        chorus_sandbox::Identity::User { uid, gid } => Some((uid, gid)),
        chorus_sandbox::Identity::Service => None,
    };
    let file = ctx.provider.provider().run_file(ctx);
    tokio::task::spawn_blocking(move || {
        let dirs = [HOME_DIR, TMP_DIR, WORK_DIR];
        let layout = super::run_dir::Layout {
            dirs: &dirs,
            file: file
                .as_ref()
                .map(|(name, content)| (*name, content.as_slice())),
        };
        super::run_dir::prepare(&run_dir, owner, layout)
    })
    .await
    .map_err(|e| format!("cannot prepare the run directory: {e}"))?
    .map_err(|e| {
        format!(
            "cannot prepare the run directory {}: {e}",
            ctx.run_dir.display()
        )
    })
}

/// Whether the run has submitted what it must finish with.
async fn reported(state: &AppState, ctx: &RunContext) -> bool {
    match state.store.get_run(ctx.run_id).await {
        Ok(run) => has_report(&run, ctx.agent_kind),
        Err(_) => false,
    }
}

fn has_report(run: &Run, kind: AgentKind) -> bool {
    match kind {
        AgentKind::UserDefined => run.completion_report.is_some(),
        AgentKind::Internal => run.planner_output.is_some(),
    }
}

/// One attempt with the run's provider.
async fn run_attempt(
    state: &AppState,
    runner: &Arc<Runner>,
    ctx: &RunContext,
    attempt: &Attempt,
    progress: &mpsc::UnboundedSender<Progress>,
) -> Result<AttemptEnd, AttemptError> {
    // A replica whose fence is down (a heartbeat has not reached the
    // database since it healed) starts nothing: the launcher would refuse.
    let patience = state.store.replica().lease;
    let able = tokio::select! {
        able = runner.able_to_drive(patience) => able,
        () = ctx.stop.cancelled() => return Err(AttemptError::Stopped { partial: AttemptEnd::default() }),
    };
    if !able {
        return Err(AttemptError::Fenced {
            reason: format!(
                "this replica could not prove its leases to the database within {patience:?}"
            ),
            partial: AttemptEnd::default(),
        });
    }
    let env = AttemptEnv {
        state,
        facilities: runner.facilities(),
        progress,
    };
    ctx.provider.provider().attempt(env, ctx, attempt).await
}

/// Writes progress as history, in order, until the attempts are over. A
/// model call is recorded whatever the run's state: it was paid for.
async fn record_progress(
    state: AppState,
    ctx: RunContext,
    mut rx: mpsc::UnboundedReceiver<Progress>,
) {
    let mut ledger = crate::providers::ledger::Ledger::default();
    while let Some(progress) = rx.recv().await {
        let Some(progress) = ledger.record(&state, &ctx, progress).await else {
            continue;
        };
        let (me, epoch) = driver_of(&state, &ctx);
        let (session, event) = progress_record(&ctx, progress);
        let result = state
            .store
            .change_run(ctx.run_id, move |run, _task| {
                policy::check_driver(run, &me, epoch)?;
                if let Some(session) = session {
                    run.session_id = Some(session);
                }
                Ok(event.into_iter().collect())
            })
            .await;
        if let Err(e) = result {
            warn!(run_id = %ctx.run_id, error = %e, "cannot record the agent's progress");
        }
    }
}

/// What a piece of progress changes in its run: the session it names, or
/// the event that records it (a denial, or the agent's progress).
fn progress_record(
    ctx: &RunContext,
    progress: Progress,
) -> (Option<String>, Option<crate::store::EventDraft>) {
    let (run_id, agent) = (ctx.run_id.to_string(), ctx.agent.as_str());
    let (kind, details) = match progress {
        Progress::Session(session) => return (Some(session), None),
        Progress::Denied {
            tool,
            input,
            reason,
            by,
        } => {
            let (input, input_bytes) = input_excerpt(&input);
            let data = json!({
                "run_id": run_id,
                "agent": agent,
                "tool": tool,
                "input": input,
                "input_bytes": input_bytes,
                "reason": reason,
                "by": by,
            });
            return (None, Some((EventKind::ToolDenied, data)));
        }
        // An empty text marks the reminder.
        Progress::Text(text) if text.is_empty() => {
            ("reminder", json!({ "text": reminder(ctx.agent_kind) }))
        }
        Progress::Text(text) => ("text", json!({ "text": text })),
        Progress::ToolUse { tool, input } => {
            let (input, input_bytes) = input_excerpt(&input);
            (
                "tool_use",
                json!({ "tool": tool, "input": input, "input_bytes": input_bytes }),
            )
        }
        Progress::Retry {
            reason,
            retry,
            wait_ms,
        } => (
            "model_retry",
            json!({ "reason": reason, "retry": retry, "wait_ms": wait_ms }),
        ),
        // Recorded in the ledger (see `crate::providers::ledger`).
        Progress::ModelCall(_)
        | Progress::CallSent { .. }
        | Progress::CallAnswered { .. }
        | Progress::AttemptTotal { .. } => return (None, None),
    };
    let mut data = json!({ "run_id": run_id, "agent": agent, "kind": kind });
    if let (Some(d), Value::Object(extra)) = (data.as_object_mut(), details) {
        d.extend(extra);
    }
    (None, Some((EventKind::AgentProgress, data)))
}

/// How a run that ended without a report is treated, by what stopped it.
struct RunEnd {
    kind: EventKind,
    reason: String,
    handoff: HandoffOutcome,
    /// Where a root run's task goes (user agents; planners settle by their output).
    task: Option<TaskStatus>,
    /// What the task's status reason says, when not `reason`.
    task_reason: Option<String>,
}

/// Records how the run ended, in one transaction: the run, its unfinished
/// handoff children (canceled), its handoff back to its parent, and its task.
async fn record_end(state: &AppState, ctx: &RunContext, outcome: Outcome) {
    let shutting_down = state.shutdown.is_cancelled();
    let agent_kind = ctx.agent_kind;
    let Outcome {
        result,
        session_id,
        resumed,
    } = outcome;
    let agent = ctx.agent.clone();
    let (me, epoch) = driver_of(state, ctx);
    let end = state
        .store
        .change_run_family(ctx.run_id, move |run, task, others| {
            // A run taken over by another replica is its new driver's to end.
            policy::check_driver(run, &me, epoch)?;
            // Every process of the run is dead: the run is released. (Its
            // usage was recorded call by call.)
            run.replica = None;
            if session_id.is_some() {
                run.session_id.clone_from(&session_id);
            }
            let output = match &result {
                Ok(end) => end.output.clone(),
                Err(e) => e.partial().output.clone(),
            };
            if output.is_some() {
                run.output.clone_from(&output);
            }
            if run.state == RunState::Finished {
                // Canceled (by CancelTask or its parent's end); keep what it cost.
                return Ok(Vec::new());
            }
            let now = now_ms();
            let mut details = json!({ "usage": run.usage.to_json(), "session_id": session_id });
            if let Some(output) = &output {
                details["output"] = json!(crate::providers::cut(output, 4096));
            }
            let ending = ending(
                &agent,
                agent_kind,
                has_report(run, agent_kind),
                result,
                resumed,
                shutting_down,
                output.as_deref(),
            );
            end_events(run, task, others, &ending, details, now, agent_kind)
        })
        .await;
    // A plan made for a task that starts by itself: start it now (a
    // refusal fails it with the reason).
    if let Ok((_, task, _)) = &end
        && agent_kind == AgentKind::Internal
        && task.status == TaskStatus::Planned
        && task.auto_start.is_some()
    {
        state.planned.send(task.id);
    }
    log_end(ctx, end);
    // Released even when nothing was recorded (a canceled run): whoever waits
    // for its processes to be gone here (CancelTask) hears it at once.
    state.hub.poke(ctx.task_id);
}

/// What a run's end writes, in one transaction with its family: its
/// handoff children end first (canceled), then the run with `ending`, then —
/// for a handoff's run — the handoff's end in its parent, and the task's
/// settling (a planner's plan, or a run that ended without its report).
fn end_events(
    run: &mut Run,
    task: &mut crate::domain::Task,
    others: &mut [Run],
    ending: &RunEnd,
    details: Value,
    now: i64,
    agent_kind: AgentKind,
) -> Result<Vec<crate::store::EventDraft>, crate::domain::DomainError> {
    let why = format!(
        "the run of '{}' that handed off to it ended ({})",
        run.agent,
        first_line(&ending.reason)
    );
    let mut events = handoff::end_descendants(
        run.id,
        others,
        task,
        handoff::EndFromOutside {
            kind: EventKind::RunCanceled,
            failure: HandoffFailure::Canceled,
            reason: &why,
            now_ms: now,
        },
    )?;
    events.extend(policy::end_run(
        run,
        task,
        ending.kind,
        ending.reason.clone(),
        details,
        now,
    )?);
    if run.handoff_index.is_some() {
        let parent = others.iter_mut().find(|o| Some(o.id) == run.parent);
        events.extend(handoff::end_handoff(
            run,
            parent,
            task,
            &ending.handoff,
            now,
        )?);
    }
    match agent_kind {
        AgentKind::Internal => {
            events.extend(planning::settle_planning(run, task, &ending.reason)?);
        }
        AgentKind::UserDefined => {
            if let Some(to) = ending.task {
                let why = ending.task_reason.as_deref().unwrap_or(&ending.reason);
                events.extend(policy::settle_task_without_report(run, task, to, why)?);
            }
        }
    }
    Ok(events)
}

/// Logs and traces how a run's end was recorded.
fn log_end(
    ctx: &RunContext,
    end: Result<(Run, crate::domain::Task, Vec<crate::domain::Event>), crate::store::StoreError>,
) {
    match end {
        Ok((run, _task, events)) => {
            // The run's own end event is the last run event (its handoff
            // children's come before it); none: it had been ended already.
            let how = events
                .iter()
                .rev()
                .find_map(|e| match e.kind {
                    EventKind::AgentCompleted => Some("completed"),
                    EventKind::RunFailed => Some("failed"),
                    EventKind::RunCanceled => Some("canceled"),
                    EventKind::RunInterrupted => Some("interrupted"),
                    _ => None,
                })
                .unwrap_or("canceled");
            super::trace::ended(&ctx.span, ctx, how, Some(&run));
            info!(run_id = %run.id, reason = run.end_reason.as_deref().unwrap_or(""), "run ended");
        }
        Err(e) => {
            super::trace::ended(&ctx.span, ctx, "unrecorded", None);
            warn!(run_id = %ctx.run_id, error = %e, "cannot record the end of a run");
        }
    }
}

/// The replica and epoch this driver writes as.
pub(super) fn driver_of(state: &AppState, ctx: &RunContext) -> (String, u32) {
    (state.store.replica().id.clone(), ctx.epoch)
}

/// What a run's end means, from how its attempts ended.
fn ending(
    agent: &Name,
    agent_kind: AgentKind,
    reported: bool,
    result: Result<AttemptEnd, AttemptError>,
    resumed: bool,
    shutting_down: bool,
    output: Option<&str>,
) -> RunEnd {
    if reported {
        return RunEnd {
            kind: EventKind::AgentCompleted,
            reason: "completed".to_owned(),
            handoff: HandoffOutcome::Completed,
            task: None,
            task_reason: None,
        };
    }
    match result {
        Err(AttemptError::Stopped { .. }) if shutting_down => {
            let reason = match agent_kind {
                AgentKind::UserDefined => "interrupted: the orchestrator shut down".to_owned(),
                AgentKind::Internal => {
                    "planning was interrupted: the orchestrator shut down; plan the task again"
                        .to_owned()
                }
            };
            RunEnd::interrupted(reason)
        }
        // Neither handed on nor resumable (a CLI stopped before its session
        // began): the task waits, as after a shutdown.
        Err(AttemptError::Fenced { reason, .. }) => {
            RunEnd::interrupted(format!("interrupted: {reason}"))
        }
        Err(AttemptError::Stopped { .. }) => RunEnd::failed(
            EventKind::RunCanceled,
            HandoffFailure::Canceled,
            "canceled".to_owned(),
            None,
        ),
        Err(AttemptError::Failed { reason, .. }) => RunEnd::failed(
            EventKind::RunFailed,
            HandoffFailure::AgentFailed,
            reason,
            Some(TaskStatus::Failed),
        ),
        Err(AttemptError::TimedOut { reason, .. }) => RunEnd::failed(
            EventKind::RunFailed,
            HandoffFailure::TimedOut,
            reason,
            Some(TaskStatus::Failed),
        ),
        Ok(_) => unreported(agent, agent_kind, resumed, output),
    }
}

/// The end of a run whose agent stopped without its report (after the
/// reminder, when `resumed`): the task waits; the handoff's parent is told
/// its last output.
fn unreported(agent: &Name, agent_kind: AgentKind, resumed: bool, output: Option<&str>) -> RunEnd {
    let what = match agent_kind {
        AgentKind::UserDefined => "a completion report",
        AgentKind::Internal => "its planner output",
    };
    let mut reason = format!("agent '{agent}' ended without {what}");
    if resumed {
        reason.push_str(", even after a reminder");
    }
    let mut ending = RunEnd::failed(
        EventKind::AgentCompleted,
        HandoffFailure::AgentFailed,
        reason,
        Some(TaskStatus::Waiting),
    );
    if let (HandoffOutcome::Failed(_, why), Some(output)) =
        (&mut ending.handoff, output.filter(|o| !o.trim().is_empty()))
    {
        why.push_str("; its last output: ");
        why.push_str(&crate::providers::cut(output, 2048));
    }
    ending
}

impl RunEnd {
    /// A run that failed in a way `kind` records, its handoff failing with
    /// `failure`, the task moved to `task`.
    fn failed(
        kind: EventKind,
        failure: HandoffFailure,
        reason: String,
        task: Option<TaskStatus>,
    ) -> Self {
        Self {
            kind,
            handoff: HandoffOutcome::Failed(failure, reason.clone()),
            reason,
            task,
            task_reason: None,
        }
    }

    /// A run interrupted with `reason`: its handoff fails as interrupted,
    /// its task waits to be started again.
    fn interrupted(reason: String) -> Self {
        Self::failed(
            EventKind::RunInterrupted,
            HandoffFailure::Interrupted,
            reason.clone(),
            Some(TaskStatus::Waiting),
        )
        .with_task_reason(format!("{reason}; start it again"))
    }

    /// The same ending, with the task told `reason` instead.
    fn with_task_reason(mut self, reason: String) -> Self {
        self.task_reason = Some(reason);
        self
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
