//! Runs a caller drives itself: opened with a token for an agent of the
//! task's workspace (OpenRun), finished by it (FinishRun).

use std::time::Duration;

use crate::domain::{
    Agent, AgentKind, Name, Run, RunId, TaskId, TaskStatus, WorkspaceId, now_ms, policy,
};
use crate::error::ServiceError;
use crate::state::{Addresses, AppState};

/// Token lifetime when the request says 0.
const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// A run opened for its caller: the run, its signed token, and where its
/// tools are.
#[derive(Debug, Clone)]
pub struct Opened {
    pub run: Run,
    pub token: String,
    pub addresses: Addresses,
}

/// Opens a run of `agent` on a task: the agent must be one of the task's
/// workspace (internal agents too). In one transaction the run opens with the
/// agent's granted tools and goes active with its agent as the task's current
/// agent; its token is minted for the workspace root.
pub async fn open(
    state: &AppState,
    task_id: TaskId,
    agent_name: Name,
    ttl_secs: u32,
) -> Result<Opened, ServiceError> {
    let ttl = match ttl_secs {
        0 => DEFAULT_TOKEN_TTL,
        n => Duration::from_secs(u64::from(n)),
    };
    if ttl > chorus_run_token::MAX_TOKEN_TTL {
        return Err(ServiceError::Invalid(format!(
            "ttl_secs: at most {} s (48 h)",
            chorus_run_token::MAX_TOKEN_TTL.as_secs()
        )));
    }
    let task = state.store.get_task(task_id).await?;
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let agent = user_defined_agent(state, workspace.id, &agent_name, "open a run of").await?;
    let tools = agent.granted_tools()?;
    super::branches::check_startable(&task)?;
    let root = super::branches::open(state, task, &workspace).await?.root;

    let rules = crate::domain::approval::RunRules::own(
        agent_name.as_str(),
        agent.approval_rules.clone(),
        workspace.approval_rules.clone(),
    );
    let new = crate::store::NewRun {
        task_id,
        agent: agent_name,
        parent: None,
        tools,
        rules,
        handoff_prompt: None,
        token: Some(crate::auth::runs::binding(&root, &agent.egress, ttl)),
        // Its caller drives it: no replica does.
        drive: None,
    };
    let (run, _task, _) = state
        .store
        .open_run(new, |task, run, _parent| {
            // A run works on an active task: a planned or waiting one becomes
            // active, as with StartTask; others are refused.
            let mut events = Vec::new();
            if task.status != TaskStatus::Active {
                events.push(policy::change_status(task, TaskStatus::Active, None)?);
            }
            events.push(policy::activate_run(run, task)?);
            Ok(events)
        })
        .await?;

    Ok(Opened {
        token: crate::auth::runs::mint(state, &run)?,
        run,
        addresses: state.addresses.clone(),
    })
}

/// Finishes a run (FAILED_PRECONDITION when it already has) and records
/// `agent_completed`; the task's current agent is cleared when it was this one.
/// A root run finished without a completion report, with no other run of its
/// task going, leaves its task `waiting` with the reason (not `active` with
/// no one on it), as a run Chorus drives does. A run Chorus drives is
/// stopped as CancelTask stops it. Returns once no process of the run, nor
/// of its tool calls, may still run.
pub async fn finish(
    state: &AppState,
    id: RunId,
    reason: Option<String>,
) -> Result<Run, ServiceError> {
    let reason = reason.unwrap_or_else(|| "finished".to_owned());
    let now = now_ms();
    let (run, _task, _) = state
        .store
        .change_run_family(id, move |run, task, others| {
            let why = format!(
                "run {} was finished by its caller ({reason}) without a completion report; start the task again or cancel it",
                run.id
            );
            let mut events = policy::finish_run(run, task, reason, now)?;
            if others.is_empty() {
                events.extend(policy::settle_task_without_report(
                    run,
                    task,
                    TaskStatus::Waiting,
                    &why,
                )?);
            }
            Ok(events)
        })
        .await?;
    // A run Chorus drives (a CLI or an API agent) stops as at CancelTask:
    // its driver hears of the end and stops its processes.
    crate::runner::wait_released(state, run.task_id, Some(run.id)).await?;
    crate::runner::wait_calls_stopped(state, run.task_id, vec![run.id], now).await?;
    Ok(run)
}

/// The user-defined agent `name` of `workspace`; an internal one (the
/// planner) is refused, saying to `what` a user-defined agent instead.
pub(crate) async fn user_defined_agent(
    state: &AppState,
    workspace: WorkspaceId,
    name: &Name,
    what: &str,
) -> Result<Agent, ServiceError> {
    let agent = state.store.get_agent(workspace, name.clone()).await?;
    if agent.kind == AgentKind::Internal {
        return Err(ServiceError::Invalid(format!(
            "agent: '{name}' is internal to Chorus (the planner; PlanTask runs it); {what} a user-defined agent"
        )));
    }
    Ok(agent)
}
