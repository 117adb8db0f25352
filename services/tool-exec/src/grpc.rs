//! The gRPC adapter: metadata and proto types in, domain calls, Status out.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use chorus_auth::Principal;
use chorus_catalog::{Category, Executor, PROFILES, TOOLS};
use chorus_proto::json;
use chorus_proto::tools::v1 as pb;
use chorus_run_token::RunGrant;
use chorus_run_token::{RunTokenVerifier, TokenError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, error, info, info_span, warn};

use crate::context::ToolOutcome;
use crate::error::ToolError;
use crate::gate::{RunGate, ToolCallRecord};
use crate::runner::ToolRunner;
use crate::watch::CallWatch;
use chorus_sandbox::fence::Fences;

/// Implements `chorus.tools.v1.ToolExec`.
#[derive(Debug, Clone)]
pub struct ToolExecService {
    runner: ToolRunner,
    verifier: RunTokenVerifier,
    gate: Option<Arc<dyn RunGate>>,
    /// The fences of calls in progress (see [`crate::watch`]); None when none
    /// can be made (processes then run without one).
    fences: Option<Arc<Fences>>,
    /// The limits of the port it is served on, for GetStatus.
    limits: Vec<chorus_proto::serving::v1::Limit>,
}

impl ToolExecService {
    pub fn new(
        runner: ToolRunner,
        verifier: RunTokenVerifier,
        gate: Option<Arc<dyn RunGate>>,
    ) -> Self {
        let dir =
            chorus_sandbox::fence::dir_for("tool-exec", &uuid::Uuid::new_v4().simple().to_string());
        let fences = Fences::create(&dir)
            .map_err(|e| warn!(dir = %dir.display(), error = %e, "cannot make the call fence directory: bash and git run without fences"))
            .ok()
            .map(Arc::new);
        Self {
            runner,
            verifier,
            gate,
            fences,
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

#[tonic::async_trait]
impl pb::tool_exec_server::ToolExec for ToolExecService {
    async fn execute_tool(
        &self,
        request: Request<pb::ExecuteToolRequest>,
    ) -> Result<Response<pb::ExecuteToolResponse>, Status> {
        let (grant, token) = match request.extensions().get::<Principal>() {
            Some(Principal::Run { verified, token }) => (verified.grant.clone(), token.clone()),
            // Without the auth layer (tests of the service alone) the token is read here.
            _ => {
                let token = bearer_token(request.metadata())?.to_owned();
                (
                    self.verifier.verify(&token).map_err(ToolError::from)?,
                    token,
                )
            }
        };
        check_workspace_root(request.metadata(), &grant.root)?;
        let pb::ExecuteToolRequest { tool, arguments } = request.into_inner();
        let arguments = arguments.map_or(Value::Null, |s| Value::Object(json::from_struct(s)));

        // The orchestrator confirms the run is active and allowed; a refusal
        // executes nothing and is not recorded here (the orchestrator records
        // denials itself).
        let asked = tokio::time::Instant::now();
        // A call that starts processes has an id: the run's end waits for it
        // until its record.
        let call_id =
            starts_processes(&tool).then(|| format!("call-{}", uuid::Uuid::new_v4().simple()));
        let authorized = match &self.gate {
            Some(gate) => match gate
                .authorize(&token, &tool, call_id.as_deref())
                .instrument(info_span!("authorize", chorus.tool = %tool))
                .await
            {
                Ok(authorized) => Some((Arc::clone(gate), authorized)),
                Err(err) => {
                    warn!(run_id = %grant.run_id, agent = %grant.agent, tool = %tool, code = ?err.code(), error = %err, "run gate refused the call");
                    return Err(err.into());
                }
            },
            None => None,
        };
        // A call that starts processes is watched while they run.
        let watch = match (authorized, &self.fences, &call_id) {
            (Some((gate, authorized)), Some(fences), Some(id)) => Some(CallWatch::start(
                gate,
                Arc::clone(fences),
                id.clone(),
                token.clone(),
                tool.clone(),
                authorized,
                asked,
            )),
            _ => None,
        };

        // The call runs in a task of its own, which outlives this future: when
        // the caller goes away (tonic drops this future), the guard stops the
        // tool, and what it did is still recorded.
        let caller_gone = CancellationToken::new();
        let _stop_when_caller_leaves = caller_gone.clone().drop_guard();
        let call = tokio::spawn(
            self.clone()
                .execute_and_record(token, grant, tool, arguments, caller_gone, (call_id, watch))
                .instrument(tracing::Span::current()),
        );
        let result = call
            .await
            .map_err(|e| ToolError::Internal(format!("tool call task failed: {e}")))?;
        result
            .map(|outcome| Response::new(outcome.into()))
            .map_err(Into::into)
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        self.run_still_active(&request).await?;
        let tools = TOOLS
            .iter()
            .map(|t| pb::ToolDescriptor {
                name: t.name.to_owned(),
                description: t.description.to_owned(),
                input_schema: object_struct(t.input_schema().clone()),
                output_schema: object_struct(t.output_schema().clone()),
                category: category(t.category) as i32,
                executor: executor(t.executor) as i32,
                always_granted: t.always_granted,
            })
            .collect();
        let profiles = PROFILES
            .iter()
            .map(|p| pb::Profile {
                name: p.name.to_owned(),
                tools: p.tools.iter().map(|t| (*t).to_owned()).collect(),
            })
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools, profiles }))
    }

    async fn get_status(
        &self,
        request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        self.run_still_active(&request).await?;
        Ok(Response::new(pb::GetStatusResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            sandbox: Some(sandbox_status(self.runner.processes().status())),
            limits: self.limits.clone(),
        }))
    }
}

impl ToolExecService {
    /// A caller with a run token is served only while its run is active (the
    /// gate asks whether it may call `help`, which every run holds): a run that
    /// has ended can do nothing. API keys and calls without the auth layer pass.
    async fn run_still_active<T>(&self, request: &Request<T>) -> Result<(), ToolError> {
        match (request.extensions().get::<Principal>(), &self.gate) {
            (Some(Principal::Run { token, .. }), Some(gate)) => {
                gate.authorize(token, "help", None).await.map(drop)
            }
            _ => Ok(()),
        }
    }

    /// Executes an authorized call and records it through the gate, whether or
    /// not anyone still waits for the answer.
    async fn execute_and_record(
        self,
        token: String,
        grant: RunGrant,
        tool: String,
        arguments: Value,
        caller_gone: CancellationToken,
        (call_id, watch): (Option<String>, Option<CallWatch>),
    ) -> Result<ToolOutcome, ToolError> {
        let (run_id, agent) = (grant.run_id.clone(), grant.agent.clone());
        let started = Instant::now();
        let span = info_span!(
            "execute",
            otel.name = %format!("execute {tool}"),
            chorus.tool = %tool,
            chorus.run_id = %run_id,
            chorus.agent = %agent,
            chorus.outcome = tracing::field::Empty,
        );
        let watched = watch
            .as_ref()
            .map(CallWatch::watched)
            .cloned()
            .unwrap_or_default();
        let result = self
            .runner
            .execute_watched(grant, &tool, arguments.clone(), &caller_gone, &watched)
            .instrument(span.clone())
            .await;
        // The processes are gone: the watch and the fence go too.
        drop(watch);
        let elapsed = started.elapsed();
        let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let (status, output) = match &result {
            Ok(outcome) => (
                outcome
                    .error
                    .as_ref()
                    .map_or_else(|| "ok".to_owned(), |e| e.code.clone()),
                outcome
                    .error
                    .as_ref()
                    .map_or_else(|| outcome.output.to_string(), |e| e.message.clone()),
            ),
            Err(err) => (
                chorus_proto::code_name(err.code()).to_owned(),
                err.to_string(),
            ),
        };
        span.record("chorus.outcome", status.as_str());
        chorus_telemetry::metrics().tool_call(&tool, &status, elapsed.as_secs_f64());
        match &result {
            Ok(_) => {
                info!(run_id = %run_id, agent = %agent, tool = %tool, status = %status, duration_ms, "tool executed")
            }
            Err(err) => {
                warn!(run_id = %run_id, agent = %agent, tool = %tool, code = ?err.code(), error = %err, "tool failed")
            }
        }
        if let Some(gate) = &self.gate {
            let record = ToolCallRecord::new(&tool, &arguments, status, duration_ms, &output);
            if let Err(err) = gate
                .record(&token, record, call_id.as_deref())
                .instrument(info_span!("record", chorus.tool = %tool))
                .await
            {
                // The call has happened; its answer still goes back to the agent.
                error!(run_id = %run_id, tool = %tool, error = %err, "could not record the tool call in the task history");
            }
        }
        result
    }
}

/// Whether calls of `tool` start processes (bash, git): those are watched.
fn starts_processes(tool: &str) -> bool {
    chorus_catalog::get(tool)
        .is_some_and(|spec| spec.name == "bash" || spec.category == Category::Git)
}

/// The sandbox's status on the wire.
pub fn sandbox_status(
    status: &chorus_sandbox::SandboxStatus,
) -> chorus_proto::sandbox::v1::SandboxStatus {
    chorus_proto::sandbox::v1::SandboxStatus {
        state: status.state.to_owned(),
        launcher: status.launcher.clone(),
        landlock: status.landlock.clone(),
        seccomp: status.seccomp.clone(),
        identity: status.identity.clone(),
        limits: status.limits.clone(),
        problems: status.problems.clone(),
        tier: status.tier.to_owned(),
        tier_reason: status.tier_reason.clone(),
    }
}

/// The token from `authorization: Bearer <token>`.
fn bearer_token(metadata: &MetadataMap) -> Result<&str, ToolError> {
    let value = metadata.get("authorization").ok_or(TokenError::Missing)?;
    let value = value
        .to_str()
        .map_err(|_| TokenError::Malformed("the authorization header is not ASCII".to_owned()))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| {
            TokenError::Malformed("the authorization header must be 'Bearer <token>'".to_owned())
        })?;
    Ok(token)
}

/// Metadata key with the workspace root an agent named on chorus-tools' command line.
pub const WORKSPACE_ROOT_METADATA: &str = "chorus-workspace-root";

/// An agent may name its workspace root (`chorus-tools <root> '<json>'`); it must be
/// the run's own root, so a confused agent learns it is in the wrong place.
fn check_workspace_root(metadata: &MetadataMap, root: &Path) -> Result<(), ToolError> {
    let Some(given) = metadata.get(WORKSPACE_ROOT_METADATA) else {
        return Ok(());
    };
    let given = given.to_str().unwrap_or_default();
    let same = |a: &Path, b: &Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    };
    if same(Path::new(given.trim_end_matches('/')), root)
        || (given == "/" && root == Path::new("/"))
    {
        return Ok(());
    }
    Err(ToolError::RootMismatch {
        given: given.to_owned(),
        expected: root.display().to_string(),
    })
}

fn object_struct(schema: Value) -> Option<prost_types::Struct> {
    match schema {
        Value::Object(map) => Some(json::to_struct(map)),
        _ => None,
    }
}

fn category(c: Category) -> pb::ToolCategory {
    match c {
        Category::File => pb::ToolCategory::File,
        Category::Dev => pb::ToolCategory::Dev,
        Category::Git => pb::ToolCategory::Git,
        Category::Orchestration => pb::ToolCategory::Orchestration,
        Category::Native => pb::ToolCategory::Native,
    }
}

fn executor(e: Executor) -> pb::Executor {
    match e {
        Executor::ToolExec => pb::Executor::ToolExec,
        Executor::Orchestrator => pb::Executor::Orchestrator,
        Executor::AgentCli => pb::Executor::AgentCli,
    }
}

impl From<ToolOutcome> for pb::ExecuteToolResponse {
    fn from(outcome: ToolOutcome) -> Self {
        Self {
            output: Some(json::to_value(outcome.output)),
            error: outcome.error.map(|e| pb::ToolError {
                code: e.code,
                message: e.message,
            }),
            metadata: Some(json::to_struct(outcome.metadata)),
        }
    }
}
