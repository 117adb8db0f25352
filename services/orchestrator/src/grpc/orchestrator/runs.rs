//! Runs: open one (with its token) for an agent of the task's workspace, read one,
//! finish one.

use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;

use crate::domain::{AgentKind, Name, TaskStatus, now_ms, policy};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

/// Token lifetime when the request says 0.
const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// Opens a run of `agent` on a task: the agent must be one of the task's
/// workspace (internal agents too). In one transaction the run opens with the
/// agent's granted tools and goes active with its agent as the task's current
/// agent; its token is minted for the workspace root.
pub(super) async fn open(
    state: &AppState,
    req: pb::OpenRunRequest,
) -> Result<pb::OpenRunResponse, ServiceError> {
    let task_id = convert::task_id("task_id", &req.task_id)?;
    let agent_name = Name::parse("agent", &req.agent)?;
    let ttl = match req.ttl_secs {
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
    let agent = state
        .store
        .get_agent(workspace.id, agent_name.clone())
        .await?;
    if agent.kind == AgentKind::Internal {
        return Err(ServiceError::Invalid(format!(
            "agent: '{agent_name}' is internal to Chorus (the planner; PlanTask runs it); open a run of a user-defined agent"
        )));
    }
    let tools = agent.granted_tools()?;

    let new = crate::store::NewRun {
        task_id,
        agent: agent_name,
        parent: None,
        tools,
        handoff_prompt: None,
        token: Some(crate::auth::runs::binding(
            &workspace.root,
            &agent.egress,
            ttl,
        )),
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

    Ok(pb::OpenRunResponse {
        token: crate::auth::runs::mint(state, &run)?,
        run: Some(convert::run(&run)),
        tools_addr: state.addresses.tool_exec.clone(),
        orchestrator_addr: state.addresses.orchestrator.clone(),
        mcp_url: state.addresses.mcp_url.clone(),
    })
}

pub(super) async fn get(state: &AppState, req: pb::GetRunRequest) -> Result<pb::Run, ServiceError> {
    let id = convert::run_id("id", &req.id)?;
    Ok(convert::run(&state.store.get_run(id).await?))
}

/// Finishes a run (FAILED_PRECONDITION when it already has) and records
/// `agent_completed`; the task's current agent is cleared when it was this one.
/// Returns once no tool call of the run may still have processes.
pub(super) async fn finish(
    state: &AppState,
    req: pb::FinishRunRequest,
) -> Result<pb::Run, ServiceError> {
    let id = convert::run_id("id", &req.id)?;
    let reason = convert::non_empty(req.reason).unwrap_or_else(|| "finished".to_owned());
    let now = now_ms();
    let (run, _task, _) = state
        .store
        .change_run(id, move |run, task| {
            Ok(vec![policy::finish_run(run, task, reason, now)?])
        })
        .await?;
    crate::runner::wait_calls_stopped(state, run.task_id, vec![run.id], now).await?;
    Ok(convert::run(&run))
}

/// A task's runs in the order they started (the handoff tree by parent links).
pub(super) async fn list(
    state: &AppState,
    req: pb::ListRunsRequest,
) -> Result<pb::ListRunsResponse, ServiceError> {
    let task_id = convert::task_id("task_id", &req.task_id)?;
    state.store.get_task(task_id).await?;
    let runs = state.store.list_runs(task_id).await?;
    Ok(pb::ListRunsResponse {
        runs: runs.iter().map(convert::run).collect(),
    })
}
