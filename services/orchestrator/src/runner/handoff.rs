//! A handoff: starts an agent on a task with a prompt and streams its run, in
//! domain types (the Handoff RPC and the embedded gate convert).
//!
//! With the parent's run token (an agent handing off through chorus-tools or the
//! API tool loop) the new run is a child: in one transaction the parent starts
//! waiting and the child opens; the parent's clock stops until the child ends.
//! Without a token the run is the task's root run (the task must be planned or
//! waiting).
//!
//! The stream is read from the task's history, not from the run: `started` is
//! the `agent_handoff_started` event, progress is the child's events, and the
//! terminal message is its `agent_handoff_completed`, written in the same
//! transaction that ends the child (by the driver, a cancel, the parent's end or
//! the recovery after a restart). So a caller that disconnects loses nothing, a
//! re-opened stream (`run_id`) replays the same messages, and every stream ends
//! with exactly one terminal message.

use std::pin::Pin;

use chorus_tool_exec::record::ToolCallRecord;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{info, warn};

use super::launch::Launch;
use super::start::{before, check_prompt, task_message, timeout_or};
use crate::domain::policy;
use crate::domain::policy::handoff::begin_handoff;
use crate::domain::{
    AgentKind, Event, EventKind, HandoffFailure, Name, Run, RunId, Task, TaskId, TaskStatus, Usage,
};
use crate::error::ServiceError;
use crate::history;
use crate::state::AppState;
use crate::store::StoreError;

/// What a handoff asks: a new run of `agent` with `prompt` (on the parent's
/// task, or `task`), or — `follow` set — the stream of an earlier handoff
/// again. `agent` and `prompt` are as given (checked here).
#[derive(Debug, Clone, Default)]
pub struct HandoffAsk {
    pub task: Option<TaskId>,
    pub agent: String,
    pub prompt: String,
    /// 0: the default handoff timeout.
    pub timeout_secs: u32,
    pub follow: Option<RunId>,
}

/// What the caller of a handoff hears, in order: the child started, its
/// progress, and exactly one end (completed or failed).
#[derive(Debug, Clone, PartialEq)]
pub enum HandoffUpdate {
    Started {
        run: RunId,
        agent: String,
        handoff_index: u32,
        parent: String,
        sequence: u64,
    },
    /// Something the child did: the event's kind (`tool_executed`, `text`,
    /// ...) and data.
    Progress {
        kind: String,
        data: Option<serde_json::Map<String, Value>>,
        sequence: u64,
    },
    Completed {
        run: RunId,
        agent: String,
        output: String,
        report: Option<serde_json::Map<String, Value>>,
        usage: Usage,
    },
    /// No run when the handoff never started (`run` None).
    Failed {
        run: Option<RunId>,
        agent: String,
        failure: HandoffFailure,
        reason: String,
        usage: Option<Usage>,
    },
}

/// The stream a handoff returns.
pub type HandoffStream = Pin<Box<dyn Stream<Item = Result<HandoffUpdate, ServiceError>> + Send>>;

/// Messages buffered before the producer waits for the caller.
const STREAM_BUFFER: usize = 64;

/// Starts a handoff (or re-opens one) and returns its stream.
/// `parent` is the run handing off (its token was the call's credential).
pub async fn handoff(
    state: &AppState,
    req: HandoffAsk,
    parent: Option<Run>,
) -> Result<HandoffStream, ServiceError> {
    if let Some(run_id) = req.follow {
        return reopen(state, req, run_id, parent.as_ref()).await;
    }
    let task_id = task_of(parent.as_ref(), req.task)?;
    let agent_name = Name::parse("agent", req.agent.trim())?;
    let prompt = req.prompt.trim().to_owned();
    check_prompt(&prompt)?;
    if prompt.is_empty() {
        return Err(ServiceError::Invalid(
            "prompt: say what the agent should do".to_owned(),
        ));
    }
    let task = state.store.get_task(task_id).await?;
    if parent.is_none() {
        task.status.check_transition(TaskStatus::Active)?;
    }
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let timeout = timeout_or(req.timeout_secs, state.runner.config().handoff_timeout);
    let longest = state.runner.config().max_handoff_timeout();
    if timeout > longest {
        return Err(ServiceError::Invalid(format!(
            "timeout_secs: a handoff may take at most {} s",
            longest.as_secs()
        )));
    }

    // What is wrong with the target ends the handoff, not the call.
    let launch = target(state, workspace, &task, &agent_name, timeout).await?;
    let launch = match launch {
        Ok(launch) => launch,
        Err((failure, reason)) => {
            if let Some(parent) = &parent {
                record_refused_call(state, parent, &agent_name, &prompt, failure, &reason).await;
            }
            info!(task_id = %task_id, agent = %agent_name, failure = failure.as_str(), "handoff refused");
            return Ok(refused(&agent_name, failure, reason));
        }
    };

    let message = match &parent {
        Some(parent) => launch.handoff_message(
            child_message(&task, parent, &prompt, &launch.tools),
            &prompt,
        ),
        None => task_message(&task, &prompt),
    };
    let new = launch.new_run(task_id, Some((parent.as_ref().map(|p| p.id), prompt)));
    // The parent's clock stops when its driver, wherever it runs, reads
    // `agent_handoff_started`, and starts again at `agent_handoff_completed`.
    let (run, task, events) = state
        .store
        .open_run(new, |task, run, parent| begin_handoff(task, run, parent))
        .await?;
    let started = events
        .iter()
        .find(|e| e.kind == EventKind::AgentHandoffStarted)
        .map_or(0, |e| e.sequence);
    launch.start(state, &run, &task, message, before(&events));
    Ok(follow(state, task_id, run.id, started.saturating_sub(1)))
}

/// The task a handoff works on: the parent's (a child hands off within it),
/// or the one named (a caller with a key).
fn task_of(parent: Option<&Run>, named: Option<TaskId>) -> Result<TaskId, ServiceError> {
    match (parent, named) {
        (Some(parent), None) => Ok(parent.task_id),
        (Some(parent), Some(id)) => {
            if id != parent.task_id {
                return Err(ServiceError::Invalid(format!(
                    "task_id: run {} works on task {}, not {id}; an agent hands off within its own task",
                    parent.id, parent.task_id
                )));
            }
            Ok(id)
        }
        (None, Some(id)) => Ok(id),
        (None, None) => Err(ServiceError::Invalid(
            "task_id: name the task to hand off on".to_owned(),
        )),
    }
}

/// The launch of the handoff's agent, or why the handoff fails without a
/// run (an unknown or internal agent, one that cannot be started); a store
/// that fails fails the call.
async fn target(
    state: &AppState,
    workspace: crate::domain::Workspace,
    task: &Task,
    agent_name: &Name,
    timeout: std::time::Duration,
) -> Result<Result<Launch, (HandoffFailure, String)>, ServiceError> {
    // A helper works where its parent does: the task's worktree.
    let root = crate::core::branches::root_of(task, &workspace);
    Ok(
        match state
            .store
            .get_agent(workspace.id, agent_name.clone())
            .await
        {
            Ok(agent) if agent.kind == AgentKind::Internal => Err((
                HandoffFailure::TargetUnknown,
                format!(
                    "agent '{agent_name}' is internal to Chorus; hand off to a user-defined agent"
                ),
            )),
            Ok(agent) => Launch::prepare_agent(state, workspace, agent, timeout)
                .await
                .map(|launch| launch.in_root(root))
                .map_err(|e| {
                    (
                        HandoffFailure::Internal,
                        format!("agent '{agent_name}' cannot be started: {e}"),
                    )
                }),
            Err(StoreError::NotFound { .. }) => Err((
                HandoffFailure::TargetUnknown,
                format!(
                    "no agent '{agent_name}' in this workspace; agents: {}",
                    agent_names(state, task.workspace_id).await
                ),
            )),
            Err(e) => return Err(e.into()),
        },
    )
}

/// Re-opens the stream of an earlier handoff: its messages from the start.
async fn reopen(
    state: &AppState,
    req: HandoffAsk,
    run_id: RunId,
    caller: Option<&Run>,
) -> Result<HandoffStream, ServiceError> {
    if !req.agent.is_empty() || !req.prompt.is_empty() {
        return Err(ServiceError::Invalid(
            "run_id re-opens a handoff: leave agent and prompt empty".to_owned(),
        ));
    }
    let run = state.store.get_run(run_id).await?;
    if let Some(caller) = caller
        && caller.task_id != run.task_id
    {
        return Err(ServiceError::Invalid(format!(
            "run_id: run {} belongs to another task; an agent follows handoffs of its own task only",
            run.id
        )));
    }
    if let Some(task) = req.task
        && task != run.task_id
    {
        return Err(ServiceError::Invalid(format!(
            "run_id: run {} belongs to task {}, not {task}",
            run.id, run.task_id
        )));
    }
    if run.handoff_index.is_none() {
        return Err(ServiceError::Invalid(format!(
            "run_id: run {} was not started by a handoff; follow it with WatchTask",
            run.id
        )));
    }
    Ok(follow(state, run.task_id, run.id, 0))
}

/// The stream of `run`'s handoff, read from the task's history after `after`.
fn follow(state: &AppState, task: TaskId, run: RunId, after: u64) -> HandoffStream {
    let (events_tx, mut events_rx) = mpsc::channel(STREAM_BUFFER);
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let cancel = state.shutdown.child_token();
    let (store, hub) = (state.store.clone(), state.hub.clone());
    tokio::spawn(async move {
        history::watch_task(
            &store,
            &hub,
            task,
            after,
            history::Until::NEVER,
            events_tx,
            cancel,
        )
        .await
    });
    let store = state.store.clone();
    tokio::spawn(async move {
        while let Some(event) = events_rx.recv().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    let _ = tx.send(Err(ServiceError::from(e))).await;
                    return;
                }
            };
            let Some(message) = translate(&event, run) else {
                continue;
            };
            let terminal = matches!(message, Translated::End);
            let message = match message {
                Translated::Message(m) => Ok(m),
                Translated::End => terminal_message(&store, &event, run).await,
            };
            if tx.send(message).await.is_err() || terminal {
                return;
            }
        }
        // The history stream ended before the handoff did: shutdown.
        let _ = tx
            .send(Err(ServiceError::Unavailable(format!(
                "the orchestrator is shutting down; re-open this handoff with run_id {run} to see how it ends"
            ))))
            .await;
    });
    Box::pin(ReceiverStream::new(rx))
}

/// What an event of the task's history means for the stream of `run`.
enum Translated {
    Message(HandoffUpdate),
    /// `run`'s handoff ended: the terminal message follows.
    End,
}

fn translate(event: &Event, run: RunId) -> Option<Translated> {
    let field = |name: &str| event.data.get(name).and_then(Value::as_str);
    let own = field("run_id") == Some(run.to_string().as_str());
    let nested = field("parent_run_id") == Some(run.to_string().as_str());
    let progress = |kind: &str| {
        Translated::Message(HandoffUpdate::Progress {
            kind: kind.to_owned(),
            data: match &event.data {
                Value::Object(map) => Some(map.clone()),
                _ => None,
            },
            sequence: event.sequence,
        })
    };
    match event.kind {
        EventKind::AgentHandoffStarted if own => {
            Some(Translated::Message(HandoffUpdate::Started {
                run,
                agent: field("agent").unwrap_or_default().to_owned(),
                handoff_index: event
                    .data
                    .get("handoff_index")
                    .and_then(Value::as_u64)
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or_default(),
                parent: field("parent_run_id").unwrap_or_default().to_owned(),
                sequence: event.sequence,
            }))
        }
        EventKind::AgentHandoffCompleted if own => Some(Translated::End),
        EventKind::AgentHandoffStarted if nested => Some(progress("handoff_started")),
        EventKind::AgentHandoffCompleted if nested => Some(progress("handoff_completed")),
        EventKind::AgentProgress if own => Some(progress(field("kind").unwrap_or("text"))),
        EventKind::AgentStarted
        | EventKind::ToolExecuted
        | EventKind::ToolDenied
        | EventKind::CompletionReportSubmitted
        | EventKind::CommentAdded
            if own =>
        {
            Some(progress(event.kind.as_str()))
        }
        _ => None,
    }
}

/// The terminal message of a handoff from its `agent_handoff_completed` event;
/// a completed one carries the run's whole output and report.
async fn terminal_message(
    store: &crate::store::Store,
    event: &Event,
    run: RunId,
) -> Result<HandoffUpdate, ServiceError> {
    let field = |name: &str| {
        event
            .data
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let child = store.get_run(run).await?;
    if field("outcome") == "completed" {
        return Ok(HandoffUpdate::Completed {
            run,
            agent: child.agent.to_string(),
            output: child.output.clone().unwrap_or_default(),
            report: child
                .completion_report
                .as_ref()
                .and_then(|r| match serde_json::to_value(r) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                }),
            usage: child.usage,
        });
    }
    Ok(HandoffUpdate::Failed {
        run: Some(run),
        agent: child.agent.to_string(),
        failure: HandoffFailure::parse(&field("failure")).unwrap_or(HandoffFailure::Internal),
        reason: field("reason"),
        usage: Some(child.usage),
    })
}

/// A stream holding only the failure of a handoff that never started.
fn refused(agent: &Name, failure: HandoffFailure, reason: String) -> HandoffStream {
    let failed = HandoffUpdate::Failed {
        run: None,
        agent: agent.to_string(),
        failure,
        reason,
        usage: None,
    };
    Box::pin(tokio_stream::iter([Ok(failed)]))
}

/// Records an agent's handoff call that ended before a run started.
async fn record_refused_call(
    state: &AppState,
    parent: &Run,
    agent: &Name,
    prompt: &str,
    failure: HandoffFailure,
    reason: &str,
) {
    let input = json!({ "agent": agent.as_str(), "prompt": prompt });
    let call = ToolCallRecord::new("handoff", &input, failure.code_name(), 0, reason);
    match state
        .store
        .append_events(parent.task_id, vec![policy::tool_executed(parent, call)])
        .await
    {
        Ok(_) => {}
        Err(e) => warn!(run_id = %parent.id, error = %e, "cannot record a refused handoff"),
    }
}

/// The names of a workspace's user-defined agents, for messages.
async fn agent_names(state: &AppState, workspace: crate::domain::WorkspaceId) -> String {
    match state.store.list_agents(workspace).await {
        Ok(agents) => agents
            .iter()
            .filter(|a| a.kind == AgentKind::UserDefined)
            .map(|a| a.name.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        Err(_) => "(cannot list them)".to_owned(),
    }
}

/// The first message of a child run: who handed off and what to do. The task
/// itself is a task.get away.
/// The first message of a handoff's run; it mentions task.get only to an
/// agent that may call it.
fn child_message(task: &Task, parent: &Run, prompt: &str, tools: &[String]) -> String {
    let whole = if tools.iter().any(|t| t == "task.get") {
        " (task.get shows the whole task)"
    } else {
        ""
    };
    format!(
        "Agent '{}' hands you part of task {}{whole}. Do this, then submit your completion report; its output goes back to '{}':\n\n{prompt}\n",
        parent.agent, task.id, parent.agent
    )
}
