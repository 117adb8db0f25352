//! `chorus.orchestrator.v1.Orchestrator`: the management API, as a thin adapter.
//!
//! Each handler converts and validates the request (ids, names, statuses, kinds:
//! every bad field is INVALID_ARGUMENT naming it), calls the store, publishes the
//! events the store returned, and converts the answer. Errors go through
//! [`ServiceError`]'s one code table. The handlers live in one file per concept;
//! this file only wires them to the generated trait.

mod agents;
pub(crate) mod approvals;
pub(crate) mod branches;
mod keys;
mod providers;
mod runs;
mod tasks;
mod workspaces;

#[cfg(test)]
mod tests;

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::orchestrator_server::Orchestrator;
use tonic::{Request, Response, Status};

use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

pub use tasks::{TaskChangeStream, TaskEventStream};

/// The orchestrator's management service over the shared state.
#[derive(Debug, Clone)]
pub struct OrchestratorService {
    state: AppState,
    /// The limits of the port it is served on, for GetStatus.
    limits: Vec<chorus_proto::serving::v1::Limit>,
}

impl OrchestratorService {
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            limits: Vec::new(),
        }
    }

    /// Served on a port with `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: Vec<chorus_proto::serving::v1::Limit>) -> Self {
        self.limits = limits;
        self
    }
}

/// A handler's answer as a gRPC response.
fn reply<T>(result: Result<T, ServiceError>) -> Result<Response<T>, Status> {
    result.map(Response::new).map_err(Status::from)
}

#[tonic::async_trait]
impl Orchestrator for OrchestratorService {
    async fn create_workspace(
        &self,
        request: Request<pb::CreateWorkspaceRequest>,
    ) -> Result<Response<pb::Workspace>, Status> {
        reply(workspaces::create(&self.state, request.into_inner()).await)
    }

    async fn get_workspace(
        &self,
        request: Request<pb::GetWorkspaceRequest>,
    ) -> Result<Response<pb::Workspace>, Status> {
        reply(workspaces::get(&self.state, request.into_inner()).await)
    }

    async fn list_workspaces(
        &self,
        _request: Request<pb::ListWorkspacesRequest>,
    ) -> Result<Response<pb::ListWorkspacesResponse>, Status> {
        reply(workspaces::list(&self.state).await)
    }

    async fn update_workspace(
        &self,
        request: Request<pb::UpdateWorkspaceRequest>,
    ) -> Result<Response<pb::Workspace>, Status> {
        reply(workspaces::update(&self.state, request.into_inner()).await)
    }

    async fn delete_workspace(
        &self,
        request: Request<pb::DeleteWorkspaceRequest>,
    ) -> Result<Response<pb::DeleteWorkspaceResponse>, Status> {
        reply(workspaces::delete(&self.state, request.into_inner()).await)
    }

    async fn create_provider(
        &self,
        request: Request<pb::CreateProviderRequest>,
    ) -> Result<Response<pb::Provider>, Status> {
        reply(providers::create(&self.state, request.into_inner()).await)
    }

    async fn get_provider(
        &self,
        request: Request<pb::GetProviderRequest>,
    ) -> Result<Response<pb::Provider>, Status> {
        reply(providers::get(&self.state, request.into_inner()).await)
    }

    async fn list_providers(
        &self,
        request: Request<pb::ListProvidersRequest>,
    ) -> Result<Response<pb::ListProvidersResponse>, Status> {
        reply(providers::list(&self.state, request.into_inner()).await)
    }

    async fn update_provider(
        &self,
        request: Request<pb::UpdateProviderRequest>,
    ) -> Result<Response<pb::Provider>, Status> {
        reply(providers::update(&self.state, request.into_inner()).await)
    }

    async fn delete_provider(
        &self,
        request: Request<pb::DeleteProviderRequest>,
    ) -> Result<Response<pb::DeleteProviderResponse>, Status> {
        reply(providers::delete(&self.state, request.into_inner()).await)
    }

    async fn create_agent(
        &self,
        request: Request<pb::CreateAgentRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        reply(agents::create(&self.state, request.into_inner()).await)
    }

    async fn get_agent(
        &self,
        request: Request<pb::GetAgentRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        reply(agents::get(&self.state, request.into_inner()).await)
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        reply(agents::list(&self.state, request.into_inner()).await)
    }

    async fn update_agent(
        &self,
        request: Request<pb::UpdateAgentRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        reply(agents::update(&self.state, request.into_inner()).await)
    }

    async fn delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        reply(agents::delete(&self.state, request.into_inner()).await)
    }

    async fn create_task(
        &self,
        request: Request<pb::CreateTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        reply(tasks::create(&self.state, request.into_inner()).await)
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        reply(tasks::get(&self.state, request.into_inner()).await)
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        reply(tasks::list(&self.state, request.into_inner()).await)
    }

    async fn update_task_status(
        &self,
        request: Request<pb::UpdateTaskStatusRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        reply(tasks::update_status(&self.state, request.into_inner()).await)
    }

    async fn update_planning(
        &self,
        request: Request<pb::UpdatePlanningRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        reply(tasks::update_planning(&self.state, request.into_inner()).await)
    }

    async fn plan_task(
        &self,
        request: Request<pb::PlanTaskRequest>,
    ) -> Result<Response<pb::PlanTaskResponse>, Status> {
        reply(tasks::plan(&self.state, request.into_inner()).await)
    }

    async fn submit_answers(
        &self,
        request: Request<pb::SubmitAnswersRequest>,
    ) -> Result<Response<pb::PlanTaskResponse>, Status> {
        reply(tasks::answer(&self.state, request.into_inner()).await)
    }

    async fn start_task(
        &self,
        request: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::StartTaskResponse>, Status> {
        reply(tasks::start(&self.state, request.into_inner()).await)
    }

    async fn update_task_budget(
        &self,
        request: Request<pb::UpdateTaskBudgetRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        reply(tasks::set_budget(&self.state, request.into_inner()).await)
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        reply(tasks::cancel(&self.state, request.into_inner()).await)
    }

    async fn delete_task(
        &self,
        request: Request<pb::DeleteTaskRequest>,
    ) -> Result<Response<pb::DeleteTaskResponse>, Status> {
        reply(tasks::delete(&self.state, request.into_inner()).await)
    }

    async fn get_task_change(
        &self,
        request: Request<pb::GetTaskChangeRequest>,
    ) -> Result<Response<pb::GetTaskChangeResponse>, Status> {
        reply(branches::change(&self.state, request.into_inner()).await)
    }

    async fn land_task(
        &self,
        request: Request<pb::LandTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let principal = request
            .extensions()
            .get::<chorus_auth::Principal>()
            .cloned();
        reply(branches::land(&self.state, request.into_inner(), principal.as_ref()).await)
    }

    async fn answer_approval(
        &self,
        request: Request<pb::AnswerApprovalRequest>,
    ) -> Result<Response<pb::Approval>, Status> {
        let by = branches::caller(
            request
                .extensions()
                .get::<chorus_auth::Principal>()
                .cloned()
                .as_ref(),
        );
        reply(approvals::answer(&self.state, request.into_inner(), by).await)
    }

    async fn discard_task(
        &self,
        request: Request<pb::DiscardTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let principal = request
            .extensions()
            .get::<chorus_auth::Principal>()
            .cloned();
        reply(branches::discard(&self.state, request.into_inner(), principal.as_ref()).await)
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::GetHistoryResponse>, Status> {
        reply(tasks::history(&self.state, request.into_inner()).await)
    }

    type WatchTaskStream = TaskEventStream;

    async fn watch_task(
        &self,
        request: Request<pb::WatchTaskRequest>,
    ) -> Result<Response<Self::WatchTaskStream>, Status> {
        reply(tasks::watch(&self.state, request.into_inner()).await)
    }

    type WatchTasksStream = TaskChangeStream;

    async fn watch_tasks(
        &self,
        request: Request<pb::WatchTasksRequest>,
    ) -> Result<Response<Self::WatchTasksStream>, Status> {
        reply(tasks::watch_many(&self.state, request.into_inner()).await)
    }

    type HandoffStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::HandoffEvent, Status>> + Send>,
    >;

    async fn handoff(
        &self,
        request: Request<pb::HandoffRequest>,
    ) -> Result<Response<Self::HandoffStream>, Status> {
        // Re-opening a handoff's stream is following, not handing off: the
        // caller may be the run that waits for it.
        let parent = if request.get_ref().run_id.is_empty() {
            crate::grpc::agent_tools::parent_of(&self.state, &request).await
        } else {
            crate::grpc::agent_tools::follower_of(&self.state, &request).await
        };
        let started = async {
            let parent = parent?;
            let ask = handoff_ask(request.into_inner())?;
            crate::runner::handoff::handoff(&self.state, ask, parent).await
        }
        .await;
        match started {
            Ok(stream) => {
                let stream = tokio_stream::StreamExt::map(stream, |update| {
                    update.map(convert::handoff_event).map_err(Status::from)
                });
                Ok(Response::new(Box::pin(stream)))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn open_run(
        &self,
        request: Request<pb::OpenRunRequest>,
    ) -> Result<Response<pb::OpenRunResponse>, Status> {
        reply(runs::open(&self.state, request.into_inner()).await)
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        reply(runs::get(&self.state, request.into_inner()).await)
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        reply(runs::list(&self.state, request.into_inner()).await)
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        reply(runs::usage(&self.state, request.into_inner()).await)
    }

    async fn finish_run(
        &self,
        request: Request<pb::FinishRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        reply(runs::finish(&self.state, request.into_inner()).await)
    }

    async fn get_status(
        &self,
        request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let now = crate::domain::now_ms();
        let caller = match request.extensions().get::<chorus_auth::Principal>() {
            Some(chorus_auth::Principal::Key { id, name, role }) => Some(pb::ApiKey {
                id: id.clone(),
                name: name.clone(),
                role: convert::role(*role).into(),
                ..Default::default()
            }),
            _ => None,
        };
        let replicas = match self.state.store.list_replicas().await {
            Ok(replicas) => replicas,
            Err(e) => return Err(crate::error::ServiceError::from(e).into()),
        };
        Ok(Response::new(pb::GetStatusResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            sandbox: Some(chorus_tool_exec::grpc::sandbox_status(
                self.state.runner.processes().status(),
            )),
            embedded_tool_exec: self.state.addresses.embedded_tool_exec,
            replica: self.state.store.replica().id.clone(),
            replicas: replicas
                .into_iter()
                .map(|r| pb::Replica {
                    live: r.is_live(now),
                    id: r.id,
                    started_ms: r.started_ms,
                    heartbeat_ms: r.heartbeat_ms,
                    lease_expires_ms: r.lease_expires_ms,
                    stopped_ms: r.stopped_ms.unwrap_or_default(),
                })
                .collect(),
            live_runs: u32::try_from(self.state.runner.live_runs()).unwrap_or(u32::MAX),
            queued_runs: u32::try_from(self.state.runner.queued_runs()).unwrap_or(u32::MAX),
            limits: self.limits.clone(),
            caller,
        }))
    }

    async fn create_api_key(
        &self,
        request: Request<pb::CreateApiKeyRequest>,
    ) -> Result<Response<pb::CreateApiKeyResponse>, Status> {
        reply(keys::create(&self.state, request.into_inner()).await)
    }

    async fn list_api_keys(
        &self,
        request: Request<pb::ListApiKeysRequest>,
    ) -> Result<Response<pb::ListApiKeysResponse>, Status> {
        reply(keys::list(&self.state, request.into_inner()).await)
    }

    async fn revoke_api_key(
        &self,
        request: Request<pb::RevokeApiKeyRequest>,
    ) -> Result<Response<pb::ApiKey>, Status> {
        reply(keys::revoke(&self.state, request.into_inner()).await)
    }

    async fn rotate_run_token_key(
        &self,
        _request: Request<pb::RotateRunTokenKeyRequest>,
    ) -> Result<Response<pb::RunTokenKeys>, Status> {
        reply(keys::rotate(&self.state).await)
    }
}

/// A Handoff request in domain terms (agent and prompt as given: the
/// handoff checks them).
fn handoff_ask(
    req: pb::HandoffRequest,
) -> Result<crate::runner::handoff::HandoffAsk, crate::error::ServiceError> {
    Ok(crate::runner::handoff::HandoffAsk {
        task: convert::non_empty(req.task_id)
            .map(|id| crate::domain::TaskId::parse(&id))
            .transpose()?,
        agent: req.agent,
        prompt: req.prompt,
        timeout_secs: req.timeout_secs,
        follow: convert::non_empty(req.run_id)
            .map(|id| convert::run_id("run_id", &id))
            .transpose()?,
    })
}
