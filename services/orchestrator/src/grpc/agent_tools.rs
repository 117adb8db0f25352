//! `chorus.orchestrator.v1.AgentTools`, the gRPC face of what agent runs use
//! ([`crate::core::agent_tools`]): CallTool executes the orchestration tools
//! for the run whose token is the call's credential; AuthorizeToolCall and
//! RecordToolCall are tool-exec's questions and reports for workspace tools
//! (tool-exec's service key is the credential, the agent's token is in the
//! request); GetRunTokenKeys and AuthenticateKey give tool-exec what it needs
//! to check credentials itself. This module only converts.

use chorus_auth::{ApiKey, Principal};
use chorus_proto::json;
use chorus_proto::orchestrator::v1 as pb;
use chorus_run_token::TokenError;
use chorus_tool_exec::record::ToolCallRecord;
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

use crate::auth::runs::run_of_token;
use crate::core::agent_tools::{self as core, AgentTools};
use crate::domain::Run;
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

#[derive(Debug, Clone)]
pub struct AgentToolsService {
    state: AppState,
    tools: AgentTools,
}

impl AgentToolsService {
    pub fn new(state: AppState) -> Self {
        Self {
            tools: AgentTools::new(state.clone()),
            state,
        }
    }
}

#[tonic::async_trait]
impl pb::agent_tools_server::AgentTools for AgentToolsService {
    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let run = run_of_caller(&self.state, &request).await?;
        let while_waiting = gives_back_places(&request);
        let pb::CallToolRequest { tool, arguments } = request.into_inner();
        let arguments = arguments.map_or(Value::Object(serde_json::Map::new()), |s| {
            Value::Object(json::from_struct(s))
        });
        let called = self
            .tools
            .call(&run, &tool, arguments, while_waiting)
            .await?;
        let metadata = json::to_struct(serde_json::Map::from_iter([(
            "duration_ms".to_owned(),
            json!(called.duration_ms),
        )]));
        Ok(Response::new(pb::CallToolResponse {
            output: Some(json::to_value(called.output)),
            metadata: Some(metadata),
        }))
    }

    async fn authorize_tool_call(
        &self,
        request: Request<pb::AuthorizeToolCallRequest>,
    ) -> Result<Response<pb::AuthorizeToolCallResponse>, Status> {
        let while_waiting = gives_back_places(&request);
        let r = request.into_inner();
        let call_id = call_id(r.call_id)?;
        // A question asked again while the call runs carries no call.
        let call = (r.arguments.is_some() || !r.call_key.is_empty()).then(|| {
            crate::core::approvals::ToolCall {
                arguments: r.arguments.map_or_else(
                    || serde_json::json!({}),
                    |a| serde_json::Value::Object(json::from_struct(a)),
                ),
                call_key: r.call_key,
                resolved_path: Some(r.resolved_path).filter(|p| !p.is_empty()),
                while_waiting,
            }
        });
        let authorized =
            core::authorize_reported(&self.state, &r.run_token, &r.tool, call_id, call.as_ref())
                .await?;
        Ok(Response::new(pb::AuthorizeToolCallResponse {
            fence_in_ms: Some(authorized.fence_in_ms),
            network_asks: authorized.network_asks,
        }))
    }

    async fn record_tool_call(
        &self,
        request: Request<pb::RecordToolCallRequest>,
    ) -> Result<Response<pb::RecordToolCallResponse>, Status> {
        let r = request.into_inner();
        let id = call_id(r.call_id)?;
        let call = ToolCallRecord {
            input: r
                .input
                .map_or(Value::Null, |s| Value::Object(json::from_struct(s))),
            input_bytes: r.input_bytes,
            tool: r.tool,
            status: r.status,
            duration_ms: r.duration_ms,
            output_excerpt: r.output_excerpt,
            output_bytes: r.output_bytes,
            started_ms: r.started_ms,
        };
        core::report(&self.state, &r.run_token, call, id).await?;
        Ok(Response::new(pb::RecordToolCallResponse {}))
    }

    async fn get_run_token_keys(
        &self,
        _request: Request<pb::GetRunTokenKeysRequest>,
    ) -> Result<Response<pb::RunTokenKeys>, Status> {
        Ok(Response::new(run_token_keys(&self.state)))
    }

    async fn authenticate_key(
        &self,
        request: Request<pb::AuthenticateKeyRequest>,
    ) -> Result<Response<pb::AuthenticateKeyResponse>, Status> {
        let key = ApiKey::parse(request.get_ref().key.trim()).ok_or_else(|| {
            ServiceError::Invalid("key: not an API key (expected chorus_<id>_<secret>)".to_owned())
        })?;
        match self.state.auth.principal(&key).await? {
            Principal::Key { id, name, role } => Ok(Response::new(pb::AuthenticateKeyResponse {
                id,
                name,
                role: convert::role(role).into(),
            })),
            other => Err(ServiceError::BadCredential(format!(
                "{} is not an API key",
                other.describe()
            ))
            .into()),
        }
    }
}

/// The published run-token keys.
pub(crate) fn run_token_keys(state: &AppState) -> pb::RunTokenKeys {
    pb::RunTokenKeys {
        keys: state
            .signer
            .public_keys()
            .into_iter()
            .map(|k| pb::RunTokenKey {
                kid: k.kid,
                public_key_pem: k.pem,
                created_ms: k.created_ms,
                retired_ms: k.retired_ms.unwrap_or(0),
            })
            .collect(),
        current_kid: state.signer.current_kid(),
    }
}

/// The run whose token was the request's credential (checked by the auth layer's
/// signature check, and here against the stored run).
pub(crate) async fn run_of_caller<T>(
    state: &AppState,
    request: &Request<T>,
) -> Result<Run, ServiceError> {
    match request.extensions().get::<Principal>() {
        Some(Principal::Run { verified, .. }) => run_of_token(state, verified).await,
        _ => Err(TokenError::Missing.into()),
    }
}

/// A call's places on this server, given back once it waits for a person:
/// tool-exec's calls of every run share its key's places, and waits for
/// people must not fill them.
fn gives_back_places<T>(request: &Request<T>) -> crate::core::approvals::WhileWaiting {
    match request.extensions().get::<chorus_serve::shed::HeldPlaces>() {
        Some(places) => {
            let places = places.clone();
            crate::core::approvals::WhileWaiting::new(move || places.give_back())
        }
        None => crate::core::approvals::WhileWaiting::default(),
    }
}

/// The parent of a Handoff call: the run whose token was its credential (see
/// [`core::handoff_parent`]), or none for a caller with a key.
pub(crate) async fn parent_of(
    state: &AppState,
    request: &Request<pb::HandoffRequest>,
) -> Result<Option<Run>, ServiceError> {
    match request.extensions().get::<Principal>() {
        Some(Principal::Run { verified, .. }) => {
            let r = request.get_ref();
            let arguments = json!({ "agent": r.agent, "prompt": r.prompt });
            core::handoff_parent(state, verified, arguments)
                .await
                .map(Some)
        }
        _ => Ok(None),
    }
}

/// For a Handoff call that re-opens a handoff's stream: the run of the
/// token (see [`core::handoff_follower`]), or none for a caller with a key.
pub(crate) async fn follower_of<T>(
    state: &AppState,
    request: &Request<T>,
) -> Result<Option<Run>, ServiceError> {
    match request.extensions().get::<Principal>() {
        Some(Principal::Run { verified, .. }) => {
            core::handoff_follower(state, verified).await.map(Some)
        }
        _ => Ok(None),
    }
}

/// The longest call id tool-exec may give.
const CALL_ID_BYTES: usize = 128;

/// A call id as the wire gives it (empty: none).
fn call_id(id: String) -> Result<Option<String>, ServiceError> {
    if id.len() > CALL_ID_BYTES {
        return Err(ServiceError::Invalid(format!(
            "call_id: {} bytes; at most {CALL_ID_BYTES}",
            id.len()
        )));
    }
    Ok((!id.is_empty()).then_some(id))
}
