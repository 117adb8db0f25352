//! Approval rules on the call path: what a run's rules decide about a call,
//! and for an `ask`, the wait for a person's answer — recorded on the task
//! (so that any replica can answer it, and a call asked again after a lost
//! answer finds it), woken by the task's events, ended by the answer, the
//! rule's deadline or the run's end. The call, not the server, waits.

use serde_json::Value;
use tracing::{info, warn};

use crate::domain::approval::{
    Answer, Approval, ApprovalOutcome, Asking, CallFacts, Decision, Ruling,
};
use crate::domain::policy;
use crate::domain::{DomainError, Run, RunState, Task, TaskId, now_ms};
use crate::error::ServiceError;
use crate::state::AppState;

/// A call as tool-exec describes it for the rules.
#[derive(Debug, Clone, Default)]
pub struct ToolCall {
    pub arguments: Value,
    /// Unique to the call, the same each time it is asked about (empty: a
    /// fresh one).
    pub call_key: String,
    /// Where a file tool's path leads once links are followed.
    pub resolved_path: Option<String>,
    /// What its face does once the call waits for a person.
    pub while_waiting: WhileWaiting,
}

/// What a face does when a call starts to wait for a person: the gRPC
/// server gives back the call's places, so that calls waiting for people,
/// however many, never fill a caller's places (see
/// `chorus_serve::shed::HeldPlaces`).
#[derive(Clone, Default)]
pub struct WhileWaiting(Option<std::sync::Arc<dyn Fn() + Send + Sync>>);

impl WhileWaiting {
    pub fn new(begin: impl Fn() + Send + Sync + 'static) -> Self {
        Self(Some(std::sync::Arc::new(begin)))
    }

    fn begin(&self) {
        if let Some(begin) = &self.0 {
            begin();
        }
    }
}

impl std::fmt::Debug for WhileWaiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "WhileWaiting(..)"
        } else {
            "WhileWaiting(none)"
        })
    }
}

/// What the rules of `run` decide about `tool` with `call`'s arguments; the
/// task's approved rules count only for an `ask` (read then).
pub(crate) async fn ruling(
    state: &AppState,
    run: &Run,
    tool: &str,
    call: &ToolCall,
) -> Result<Option<Ruling>, ServiceError> {
    if run.rules.is_empty() || chorus_catalog::get(tool).is_some_and(|t| t.always_granted) {
        return Ok(None);
    }
    let root = run
        .token
        .as_ref()
        .and_then(|t| t.root.to_str().map(str::to_owned));
    let facts = CallFacts::new(
        tool,
        &call.arguments,
        root.as_deref(),
        call.resolved_path.as_deref(),
    );
    let mut ruling = run.rules.decide(&facts, &[])?;
    if ruling.decision == Decision::Ask {
        let task = state.store.get_task(run.task_id).await?;
        ruling = run.rules.decide(&facts, &task.approvals.task_rules)?;
    }
    Ok(Some(ruling))
}

/// Holds a call to its run's rules: Ok(false) when it may run at once,
/// Ok(true) when it waited for a person who approved it (its run is to be
/// read again: it may have changed meanwhile); a denial or a refusal is the
/// error.
pub(crate) async fn check(
    state: &AppState,
    run: &Run,
    tool: &str,
    call: &ToolCall,
) -> Result<bool, ServiceError> {
    match ruling(state, run, tool, call).await? {
        Some(ruling) if ruling.decision == Decision::Deny => {
            deny(state, run, tool, &ruling).await.map(|()| false)
        }
        Some(ruling) if ruling.decision == Decision::Ask => {
            ask(state, run, tool, call, ruling).await.map(|()| true)
        }
        _ => Ok(false),
    }
}

/// Refuses a call a deny rule decides, recording `tool_denied` with the rule.
pub(crate) async fn deny(
    state: &AppState,
    run: &Run,
    tool: &str,
    ruling: &Ruling,
) -> Result<(), ServiceError> {
    let rule = ruling
        .rule
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let reason = format!(
        "{tool} is denied by the approval rule '{rule}' of agent {}",
        ruling.agent.as_deref().unwrap_or("?")
    );
    state
        .store
        .append_events(run.task_id, policy::denied_events(run, tool, &reason))
        .await?;
    warn!(run_id = %run.id, tool, rule = %rule, "tool denied by an approval rule");
    Err(DomainError::NotAllowed(reason).into())
}

/// Asks a person about the call (or finds it asked, by its key) and waits
/// for the answer: Ok when approved; NotAllowed with the reason when denied
/// or past its deadline; RunNotActive when the run ended meanwhile. While
/// the service shuts down: UNAVAILABLE, the approval left waiting for the
/// call asked again elsewhere.
pub(crate) async fn ask(
    state: &AppState,
    run: &Run,
    tool: &str,
    call: &ToolCall,
    ruling: Ruling,
) -> Result<(), ServiceError> {
    let task_id = run.task_id;
    // Subscribed before the approval is written: no answer is missed.
    let mut changes = state.hub.subscribe(task_id);
    let call_key = if call.call_key.is_empty() {
        format!("key-{}", uuid::Uuid::new_v4().simple())
    } else {
        call.call_key.clone()
    };
    let asking = Asking {
        id: format!("ap-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        run_id: run.id,
        agent: run.agent.to_string(),
        call_key: call_key.clone(),
        tool: tool.to_owned(),
        arguments: crate::domain::approval::shown_arguments(&call.arguments),
        rule: ruling.rule.clone().unwrap_or_default(),
        rule_agent: ruling.agent.clone().unwrap_or_default(),
    };
    let run_id = run.id;
    let (task, _) = state
        .store
        .change_task(task_id, move |task| {
            let (_, events) = task.approvals.ask(asking, now_ms())?;
            Ok(events)
        })
        .await?;
    let approval = approval_of(&task, run_id, &call_key)?;
    info!(task_id = %task_id, run_id = %run_id, approval_id = %approval.id, tool, "a call waits for approval");
    let asked = std::time::Instant::now();
    call.while_waiting.begin();
    // Dropped before the wait ends (whoever asked went away): the approval
    // is ended then, so nobody is asked about a call that will not run.
    let gone = AskerGone {
        state: state.clone(),
        task: task_id,
        approval: Some(approval.id.clone()),
    };
    let outcome = wait(state, &mut changes, task_id, run_id, &call_key).await;
    chorus_telemetry::metrics().approval(
        outcome.as_ref().map_or("error", |a| {
            a.answer.as_ref().map_or("pending", |x| x.outcome.as_str())
        }),
        asked.elapsed().as_secs_f64(),
    );
    gone.disarm();
    let approval = outcome?;
    match approval.refusal() {
        None => Ok(()),
        Some(reason)
            if approval
                .answer
                .as_ref()
                .is_some_and(|a| a.outcome == ApprovalOutcome::Canceled) =>
        {
            Err(DomainError::RunNotActive(reason).into())
        }
        Some(reason) => Err(DomainError::NotAllowed(reason).into()),
    }
}

/// Ends a waiting approval when the call that waits for it is dropped.
struct AskerGone {
    state: AppState,
    task: TaskId,
    approval: Option<String>,
}

impl AskerGone {
    fn disarm(mut self) {
        self.approval = None;
    }
}

impl Drop for AskerGone {
    fn drop(&mut self) {
        let Some(id) = self.approval.take() else {
            return;
        };
        let (state, task) = (self.state.clone(), self.task);
        // Not while the service shuts down: the approval waits for the call
        // asked again elsewhere.
        if state.shutdown.is_cancelled() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let ended = state
                    .store
                    .change_task(task, move |task| {
                        Ok(task.approvals.end_asker_gone(&id, now_ms()))
                    })
                    .await;
                if let Err(e) = ended {
                    warn!(task_id = %task, error = %e, "cannot end an approval whose asker went away; it ends with its run");
                }
            });
        }
    }
}

fn approval_of(
    task: &Task,
    run: crate::domain::RunId,
    call_key: &str,
) -> Result<Approval, ServiceError> {
    task.approvals
        .of_call(run, call_key)
        .cloned()
        .ok_or_else(|| {
            ServiceError::Internal(format!(
                "the approval of call {call_key} is gone from task {}",
                task.id
            ))
        })
}

/// Waits until the call's approval is answered, its deadline passes (it is
/// ended as expired) or its run ends (ended as canceled); returns it then.
async fn wait(
    state: &AppState,
    changes: &mut crate::history::Subscription,
    task_id: TaskId,
    run_id: crate::domain::RunId,
    call_key: &str,
) -> Result<Approval, ServiceError> {
    loop {
        let task = state.store.get_task(task_id).await?;
        let approval = approval_of(&task, run_id, call_key)?;
        if !approval.is_pending() {
            return Ok(approval);
        }
        let run = state.store.get_run(run_id).await?;
        let now = now_ms();
        let ended = if run.state == RunState::Finished {
            Some(ApprovalOutcome::Canceled)
        } else if now >= approval.deadline_ms {
            Some(ApprovalOutcome::Expired)
        } else {
            None
        };
        if let Some(outcome) = ended {
            let id = approval.id.clone();
            state
                .store
                .change_task(task_id, move |task| {
                    Ok(task.approvals.end(&id, outcome, now_ms()))
                })
                .await?;
            continue;
        }
        let left = std::time::Duration::from_millis(
            u64::try_from(approval.deadline_ms - now).unwrap_or(0),
        );
        tokio::select! {
            () = changes.changed() => {}
            () = tokio::time::sleep(left) => {}
            () = state.shutdown.cancelled() => {
                return Err(ServiceError::Unavailable(format!(
                    "the orchestrator is shutting down while approval {} waits; ask again: it still waits",
                    approval.id
                )));
            }
        }
    }
}

/// A person's answer to an approval of `task`.
#[derive(Debug, Clone)]
pub struct Answering {
    pub task: TaskId,
    pub approval_id: String,
    pub approve: bool,
    pub for_task: bool,
    pub reason: Option<String>,
    /// Who answers (a principal's name).
    pub by: String,
}

/// Answers an approval: the call that waits (on whichever replica) goes on
/// or is refused with the reason.
pub async fn answer(state: &AppState, a: Answering) -> Result<Approval, ServiceError> {
    let outcome = match (a.approve, a.for_task) {
        (true, false) => ApprovalOutcome::Approved,
        (true, true) => ApprovalOutcome::ApprovedForTask,
        (false, false) => ApprovalOutcome::Denied,
        (false, true) => {
            return Err(DomainError::invalid(
                "for_task",
                "only an approval is for the task; a denial is for this call",
            )
            .into());
        }
    };
    if let Some(reason) = &a.reason
        && reason.len() > 2000
    {
        return Err(DomainError::invalid("reason", "at most 2000 bytes").into());
    }
    let id = a.approval_id.trim().to_owned();
    if id.is_empty() {
        return Err(DomainError::invalid(
            "approval_id",
            "name the approval (chorus task show lists the ones that wait)",
        )
        .into());
    }
    let answer = Answer {
        outcome,
        by: a.by,
        at_ms: now_ms(),
        reason: a.reason.filter(|r| !r.trim().is_empty()),
    };
    let key = id.clone();
    let (task, _) = state
        .store
        .change_task(a.task, move |task| task.approvals.answer(&key, answer))
        .await?;
    let approval = task.approvals.get(&id).cloned().ok_or_else(|| {
        ServiceError::Internal(format!(
            "approval {id} is gone from task {} once answered",
            a.task
        ))
    })?;
    info!(task_id = %a.task, approval_id = %id, outcome = outcome.as_str(), "approval answered");
    Ok(approval)
}

/// A reply to a task that waits for an approval, as a message says it (an
/// A2A reply): a data part `{"approve": bool, "approvalId"?, "forTask"?,
/// "reason"?}`, or words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    pub approve: Option<bool>,
    pub approval_id: Option<String>,
    pub for_task: bool,
    pub reason: Option<String>,
}

/// How to reply, for a person or a client that sent something else.
pub const REPLY_HELP: &str = "reply with a data part {\"approve\": true} (or false, with \"reason\"; \"forTask\": true approves its rule for the rest of the task; \"approvalId\" names one of several), or the words \"approve\", \"approve for the task\" or \"deny: <why>\"";

/// Answers the oldest waiting approval of `task` (or the one the reply
/// names) from a reply's data, or failing that its words.
pub async fn reply(
    state: &AppState,
    task: &Task,
    text: &str,
    reply: Reply,
    by: String,
) -> Result<Approval, ServiceError> {
    let approval_id = match reply.approval_id.clone() {
        Some(id) => id,
        None => task
            .approvals
            .pending()
            .next()
            .map(|a| a.id.clone())
            .ok_or_else(|| {
                ServiceError::Precondition(format!(
                    "task {} has no call waiting for approval",
                    task.id
                ))
            })?,
    };
    let words = text.trim();
    let lower = words.to_lowercase();
    let (approve, for_task, reason) = match reply.approve {
        Some(approve) => (approve, reply.for_task, reply.reason),
        None if lower.starts_with("approve") || lower == "yes" || lower == "ok" => (
            true,
            lower.contains("for the task") || lower.contains("for task"),
            None,
        ),
        None if lower.starts_with("deny") || lower.starts_with("no") => {
            let why = words
                .split_once(':')
                .map_or(words, |(_, why)| why.trim())
                .to_owned();
            (false, false, Some(why))
        }
        None => {
            return Err(DomainError::invalid(
                "message",
                format!("task {} waits for a call's approval: {REPLY_HELP}", task.id),
            )
            .into());
        }
    };
    answer(
        state,
        Answering {
            task: task.id,
            approval_id,
            approve,
            for_task,
            reason,
            by,
        },
    )
    .await
}
