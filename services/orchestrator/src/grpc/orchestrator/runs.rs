//! Runs: open one (with its token) for an agent of the task's workspace, read one,
//! finish one.

use chorus_proto::orchestrator::v1 as pb;

use crate::core::runs as core;
use crate::domain::{Name, UsageDimension, date_of_day, day_of_date, subtree_usage};
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

/// GetRun: the run, with its subtree's usage.
pub(super) async fn get(state: &AppState, req: pb::GetRunRequest) -> Result<pb::Run, ServiceError> {
    let id = convert::run_id("id", &req.id)?;
    let run = state.store.get_run(id).await?;
    let runs = state.store.list_runs(run.task_id).await?;
    let subtree = subtree_usage(&runs).remove(&id).unwrap_or(run.usage);
    Ok(convert::run_in_tree(&run, subtree))
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
    let subtrees = subtree_usage(&runs);
    Ok(pb::ListRunsResponse {
        runs: runs
            .iter()
            .map(|r| convert::run_in_tree(r, subtrees.get(&r.id).copied().unwrap_or(r.usage)))
            .collect(),
    })
}

/// GetUsage.
pub(super) async fn usage(
    state: &AppState,
    req: pb::GetUsageRequest,
) -> Result<pb::GetUsageResponse, ServiceError> {
    let day = |field: &'static str, text: &str| {
        convert::non_empty(text.to_owned())
            .map(|t| day_of_date(field, &t))
            .transpose()
    };
    let query = crate::core::usage::UsageQuery {
        workspace: convert::non_empty(req.workspace_id)
            .map(|w| convert::workspace_id("workspace_id", &w))
            .transpose()?,
        from: day("from", &req.from)?,
        to: day("to", &req.to)?,
        by: req
            .group_by
            .iter()
            .map(|d| UsageDimension::parse(d))
            .collect::<Result<_, _>>()?,
    };
    let report = crate::core::usage::usage(state, query).await?;
    Ok(pb::GetUsageResponse {
        groups: report
            .groups
            .into_iter()
            .map(|(key, usage)| pb::UsageGroup {
                workspace_id: key.workspace_id.map(|w| w.to_string()).unwrap_or_default(),
                agent: key.agent.unwrap_or_default(),
                provider: key.provider.unwrap_or_default(),
                model: key.model.unwrap_or_default(),
                day: key.day.map(date_of_day).unwrap_or_default(),
                usage: Some(convert::usage(usage)),
            })
            .collect(),
        total: Some(convert::usage(report.total)),
        from: date_of_day(report.from),
        to: date_of_day(report.to),
    })
}
