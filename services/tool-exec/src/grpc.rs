//! The gRPC adapter: metadata and proto types in, domain calls, Status out.

use std::path::Path;
use std::sync::Arc;

use chorus_auth::Principal;
use chorus_catalog::{Category, Executor, PROFILES, TOOLS};
use chorus_proto::json;
use chorus_proto::tools::v1 as pb;
use chorus_run_token::{RunTokenVerifier, TokenError};
use serde_json::Value;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::calls::ToolCalls;
use crate::context::ToolOutcome;
use crate::error::ToolError;
use crate::gate::RunGate;
use crate::runner::ToolRunner;

/// Implements `chorus.tools.v1.ToolExec`: converts, calls [`ToolCalls`],
/// maps errors.
#[derive(Debug, Clone)]
pub struct ToolExecService {
    calls: ToolCalls,
    /// The limits of the port it is served on, for GetStatus.
    limits: Vec<chorus_proto::serving::v1::Limit>,
}

impl ToolExecService {
    pub fn new(
        runner: ToolRunner,
        verifier: RunTokenVerifier,
        gate: Option<Arc<dyn RunGate>>,
    ) -> Self {
        Self::over(ToolCalls::new(runner, verifier, gate))
    }

    /// The service over `calls` (shared with the other faces).
    pub fn over(calls: ToolCalls) -> Self {
        Self {
            calls,
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
                (self.calls.verify(&token)?, token)
            }
        };
        check_workspace_root(request.metadata(), &grant.root)?;
        let pb::ExecuteToolRequest { tool, arguments } = request.into_inner();
        let arguments = arguments.map_or(Value::Null, |s| Value::Object(json::from_struct(s)));
        let outcome = self.calls.call(token, grant, tool, arguments).await?;
        Ok(Response::new(outcome.into()))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        self.run_still_active(&request).await?;
        if request.get_ref().granted_only {
            return Ok(Response::new(self.granted_tools(&request)?));
        }
        let tools = TOOLS.iter().map(descriptor).collect();
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
            sandbox: Some(sandbox_status(self.calls.runner().processes().status())),
            limits: self.limits.clone(),
        }))
    }
}

impl ToolExecService {
    /// The tools the caller's run was granted (ListTools `granted_only`).
    fn granted_tools<T>(&self, request: &Request<T>) -> Result<pb::ListToolsResponse, ToolError> {
        let Some(Principal::Run { verified, .. }) = request.extensions().get::<Principal>() else {
            return Err(ToolError::InvalidArguments {
                tool: "ListTools".to_owned(),
                message:
                    "granted_only lists a run's tools: call with the run's token, not an API key"
                        .to_owned(),
            });
        };
        let granted = chorus_catalog::granted_names(&verified.grant.tools);
        let tools = TOOLS
            .iter()
            .filter(|t| granted.contains(&t.name))
            .map(descriptor)
            .collect();
        Ok(pb::ListToolsResponse {
            tools,
            profiles: Vec::new(),
        })
    }

    /// A caller with a run token is served only while its run is active: a
    /// run that has ended can do nothing. API keys and calls without the auth
    /// layer pass.
    async fn run_still_active<T>(&self, request: &Request<T>) -> Result<(), ToolError> {
        match request.extensions().get::<Principal>() {
            Some(Principal::Run { token, .. }) => self.calls.still_active(token).await,
            _ => Ok(()),
        }
    }
}

fn descriptor(t: &chorus_catalog::ToolSpec) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        name: t.name.to_owned(),
        description: t.description.to_owned(),
        input_schema: object_struct(t.input_schema().clone()),
        output_schema: object_struct(t.output_schema().clone()),
        category: category(t.category) as i32,
        executor: executor(t.executor) as i32,
        always_granted: t.always_granted,
    }
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

fn object_struct(schema: Value) -> Option<chorus_proto::wkt::Struct> {
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
