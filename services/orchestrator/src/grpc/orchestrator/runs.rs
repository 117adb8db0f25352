//! Runs: open one (with its token) for an agent of the task's workspace, read one,
//! finish one.

use chorus_proto::orchestrator::v1 as pb;

use crate::core::runs as core;
use crate::domain::Name;
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

/// OpenRun.
pub(super) async fn open(
    state: &AppState,
    req: pb::OpenRunRequest,
) -> Result<pb::OpenRunResponse, ServiceError> {
    let task_id = convert::task_id("task_id", &req.task_id)?;
    let agent = Name::parse("agent", &req.agent)?;
    let opened = core::open(state, task_id, agent, req.ttl_secs).await?;
    Ok(pb::OpenRunResponse {
        token: opened.token,
        run: Some(convert::run(&opened.run)),
        tools_addr: opened.addresses.tool_exec,
        orchestrator_addr: opened.addresses.orchestrator,
        mcp_url: opened.addresses.mcp_url,
    })
}

pub(super) async fn get(state: &AppState, req: pb::GetRunRequest) -> Result<pb::Run, ServiceError> {
    let id = convert::run_id("id", &req.id)?;
    Ok(convert::run(&state.store.get_run(id).await?))
}

/// FinishRun.
pub(super) async fn finish(
    state: &AppState,
    req: pb::FinishRunRequest,
) -> Result<pb::Run, ServiceError> {
    let id = convert::run_id("id", &req.id)?;
    let run = core::finish(state, id, convert::non_empty(req.reason)).await?;
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
