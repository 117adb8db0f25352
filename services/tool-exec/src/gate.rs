//! The run gate: before a tool runs, the orchestrator confirms the run is active
//! and may use the tool, checking every claim of its token against the stored
//! run; after it ran, the orchestrator records it in the task's history. The
//! gate also keeps tool-exec's run-token keys current and checks API keys
//! presented to tool-exec. tool-exec verifies the token itself either way;
//! without a gate (`--standalone`, development) the token alone decides.
//!
//! Two gates: [`OrchestratorGate`] asks an orchestrator over gRPC with
//! tool-exec's service key (role tool-exec), over several connections that
//! follow their replicas' health (see [`pool`]); the orchestrator's embedded
//! tool-exec uses one that calls it in-process.

pub mod pool;

use std::fmt::Debug;
use std::time::Duration;

use chorus_auth::tls::ClientTls;
use chorus_auth::{Principal, Role};
use chorus_proto::handoff::HandoffError;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::orchestrator::v1::{
    AuthenticateKeyRequest, AuthorizeToolCallRequest, CallToolRequest, CallToolResponse,
    GetRunTokenKeysRequest, HandoffProgress, RecordToolCallRequest,
};
use chorus_proto::{channel, json, limits};
use chorus_run_token::RunTokenVerifier;
use chorus_telemetry::grpc::{TracedChannel, traced};
use serde_json::{Map, Value};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tracing::{error, info};

use crate::context::ToolOutcome;
use crate::error::ToolError;
pub use crate::record::ToolCallRecord;

/// What an authorization says besides yes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Authorized {
    /// For how long from the question the call's processes may run without
    /// another yes (the run's driver holds its lease until then); None: no
    /// such limit (the run's caller drives it, or there is no orchestrator).
    pub fence: Option<std::time::Duration>,
    /// Whether the run's approval rules decide connections of the network
    /// grant (see [`network_questions`]).
    pub network_asks: bool,
}

/// What tool-exec says of a call when it asks about it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Question<'a> {
    /// Set the first time a call that starts processes is asked about: the
    /// run's end waits for it until its record.
    pub call_id: Option<&'a str>,
    /// The call itself, the first time it is asked about (approval rules
    /// read it); None when asked again while it runs.
    pub call: Option<&'a CallAsked>,
}

/// A call as approval rules read it.
#[derive(Debug, Clone, Default)]
pub struct CallAsked {
    pub arguments: Value,
    /// Unique to the call, the same each time it is asked about: a call
    /// asked again after a lost answer finds its approval.
    pub key: String,
    /// For a file tool: the workspace-relative path its `path` leads to
    /// once symbolic links are followed.
    pub resolved_path: Option<String>,
}

/// For the processes of a call by the run holding `token`: asks `gate`,
/// before each connection made with the network grant that the egress list
/// allows, whether the run's approval rules let it reach that host and port
/// now — a question about `network` with `{host, port}`, which may wait for
/// a person. A refusal's message is what the program is told.
pub fn network_questions(
    gate: std::sync::Arc<dyn RunGate>,
    token: String,
) -> chorus_sandbox::NetworkQuestions {
    chorus_sandbox::NetworkQuestions::new(move |host: String, port: u16| {
        let (gate, token) = (std::sync::Arc::clone(&gate), token.clone());
        async move {
            let asked = CallAsked {
                arguments: serde_json::json!({ "host": host, "port": port }),
                key: format!("key-{}", uuid::Uuid::new_v4().simple()),
                resolved_path: None,
            };
            let question = Question {
                call_id: None,
                call: Some(&asked),
            };
            gate.authorize(&token, chorus_catalog::NETWORK, question)
                .await
                .map(drop)
                .map_err(|e| format!("egress to {host}:{port} is refused: {e}"))
        }
    })
}

/// Asks whether a run may call a tool, and records what it called.
#[tonic::async_trait]
pub trait RunGate: Send + Sync + Debug {
    /// Ok when the run holding `token` is active and may call `tool` now
    /// (see [`Question`]); a call an approval rule asks about waits for a
    /// person's answer first.
    async fn authorize(
        &self,
        token: &str,
        tool: &str,
        question: Question<'_>,
    ) -> Result<Authorized, ToolError>;
    /// Records a finished call in the run's task history (`call_id`: as it
    /// was authorized).
    async fn record(
        &self,
        token: &str,
        call: ToolCallRecord,
        call_id: Option<&str>,
    ) -> Result<(), ToolError>;
    /// Whose API key `key` (presented to tool-exec by an operator) is.
    async fn authenticate_key(&self, key: &str) -> Result<Principal, ToolError>;
    /// Brings `verifier`'s keys up to date with the orchestrator's; a gate
    /// whose verifier is the signer's own has nothing to do.
    async fn refresh_keys(&self, verifier: &RunTokenVerifier) -> Result<(), ToolError> {
        let _ = verifier;
        Ok(())
    }
    /// Whether the gate can answer now (tool-exec's health follows it): the
    /// orchestrator reachable and SERVING; why not, when it is not.
    async fn ready(&self) -> Result<(), String> {
        Ok(())
    }
    /// Calls an orchestration tool (handoff, completion-report, the task
    /// tools) for the run of `token`, as its agent would: the MCP face over
    /// HTTP sends here the tools tool-exec does not run. The orchestrator
    /// authorizes, executes and records the call. A handoff tells `progress`
    /// what the other agent does as it happens.
    async fn call_orchestration(
        &self,
        token: &str,
        tool: &str,
        arguments: Map<String, Value>,
        progress: &mut (dyn for<'p> FnMut(&'p HandoffProgress) + Send),
    ) -> Result<ToolOutcome, ToolError> {
        let _ = (token, arguments, progress);
        Err(ToolError::FailedPrecondition(format!(
            "{tool} is the orchestrator's tool, and this tool-exec's gate cannot call it"
        )))
    }
}

/// A handoff's outcome as a tool's answer: the other agent's result, or its
/// failure in-band (the model reads why, and the child run's id); a status
/// (the call refused, the orchestrator gone) is the caller's to map.
pub fn handoff_outcome(outcome: Result<Value, HandoffError>) -> Result<ToolOutcome, Status> {
    match outcome {
        Ok(output) => Ok(ToolOutcome {
            output,
            error: None,
            metadata: Map::new(),
        }),
        Err(HandoffError::Failed {
            failure,
            reason,
            run_id,
        }) => Ok(ToolOutcome {
            output: Value::Null,
            error: None,
            metadata: Map::new(),
        }
        .with_error(&failure, reason)
        .with_metadata("run_id", run_id)),
        Err(HandoffError::Status(status)) => Err(status),
    }
}

/// What the orchestrator's CallTool answered, as a tool's answer.
pub fn called(response: CallToolResponse) -> ToolOutcome {
    ToolOutcome {
        output: response.output.map_or(Value::Null, json::from_value),
        error: None,
        metadata: response.metadata.map(json::from_struct).unwrap_or_default(),
    }
}

/// The orchestrator's `AgentTools` service as the gate.
#[derive(Clone)]
pub struct OrchestratorGate {
    /// The connections, each to the replica the address led it to. Calls
    /// carry their own deadlines (short ones: [`channel::CALL_TIMEOUT`]);
    /// a handoff lasts as its child does.
    pool: pool::Pool,
    addr: String,
    /// tool-exec's own API key (role tool-exec), the credential of every call
    /// (None: its client certificate is).
    service_key: Option<String>,
}

impl Debug for OrchestratorGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrchestratorGate")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Deadline of one attempt to record a call: recording is one small write.
const RECORD_TIMEOUT: Duration = Duration::from_secs(5);
/// The pauses before each further attempt to record a call that no
/// orchestrator took (about half a minute in all, longer than a lease).
const RECORD_RETRIES: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// Whether a record may not have reached an orchestrator that could take it
/// (no answer in time, no connection), so that another attempt may.
fn undelivered(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    )
}

/// The name whose health a separate tool-exec follows on its orchestrator.
const GATE_SERVICE: &str = "chorus.orchestrator.v1.AgentTools";

impl OrchestratorGate {
    /// A gate for the orchestrator at `addr` (`host:port` or a URL) that calls it
    /// with `service_key` (tool-exec's API key; None when its client certificate
    /// is its credential), over TLS when `tls` says so, on `connections`
    /// connections made through `addr` (each made lazily).
    pub fn new(
        addr: &str,
        service_key: Option<&str>,
        tls: &ClientTls,
        connections: usize,
    ) -> Result<Self, ToolError> {
        let endpoint = tls
            .endpoint(addr)
            .map_err(|e| ToolError::Internal(format!("orchestrator address: {e}")))?;
        Ok(Self {
            pool: pool::Pool::new(&channel::tune(endpoint), connections, GATE_SERVICE),
            addr: tls.url(addr),
            service_key: service_key.map(|k| k.trim().to_owned()),
        })
    }

    /// The service on the next connection whose replica serves.
    async fn client(&self) -> AgentToolsClient<TracedChannel> {
        Self::agent_tools(self.pool.ready().await)
    }

    fn agent_tools(channel: Channel) -> AgentToolsClient<TracedChannel> {
        AgentToolsClient::new(traced(channel))
            .max_decoding_message_size(limits::DEFAULT_MESSAGE_BYTES)
    }

    /// One attempt to deliver `message` over `client`, bounded by
    /// [`RECORD_TIMEOUT`].
    async fn send_record(
        &self,
        mut client: AgentToolsClient<TracedChannel>,
        message: RecordToolCallRequest,
    ) -> Result<(), Status> {
        let mut request = self
            .request(message)
            .map_err(|e| Status::internal(e.to_string()))?;
        request.set_timeout(RECORD_TIMEOUT);
        client.record_tool_call(request).await.map(drop)
    }

    /// Delivers a record the first attempt could not, each attempt on the
    /// next connection whose replica serves: the replica that took the first
    /// may be paused or cut off while another would answer.
    async fn record_again(self, message: RecordToolCallRequest) {
        let tool = message.tool.clone();
        for (attempt, pause) in RECORD_RETRIES.iter().enumerate() {
            tokio::time::sleep(*pause).await;
            match self.send_record(self.client().await, message.clone()).await {
                Ok(()) => {
                    info!(tool = %tool, attempt = attempt + 2, "a tool call was recorded on another attempt");
                    return;
                }
                Err(status) if undelivered(&status) => {}
                Err(status) => {
                    error!(tool = %tool, error = %self.refused(&status), "the orchestrator refused to record a tool call");
                    return;
                }
            }
        }
        error!(tool = %tool, attempts = RECORD_RETRIES.len() + 1, "a tool call could not be recorded: no orchestrator answered");
    }

    fn request<T>(&self, message: T) -> Result<tonic::Request<T>, ToolError> {
        let mut request = channel::short(tonic::Request::new(message));
        if let Some(key) = &self.service_key {
            let bearer = MetadataValue::try_from(format!("Bearer {key}")).map_err(|_| {
                ToolError::Internal("the service key is not valid metadata".to_owned())
            })?;
            request.metadata_mut().insert("authorization", bearer);
        }
        Ok(request)
    }

    fn refused(&self, status: &Status) -> ToolError {
        match status.code() {
            Code::Unavailable | Code::Unknown
                if status.message().contains("transport") || status.message().is_empty() =>
            {
                ToolError::GateUnavailable(format!(
                    "cannot reach the orchestrator at {} to check the run: {}",
                    self.addr,
                    status.message()
                ))
            }
            Code::Unavailable => ToolError::GateUnavailable(format!(
                "the orchestrator at {} is unavailable: {}",
                self.addr,
                status.message()
            )),
            code => ToolError::Refused {
                code,
                message: status.message().to_owned(),
            },
        }
    }
}

#[tonic::async_trait]
impl RunGate for OrchestratorGate {
    async fn authorize(
        &self,
        token: &str,
        tool: &str,
        question: Question<'_>,
    ) -> Result<Authorized, ToolError> {
        let call = question.call;
        let mut request = self.request(AuthorizeToolCallRequest {
            tool: tool.to_owned(),
            run_token: token.to_owned(),
            call_id: question.call_id.unwrap_or_default().to_owned(),
            arguments: call.and_then(|c| match &c.arguments {
                Value::Object(map) => Some(json::to_struct(map.clone())),
                _ => None,
            }),
            call_key: call.map(|c| c.key.clone()).unwrap_or_default(),
            resolved_path: call
                .and_then(|c| c.resolved_path.clone())
                .unwrap_or_default(),
        })?;
        // A first question may wait for a person's answer (an approval
        // rule's deadline is at most a day).
        if call.is_some() {
            request.set_timeout(channel::APPROVAL_TIMEOUT);
        }
        let answer = self
            .client()
            .await
            .authorize_tool_call(request)
            .await
            .map_err(|s| self.refused(&s))?
            .into_inner();
        Ok(Authorized {
            fence: answer
                .fence_in_ms
                .map(|ms| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            network_asks: answer.network_asks,
        })
    }

    async fn record(
        &self,
        token: &str,
        call: ToolCallRecord,
        call_id: Option<&str>,
    ) -> Result<(), ToolError> {
        let input = match call.input {
            Value::Object(map) => Some(json::to_struct(map)),
            _ => None,
        };
        let message = RecordToolCallRequest {
            tool: call.tool,
            input,
            status: call.status,
            duration_ms: call.duration_ms,
            output_excerpt: call.output_excerpt,
            run_token: token.to_owned(),
            input_bytes: call.input_bytes,
            output_bytes: call.output_bytes,
            started_ms: call.started_ms,
            call_id: call_id.unwrap_or_default().to_owned(),
        };
        match self.send_record(self.client().await, message.clone()).await {
            Ok(()) => Ok(()),
            Err(status) if undelivered(&status) => {
                let refused = self.refused(&status);
                tokio::spawn(self.clone().record_again(message));
                Err(ToolError::GateUnavailable(format!(
                    "{refused}; the record is being retried on new connections"
                )))
            }
            Err(status) => Err(self.refused(&status)),
        }
    }

    async fn authenticate_key(&self, key: &str) -> Result<Principal, ToolError> {
        let request = self.request(AuthenticateKeyRequest {
            key: key.to_owned(),
        })?;
        let answer = self
            .client()
            .await
            .authenticate_key(request)
            .await
            .map_err(|s| self.refused(&s))?
            .into_inner();
        let role = match answer.role() {
            chorus_proto::orchestrator::v1::Role::Admin => Role::Admin,
            chorus_proto::orchestrator::v1::Role::Operator => Role::Operator,
            chorus_proto::orchestrator::v1::Role::Viewer => Role::Viewer,
            chorus_proto::orchestrator::v1::Role::ToolExec => Role::ToolExec,
            chorus_proto::orchestrator::v1::Role::Unspecified => {
                return Err(ToolError::Internal(
                    "the orchestrator answered a key without a role".to_owned(),
                ));
            }
        };
        Ok(Principal::Key {
            id: answer.id,
            name: answer.name,
            role,
        })
    }

    async fn ready(&self) -> Result<(), String> {
        if self.pool.any_serving() {
            return Ok(());
        }
        let request = channel::short(tonic::Request::new(HealthCheckRequest {
            service: GATE_SERVICE.to_owned(),
        }));
        match HealthClient::new(self.pool.pick()).check(request).await {
            Ok(answer) if answer.get_ref().status() == ServingStatus::Serving => Ok(()),
            Ok(answer) => Err(format!(
                "the orchestrator at {} reports {:?}",
                self.addr,
                answer.get_ref().status()
            )),
            Err(status) => Err(self.refused(&status).to_string()),
        }
    }

    async fn refresh_keys(&self, verifier: &RunTokenVerifier) -> Result<(), ToolError> {
        let request = self.request(GetRunTokenKeysRequest {})?;
        let keys = self
            .client()
            .await
            .get_run_token_keys(request)
            .await
            .map_err(|s| self.refused(&s))?
            .into_inner()
            .keys;
        let offered = keys.len();
        let taken = verifier.replace(
            keys.into_iter()
                .map(|k| (k.kid, k.public_key_pem))
                .collect(),
        );
        if taken != offered {
            return Err(ToolError::Internal(format!(
                "{} of the orchestrator's {offered} run-token keys were not valid",
                offered - taken
            )));
        }
        Ok(())
    }
    async fn call_orchestration(
        &self,
        token: &str,
        tool: &str,
        arguments: Map<String, Value>,
        progress: &mut (dyn for<'p> FnMut(&'p HandoffProgress) + Send),
    ) -> Result<ToolOutcome, ToolError> {
        if tool == "handoff" {
            let outcome = chorus_proto::handoff::call_with_progress(
                traced(self.pool.ready().await),
                token,
                &arguments,
                progress,
            )
            .await;
            return handoff_outcome(outcome).map_err(|s| self.refused(&s));
        }
        let bearer = MetadataValue::try_from(format!("Bearer {}", token.trim()))
            .map_err(|_| ToolError::Unauthenticated(chorus_run_token::TokenError::Missing))?;
        let mut request = tonic::Request::new(CallToolRequest {
            tool: tool.to_owned(),
            arguments: Some(json::to_struct(arguments)),
        });
        request.metadata_mut().insert("authorization", bearer);
        let answer = self
            .client()
            .await
            .call_tool(request)
            .await
            .map_err(|s| self.refused(&s))?;
        Ok(called(answer.into_inner()))
    }
}
