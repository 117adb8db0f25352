//! Tool policy: which run may call which tool now, and what the reporting tools
//! do to a run and its task. Pure rules; the store applies them in a transaction.

use chorus_catalog::args::{CompletionReport, PlannerOutput, ReportStatus};
use chorus_tool_exec::record::{ToolCallRecord, input_excerpt};
use serde_json::{Value, json};

use super::{
    DomainError, EventKind, HandoffFailure, Run, RunState, Stage, StageExt, Task, TaskStatus,
};

mod drivers;
pub mod handoff;
pub mod planning;

pub use drivers::{check_driver, interrupt_runs, interrupt_task, queue_run, resume_run};

/// Events a rule asks to record, in order.
pub type Events = Vec<(EventKind, Value)>;

/// Checks that `run` may call `tool` now: the run is active, and the tool is
/// always granted or in its allow-list.
pub fn check_tool_call(run: &Run, tool: &str) -> Result<(), DomainError> {
    match run.state {
        RunState::Active => {}
        RunState::Spawning => {
            return Err(DomainError::RunNotActive(format!(
                "run {} (agent {}) is still starting; retry when it is active",
                run.id, run.agent
            )));
        }
        RunState::AwaitingHandoff => {
            return Err(DomainError::RunNotActive(format!(
                "run {} is waiting for a handoff to finish; it can call tools again when the handoff returns",
                run.id
            )));
        }
        RunState::Finished => {
            return Err(DomainError::RunNotActive(format!(
                "run {} has ended; it can do nothing more",
                run.id
            )));
        }
    }
    // A grant (network) is asked about when it is used: the run must hold it.
    let always_granted = match chorus_catalog::get(tool) {
        Some(spec) => spec.always_granted,
        None if chorus_catalog::get_grant(tool).is_some() => false,
        None => {
            return Err(DomainError::invalid(
                "tool",
                format!("unknown tool '{tool}'; call help to list the tools"),
            ));
        }
    };
    if always_granted || run.tools.iter().any(|t| t == tool) {
        Ok(())
    } else {
        Err(DomainError::NotAllowed(format!(
            "tool '{tool}' is not allowed for agent '{}'; its allowed tools are: {}",
            run.agent,
            run.tools.join(", ")
        )))
    }
}

/// Most bytes of a status reason a person gives (UpdateTaskStatus, CancelTask).
pub const MAX_REASON_BYTES: usize = 2048;

/// Checks a reason against [`MAX_REASON_BYTES`].
pub fn check_status_reason(reason: &str) -> Result<(), DomainError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(DomainError::invalid(
            "reason",
            format!(
                "{} bytes, over the {MAX_REASON_BYTES}-byte limit; keep it to a sentence or two",
                reason.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a task may be deleted: it is over and none of its `live_runs` is going.
pub fn check_deletable(task: &Task, live_runs: u64) -> Result<(), DomainError> {
    let over = matches!(
        task.status,
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Canceled
    );
    if !over || live_runs > 0 {
        return Err(DomainError::Transition(format!(
            "task {} is {}; only a completed, failed or canceled task with no run going can be deleted: cancel it with CancelTask first",
            task.id,
            task.status.as_str()
        )));
    }
    Ok(())
}

/// Refuses a change by hand to a task whose runs are still going.
pub fn check_no_live_runs(task: &Task, runs: &[Run]) -> Result<(), DomainError> {
    match runs.first() {
        None => Ok(()),
        Some(run) => Err(DomainError::Transition(format!(
            "task {} has a run in progress (agent {}, run {}); CancelTask stops its runs and ends the task, or wait until they end",
            task.id, run.agent, run.id
        ))),
    }
}

/// Refuses a plan change once the task is completed (its plan is its record)
/// or while the planner writes it.
pub fn check_planning_editable(task: &Task) -> Result<(), DomainError> {
    if task.status == TaskStatus::Completed {
        return Err(DomainError::Transition(format!(
            "task {} is {}; its plan and Q&A are kept as they were: create a new task to plan again",
            task.id,
            task.status.as_str()
        )));
    }
    if task.status == TaskStatus::Planning {
        return Err(DomainError::Transition(format!(
            "task {} is being planned; change its plan once the planner is done",
            task.id
        )));
    }
    Ok(())
}

/// Who reports a finished call of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reporter {
    /// The run's current driver: its token is the run's.
    Driver,
    /// A driver that lost the run to a takeover while (or before) the call
    /// ran: its token is of an earlier epoch. The agent that made the call
    /// never gets its answer, so the call is recorded as interrupted.
    LostDriver,
}

/// Checks that a finished call of `tool` may be recorded for `run`: it began
/// before the run ended (a call reported after the end is recorded whatever
/// it ended with — stopped by the end, its caller gone with a CLI that
/// reported and exited, or done — so the audit holds every call; one that
/// began after the end never ran for the run) and the tool is one the run
/// may call (nobody records what it could not do).
pub fn check_recordable(run: &Run, call: &ToolCallRecord, now_ms: i64) -> Result<(), DomainError> {
    let tool = call.tool.as_str();
    // When it began, as its reporter says (a record retried arrives late),
    // else as its duration says; never later than now.
    let began = match call.started_ms {
        0 => now_ms.saturating_sub(i64::try_from(call.duration_ms).unwrap_or(i64::MAX)),
        started => started.min(now_ms),
    };
    let began_before_the_end = run.finished_ms.is_some_and(|end| began <= end);
    if run.state == RunState::Finished && !began_before_the_end {
        return Err(DomainError::RunNotActive(format!(
            "run {} has ended; a call it made is no longer recorded",
            run.id
        )));
    }
    let allowed = chorus_catalog::get(tool)
        .is_some_and(|spec| spec.always_granted || run.tools.iter().any(|t| t == tool));
    if !allowed {
        return Err(DomainError::NotAllowed(format!(
            "tool '{tool}' is not allowed for agent '{}', so no call of it is recorded",
            run.agent
        )));
    }
    Ok(())
}

/// The status of a call whose run was taken over by another driver while it
/// ran: its agent never got the answer. The event keeps what tool-exec
/// reported of its effect (`reported_status`, the output excerpt).
pub const INTERRUPTED_BY_A_TAKEOVER: &str = "interrupted";

/// The `tool_executed` event of a call reported by `by` (see
/// [`tool_executed`]); a lost driver's call is recorded as interrupted.
pub fn reported_call(run: &Run, call: ToolCallRecord, by: Reporter) -> (EventKind, Value) {
    match by {
        Reporter::Driver => tool_executed(run, call),
        Reporter::LostDriver => {
            let reported = call.status.clone();
            let (kind, mut data) = tool_executed(
                run,
                ToolCallRecord {
                    status: INTERRUPTED_BY_A_TAKEOVER.to_owned(),
                    ..call
                },
            );
            data["reported_status"] = json!(reported);
            data["reason"] = json!(
                "the run was taken over by another driver while this call ran; the agent never got its answer"
            );
            (kind, data)
        }
    }
}

/// The `tool_executed` event of a finished call of `run`, its input and output
/// bounded by the history's one rule (`chorus_tool_exec::record`).
pub fn tool_executed(run: &Run, call: ToolCallRecord) -> (EventKind, Value) {
    let call = call.bounded();
    (
        EventKind::ToolExecuted,
        json!({
            "run_id": run.id.to_string(),
            "agent": run.agent.as_str(),
            "tool": call.tool,
            "input": call.input,
            "input_bytes": call.input_bytes,
            "status": call.status,
            "duration_ms": call.duration_ms,
            "output_excerpt": call.output_excerpt,
            "output_bytes": call.output_bytes,
        }),
    )
}

/// The events recording a denied call (the caller records them; nothing else changes).
pub fn denied_events(run: &Run, tool: &str, reason: &str) -> Events {
    vec![(
        EventKind::ToolDenied,
        json!({ "run_id": run.id.to_string(), "agent": run.agent.as_str(), "tool": tool, "reason": reason, "by": "chorus" }),
    )]
}

/// Applies a completion report. Exactly once per run. A root run's report decides
/// the task's status (complete → completed, blocked → waiting with the reason,
/// failed → failed); a handoff child's report is kept on the child run for its
/// parent and leaves the task alone. `change` (the task's change on its own
/// branch, as it stood) is recorded with it.
pub fn apply_completion_report(
    run: &mut Run,
    task: &mut Task,
    report: CompletionReport,
    change: Option<serde_json::Value>,
) -> Result<Events, DomainError> {
    if run.completion_report.is_some() {
        return Err(DomainError::AlreadyDone(format!(
            "run {} has already submitted its completion report",
            run.id
        )));
    }
    // The whole report stays on the run; history and the task's reason keep
    // what they keep of any agent's words.
    let mut events: Events = vec![(
        EventKind::CompletionReportSubmitted,
        json!({
            "run_id": run.id.to_string(),
            "agent": run.agent.as_str(),
            "status": report.status,
            "summary": kept(&report.summary),
            "blocked_reason": report.blocked_reason.as_deref().map(kept),
        }),
    )];
    if let (Some(change), Some((_, data))) = (change, events.first_mut()) {
        data["change"] = change;
    }
    if run.parent.is_none() {
        let (to, reason) = match report.status {
            ReportStatus::Complete => (TaskStatus::Completed, None),
            ReportStatus::Blocked => (
                TaskStatus::Waiting,
                Some(
                    report
                        .blocked_reason
                        .clone()
                        .filter(|r| !r.trim().is_empty())
                        .unwrap_or_else(|| report.summary.clone()),
                ),
            ),
            ReportStatus::Failed => (TaskStatus::Failed, Some(report.summary.clone())),
        };
        events.push(change_status(task, to, reason.as_deref().map(kept))?);
    }
    run.completion_report = Some(report);
    Ok(events)
}

/// Stores a planner's verdict. Exactly once per run.
pub fn apply_planner_output(run: &mut Run, output: PlannerOutput) -> Result<Events, DomainError> {
    if run.planner_output.is_some() {
        return Err(DomainError::AlreadyDone(format!(
            "run {} has already submitted its planner output",
            run.id
        )));
    }
    let kind = match &output {
        PlannerOutput::Plan { .. } => "plan",
        PlannerOutput::Questions { questions } if questions.iter().all(|q| q.trim().is_empty()) => {
            return Err(DomainError::invalid(
                "questions",
                "no question to ask: give at least one question, or submit a plan",
            ));
        }
        PlannerOutput::Questions { .. } => "questions",
        PlannerOutput::Error { .. } => "error",
    };
    run.planner_output = Some(output);
    Ok(vec![(
        EventKind::PlannerOutputSubmitted,
        json!({ "run_id": run.id.to_string(), "type": kind }),
    )])
}

/// Fails a task that was refused before any agent worked on it (it could not
/// be planned or started by itself): the reason says so and why. Only a task
/// still pending or planned is refused: one that someone else moved on
/// meanwhile (a person's StartTask, a reply) is left as it is.
pub fn refuse(task: &mut Task, why: &str) -> Result<Events, DomainError> {
    if !matches!(task.status, TaskStatus::Pending | TaskStatus::Planned) {
        return Ok(Vec::new());
    }
    Ok(vec![change_status(
        task,
        TaskStatus::Failed,
        Some(kept(&format!("refused: {why}"))),
    )?])
}

/// Moves a task through the status table and returns the `status_changed` event.
pub fn change_status(
    task: &mut Task,
    to: TaskStatus,
    reason: Option<String>,
) -> Result<(EventKind, Value), DomainError> {
    let from = task.status;
    from.check_transition(to)?;
    task.budget
        .status_changed(from, to, crate::domain::now_ms());
    task.status = to;
    task.status_reason = reason.clone();
    let mut data = json!({ "from": from.as_str(), "to": to.as_str(), "reason": reason });
    // A completed task's work is done, whichever stage its agents reached:
    // the change says so, so the history still holds every change.
    if to == TaskStatus::Completed && task.stage != Stage::Done {
        data["stage"] = json!({ "from": task.stage.as_str(), "to": Stage::Done.as_str() });
        task.stage = Stage::Done;
    }
    Ok((EventKind::StatusChanged, data))
}

/// Moves a task to another stage and returns the `stage_changed` event.
pub fn change_stage(
    task: &mut Task,
    to: Stage,
    by: Option<&Run>,
) -> Result<(EventKind, Value), DomainError> {
    let from = task.stage;
    from.check_transition(to)?;
    task.stage = to;
    Ok((
        EventKind::StageChanged,
        json!({ "from": from.as_str(), "to": to.as_str(), "agent": by.map(|r| r.agent.as_str()) }),
    ))
}

/// Moves a spawning run to active and makes its agent the task's current agent;
/// returns the `agent_started` event.
pub fn activate_run(run: &mut Run, task: &mut Task) -> Result<(EventKind, Value), DomainError> {
    run.state.check_transition(RunState::Active)?;
    run.state = RunState::Active;
    task.current_agent = Some(run.agent.clone());
    Ok((
        EventKind::AgentStarted,
        json!({ "run_id": run.id.to_string(), "agent": run.agent.as_str() }),
    ))
}

/// Ends a run with `reason` at `now_ms`; the task's current agent is cleared when it
/// was this run's agent. Returns the `agent_completed` event (and the end of
/// any approval its calls waited for). A finished run cannot finish again.
pub fn finish_run(
    run: &mut Run,
    task: &mut Task,
    reason: String,
    now_ms: i64,
) -> Result<Events, DomainError> {
    end_run(
        run,
        task,
        EventKind::AgentCompleted,
        reason,
        Value::Null,
        now_ms,
    )
}

/// Ends a run and returns the event saying how: `kind` (agent_completed,
/// run_failed, run_canceled, run_interrupted) with the run, agent, reason and
/// the fields of `details` (an object: usage, session id, output...); then
/// the end of each approval its calls still waited for (canceled: whoever
/// waited for it is gone with the run).
pub fn end_run(
    run: &mut Run,
    task: &mut Task,
    kind: EventKind,
    reason: String,
    details: Value,
    now_ms: i64,
) -> Result<Events, DomainError> {
    if run.state == RunState::Finished {
        return Err(DomainError::RunNotActive(format!(
            "run {} has already finished ({})",
            run.id,
            run.end_reason.as_deref().unwrap_or("no reason given")
        )));
    }
    run.state.check_transition(RunState::Finished)?;
    run.state = RunState::Finished;
    run.finished_ms = Some(now_ms.max(run.started_ms));
    run.end_reason = Some(reason.clone());
    if task.current_agent.as_ref() == Some(&run.agent) {
        task.current_agent = None;
    }
    let mut data =
        json!({ "run_id": run.id.to_string(), "agent": run.agent.as_str(), "reason": reason });
    if let (Some(data), Value::Object(details)) = (data.as_object_mut(), details) {
        data.extend(details);
    }
    let mut events = vec![(kind, data)];
    events.extend(task.approvals.end_run(run.id, now_ms));
    Ok(events)
}

/// What becomes of a root run's task when the run ends without a report: the
/// task moves to `to` with `reason` if it is still active (a report, a cancel or
/// a manual change may have moved it already). Returns the status event, if any.
pub fn settle_task_without_report(
    run: &Run,
    task: &mut Task,
    to: TaskStatus,
    reason: &str,
) -> Result<Option<(EventKind, Value)>, DomainError> {
    if run.parent.is_some() || task.status != TaskStatus::Active {
        return Ok(None);
    }
    change_status(task, to, Some(reason.to_owned())).map(Some)
}

/// Cancels a task: it goes canceled with `reason`, and each of its runs that has
/// not finished ends with `run_canceled` (children before their parents; each
/// handoff among them fails as canceled).
pub fn cancel_task(
    task: &mut Task,
    runs: &mut [Run],
    reason: &str,
    now_ms: i64,
) -> Result<Events, DomainError> {
    let mut events = vec![change_status(
        task,
        TaskStatus::Canceled,
        Some(reason.to_owned()),
    )?];
    let why = format!("the task was canceled: {reason}");
    events.extend(handoff::end_all_runs(
        runs,
        task,
        handoff::EndFromOutside {
            kind: EventKind::RunCanceled,
            failure: HandoffFailure::Canceled,
            reason: &why,
            now_ms,
        },
    )?);
    Ok(events)
}

/// What a workspace's tasks have spent, against its spending limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceSpend {
    pub limits: super::WorkspaceLimits,
    /// Pico-dollars spent this UTC day and this UTC month.
    pub today: u64,
    pub this_month: u64,
    /// This UTC day (days since 1970-01-01).
    pub day: i64,
}

/// Refuses to start a task whose workspace has reached a spending limit.
pub fn start_within_spending(spend: WorkspaceSpend) -> Result<(), DomainError> {
    match spend.limits.reached(spend.today, spend.this_month) {
        Some((limit, spent, value)) => Err(DomainError::Transition(super::exceeded_reason(
            limit, spent, value,
        ))),
        None => Ok(()),
    }
}

/// Fixes the limits a task starts with — its own, else `defaults` (the
/// agent's, else the workspace's) — and refuses to start a task that has
/// reached one already (FAILED_PRECONDITION, naming the limit and how to
/// raise it).
pub fn start_within_budget(task: &mut Task, defaults: super::Budget) -> Result<(), DomainError> {
    let own = task.budget.own;
    task.budget.set(own, defaults);
    match task.budget.reached(&task.usage, crate::domain::now_ms()) {
        Some((limit, spent, value)) => Err(DomainError::Transition(super::exceeded_reason(
            limit, spent, value,
        ))),
        None => Ok(()),
    }
}

/// Sets a task's own budget (its limits in force follow, over `defaults`).
pub fn set_budget(
    task: &mut Task,
    own: super::Budget,
    defaults: super::Budget,
) -> Result<Events, DomainError> {
    super::check_budget(&own)?;
    task.budget.set(own, defaults);
    Ok(vec![(
        EventKind::BudgetChanged,
        json!({ "own": own.to_json(), "limits": task.budget.limits.to_json() }),
    )])
}

/// What a task spent meets its budget (after a model call or tool calls
/// were added in this transaction): warnings past 80 %, and at a limit the
/// stop — every unfinished run of the task ends (`run_canceled`, their
/// processes stop as a cancel's do), `budget_exceeded` is recorded once and
/// the task waits (a task being planned fails) with the reason saying how
/// to raise the limit. Nothing when only a task that no run works on spent.
pub fn spend(
    task: &mut Task,
    runs: &mut [Run],
    workspace: Option<WorkspaceSpend>,
    now_ms: i64,
) -> Result<Events, DomainError> {
    let mut verdict = task.budget.check(&task.usage, now_ms);
    if let Some(reached) = workspace.and_then(|w| w.limits.reached(w.today, w.this_month))
        && !matches!(verdict, super::Verdict::Exceeded(..))
    {
        verdict = super::Verdict::Exceeded(reached.0, reached.1, reached.2);
    }
    let pct = |spent: u64, value: u64| spent.saturating_mul(100) / value.max(1);
    let show = |limit: super::Limit, spent: u64, value: u64| {
        json!({
            "limit": limit.as_str(),
            "spent": limit.show(spent),
            "limit_value": limit.show(value),
            "percent": pct(spent, value),
        })
    };
    // The workspace's limits past 80 %: a warning once per task and day
    // (or month).
    let mut nearing = Vec::new();
    if let Some(w) = workspace {
        for (limit, spent, value) in w.limits.nearing(w.today, w.this_month) {
            let period = match limit {
                super::Limit::WorkspaceMonthly => super::month_start(w.day),
                _ => w.day,
            };
            if task.budget.warn_workspace(limit, period) {
                nearing.push((limit, spent, value));
            }
        }
    }
    let warnings = |found: Vec<(super::Limit, u64, u64)>| {
        found
            .into_iter()
            .chain(nearing)
            .map(|(limit, spent, value)| (EventKind::BudgetWarning, show(limit, spent, value)))
            .collect()
    };
    match verdict {
        super::Verdict::Within => Ok(warnings(Vec::new())),
        super::Verdict::Warn(found) => Ok(warnings(found)),
        super::Verdict::Exceeded(limit, spent, value) => {
            let to = match task.status {
                TaskStatus::Active => TaskStatus::Waiting,
                TaskStatus::Planning => TaskStatus::Failed,
                _ => return Ok(Events::new()),
            };
            let reason = super::exceeded_reason(limit, spent, value);
            let mut data = show(limit, spent, value);
            data["reason"] = json!(reason);
            let mut events = vec![(EventKind::BudgetExceeded, data)];
            events.extend(handoff::end_all_runs(
                runs,
                task,
                handoff::EndFromOutside {
                    kind: EventKind::RunCanceled,
                    failure: HandoffFailure::Canceled,
                    reason: &reason,
                    now_ms,
                },
            )?);
            events.push(change_status(task, to, Some(reason))?);
            Ok(events)
        }
    }
}

/// What history (and a task's status reason) keeps of an agent's words: as of
/// a call's input, a long text cut to its start and `…[N bytes]` (a 1 MiB
/// comment or report summary was kept whole, in every watcher's stream).
fn kept(text: &str) -> String {
    match input_excerpt(&Value::String(text.to_owned())).0 {
        Value::String(kept) => kept,
        _ => text.to_owned(),
    }
}

/// A comment on a task's history.
pub fn comment(run: &Run, text: &str) -> Result<(EventKind, Value), DomainError> {
    if text.trim().is_empty() {
        return Err(DomainError::invalid("text", "a comment must not be empty"));
    }
    let text = kept(text);
    Ok((
        EventKind::CommentAdded,
        json!({ "run_id": run.id.to_string(), "agent": run.agent.as_str(), "text": text }),
    ))
}

#[cfg(test)]
mod tests;
