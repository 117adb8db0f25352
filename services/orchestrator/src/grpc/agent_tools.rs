//! `chorus.orchestrator.v1.AgentTools`: what agent runs use, authenticated by
//! their run token. CallTool executes the orchestration tools; AuthorizeToolCall
//! and RecordToolCall are tool-exec's questions and reports for workspace tools.
//!
//! A call from an unknown, still-starting, waiting or ended run is refused with
//! FAILED_PRECONDITION and leaves no trace in history (only a warning log). A
//! tool outside the run's allow-list is refused with PERMISSION_DENIED and
//! recorded as `tool_denied`.

use std::time::Instant;

use chorus_catalog::{Executor, args, outputs};
use chorus_proto::json;
use chorus_proto::orchestrator::v1 as pb;
use chorus_run_token::TokenError;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::domain::policy;
use crate::domain::{AgentKind, DomainError, EventKind, Run, RunId, Task, TaskId, TaskStatus};
use crate::error::ServiceError;
use crate::state::AppState;

/// Most bytes of a tool's output kept in its `tool_executed` event.
const EXCERPT_BYTES: usize = 2048;

#[derive(Debug, Clone)]
pub struct AgentToolsService {
    state: AppState,
}

impl AgentToolsService {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    /// The run named by the request's token. Unknown runs are "not active".
    async fn run_of(&self, metadata: &MetadataMap) -> Result<Run, ServiceError> {
        let header = metadata.get("authorization").ok_or(TokenError::Missing)?;
        let token = header
            .to_str()
            .ok()
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .ok_or_else(|| {
                TokenError::Malformed(
                    "the authorization header must be 'Bearer <token>'".to_owned(),
                )
            })?;
        run_of_token(&self.state, token).await
    }

    async fn authorize(&self, run: &Run, tool: &str) -> Result<(), ServiceError> {
        authorize(&self.state, run, tool).await
    }

    async fn record(
        &self,
        run: &Run,
        tool: &str,
        input: Value,
        status: &str,
        duration_ms: u64,
        excerpt: &str,
    ) -> Result<(), ServiceError> {
        let data = json!({
            "run_id": run.id.to_string(),
            "agent": run.agent.as_str(),
            "tool": tool,
            "input": input,
            "status": status,
            "duration_ms": duration_ms,
            "output_excerpt": cut(excerpt),
        });
        let events = self
            .state
            .store
            .append_events(run.task_id, vec![(EventKind::ToolExecuted, data)])
            .await?;
        self.state.publish(&events);
        Ok(())
    }

    /// Executes one orchestration tool for `run`.
    async fn execute(
        &self,
        run: &Run,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, ServiceError> {
        let store = &self.state.store;
        match tool {
            "task.get" => {
                let a: args::TaskGet = parse(tool, arguments)?;
                let task = self.task_in_workspace(run, a.task_id.as_deref()).await?;
                Ok(to_json(&outputs::TaskGet {
                    task: task_view(&task),
                }))
            }
            "task.list" => {
                let a: args::TaskList = parse(tool, arguments)?;
                let status = a
                    .status
                    .as_deref()
                    .map(str::parse::<TaskStatus>)
                    .transpose()?;
                let own = store.get_task(run.task_id).await?;
                let (tasks, _) = store
                    .list_tasks(Some(own.workspace_id), status, 500, None)
                    .await?;
                Ok(to_json(&outputs::TaskList {
                    tasks: tasks.iter().map(task_view).collect(),
                }))
            }
            "task.update_stage" => {
                let a: args::TaskUpdateStage = parse(tool, arguments)?;
                let by = run.clone();
                let (task, events) = store
                    .change_task(run.task_id, move |task| {
                        Ok(vec![policy::change_stage(task, a.stage, Some(&by))?])
                    })
                    .await?;
                self.state.publish(&events);
                Ok(to_json(&outputs::TaskStage {
                    task_id: task.id.to_string(),
                    stage: task.stage,
                }))
            }
            "task.comment" => {
                let a: args::TaskComment = parse(tool, arguments)?;
                let event = policy::comment(run, &a.text)?;
                let events = store.append_events(run.task_id, vec![event]).await?;
                self.state.publish(&events);
                let sequence = events.last().map_or(0, |e| e.sequence);
                Ok(to_json(&outputs::TaskComment {
                    task_id: run.task_id.to_string(),
                    sequence,
                }))
            }
            "completion-report" => {
                let report: args::CompletionReport = parse(tool, arguments)?;
                let status = report.status;
                let (_, _, events) = store
                    .change_run(run.id, move |run, task| {
                        policy::apply_completion_report(run, task, report)
                    })
                    .await?;
                self.state.publish(&events);
                Ok(to_json(&outputs::CompletionReportAccepted { status }))
            }
            "planner-output" => {
                let output: args::PlannerOutput = parse(tool, arguments)?;
                if let args::PlannerOutput::Plan {
                    assigned_agent: Some(assigned),
                    ..
                } = &output
                    && !assigned.trim().is_empty()
                {
                    self.check_assignable(run, assigned).await?;
                }
                let kind = match &output {
                    args::PlannerOutput::Plan { .. } => "plan",
                    args::PlannerOutput::Questions { .. } => "questions",
                    args::PlannerOutput::Error { .. } => "error",
                };
                let (_, _, events) = store
                    .change_run(run.id, move |run, _task| {
                        policy::apply_planner_output(run, output)
                    })
                    .await?;
                self.state.publish(&events);
                Ok(to_json(&outputs::PlannerOutputAccepted {
                    kind: kind.to_owned(),
                }))
            }
            "help" => {
                let a: args::Help = parse(tool, arguments)?;
                let granted = chorus_catalog::granted_names(&run.tools);
                if let Some(only) = a.tool.as_deref().filter(|only| !granted.contains(only)) {
                    return Err(ServiceError::Invalid(format!(
                        "tool '{only}' is not available to this run; available: {}",
                        granted.join(", ")
                    )));
                }
                Ok(to_json(&chorus_catalog::help_for(
                    granted,
                    a.tool.as_deref(),
                )))
            }
            "handoff" => Err(ServiceError::Invalid(
                "handoff streams its agent's progress: call the Handoff RPC with the run token (chorus-tools does)"
                    .to_owned(),
            )),
            other => Err(ServiceError::Invalid(format!(
                "'{other}' is not an orchestration tool"
            ))),
        }
    }

    /// Refuses a plan whose assigned agent is not a user-defined agent of the
    /// run's workspace, naming the ones it could be, so the planner can fix it.
    async fn check_assignable(&self, run: &Run, assigned: &str) -> Result<(), ServiceError> {
        let own = self.state.store.get_task(run.task_id).await?;
        let agents = self.state.store.list_agents(own.workspace_id).await?;
        let assignable: Vec<&str> = agents
            .iter()
            .filter(|a| a.kind == AgentKind::UserDefined)
            .map(|a| a.name.as_str())
            .collect();
        if assignable.contains(&assigned) {
            return Ok(());
        }
        Err(ServiceError::Invalid(format!(
            "assigned_agent '{assigned}' is not an agent this task can be assigned to; choose one of: {} (or leave it out)",
            assignable.join(", ")
        )))
    }

    /// The run's own task, or another task of the same workspace.
    async fn task_in_workspace(
        &self,
        run: &Run,
        task_id: Option<&str>,
    ) -> Result<Task, ServiceError> {
        let own = self.state.store.get_task(run.task_id).await?;
        let Some(id) = task_id else { return Ok(own) };
        let id = TaskId::parse(id)?;
        let task = self.state.store.get_task(id).await?;
        if task.workspace_id != own.workspace_id {
            // Tasks of other workspaces do not exist for this run.
            return Err(crate::store::StoreError::NotFound {
                what: "task",
                key: id.to_string(),
            }
            .into());
        }
        Ok(task)
    }
}

#[tonic::async_trait]
impl pb::agent_tools_server::AgentTools for AgentToolsService {
    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let run = self.run_of(request.metadata()).await?;
        let pb::CallToolRequest { tool, arguments } = request.into_inner();
        let spec = chorus_catalog::get(&tool).ok_or_else(|| {
            ServiceError::Invalid(format!(
                "unknown tool '{tool}'; call help to list the tools"
            ))
        })?;
        // help is answered here too (tool-exec answers it for chorus-tools).
        if spec.executor != Executor::Orchestrator && spec.name != "help" {
            return Err(ServiceError::Invalid(format!(
                "'{tool}' is not executed by the orchestrator; chorus-tools sends it to tool-exec"
            ))
            .into());
        }
        self.authorize(&run, &tool).await?;
        let arguments = arguments.map_or(Value::Object(serde_json::Map::new()), |s| {
            Value::Object(json::from_struct(s))
        });
        let started = Instant::now();
        let result = self.execute(&run, &tool, arguments.clone()).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (status, excerpt) = match &result {
            Ok(output) => ("ok".to_owned(), output.to_string()),
            Err(e) => (chorus_proto::code_name(e.code()).to_owned(), e.to_string()),
        };
        info!(run_id = %run.id, agent = %run.agent, tool = %tool, status = %status, "orchestration tool called");
        self.record(&run, &tool, arguments, &status, duration_ms, &excerpt)
            .await?;
        let output = result?;
        let metadata = json::to_struct(serde_json::Map::from_iter([(
            "duration_ms".to_owned(),
            json!(duration_ms),
        )]));
        Ok(Response::new(pb::CallToolResponse {
            output: Some(json::to_value(output)),
            metadata: Some(metadata),
        }))
    }

    async fn authorize_tool_call(
        &self,
        request: Request<pb::AuthorizeToolCallRequest>,
    ) -> Result<Response<pb::AuthorizeToolCallResponse>, Status> {
        let run = self.run_of(request.metadata()).await?;
        self.authorize(&run, &request.get_ref().tool).await?;
        Ok(Response::new(pb::AuthorizeToolCallResponse {}))
    }

    async fn record_tool_call(
        &self,
        request: Request<pb::RecordToolCallRequest>,
    ) -> Result<Response<pb::RecordToolCallResponse>, Status> {
        let run = self.run_of(request.metadata()).await?;
        let r = request.into_inner();
        let input = r
            .input
            .map_or(Value::Null, |s| Value::Object(json::from_struct(s)));
        self.record(
            &run,
            &r.tool,
            input,
            &r.status,
            r.duration_ms,
            &r.output_excerpt,
        )
        .await?;
        Ok(Response::new(pb::RecordToolCallResponse {}))
    }
}

/// The run a run token names. Unknown runs are "not active".
pub(crate) async fn run_of_token(state: &AppState, token: &str) -> Result<Run, ServiceError> {
    let grant = state.verifier.verify(token.trim())?;
    let run_id = RunId::parse(&grant.run_id)
        .map_err(|_| DomainError::RunNotActive(format!("run {} is unknown", grant.run_id)))?;
    match state.store.get_run(run_id).await {
        Ok(run) => Ok(run),
        Err(crate::store::StoreError::NotFound { .. }) => {
            Err(DomainError::RunNotActive(format!("run {run_id} is unknown")).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Checks `run` may call `tool` now; records a denial as `tool_denied`.
pub(crate) async fn authorize(state: &AppState, run: &Run, tool: &str) -> Result<(), ServiceError> {
    match policy::check_tool_call(run, tool) {
        Ok(()) => Ok(()),
        Err(DomainError::NotAllowed(reason)) => {
            let events = state
                .store
                .append_events(run.task_id, policy::denied_events(run, tool, &reason))
                .await?;
            state.publish(&events);
            warn!(run_id = %run.id, agent = %run.agent, tool, "tool denied");
            Err(DomainError::NotAllowed(reason).into())
        }
        Err(e) => {
            warn!(run_id = %run.id, agent = %run.agent, tool, error = %e, "tool call from a run that is not active");
            Err(e.into())
        }
    }
}

fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ServiceError> {
    serde_json::from_value(arguments)
        .map_err(|e| ServiceError::Invalid(format!("invalid arguments for {tool}: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value)
        .unwrap_or_else(|e| Value::String(format!("unserializable output: {e}")))
}

fn cut(text: &str) -> String {
    crate::providers::cut(text, EXCERPT_BYTES)
}

/// A task as agents see it.
fn task_view(t: &Task) -> outputs::Task {
    outputs::Task {
        id: t.id.to_string(),
        description: t.description.clone(),
        status: t.status.as_str().to_owned(),
        stage: t.stage,
        summary: t.planning.summary.clone(),
        requirements: t.planning.requirements.clone(),
        acceptance_criteria: t.planning.acceptance_criteria.clone(),
        plan: t.planning.plan.clone(),
        assigned_agent: t.planning.assigned_agent.as_ref().map(ToString::to_string),
        current_agent: t.current_agent.as_ref().map(ToString::to_string),
        created_ms: t.created_ms,
        updated_ms: t.updated_ms,
    }
}
