//! The embedded tool-exec's gate: the checks and records AgentTools does for a
//! separate tool-exec, called in-process (no loopback gRPC, no service key).

use chorus_auth::{ApiKey, Principal};
use chorus_proto::orchestrator::v1::HandoffProgress;
use chorus_tool_exec::ToolError;
use chorus_tool_exec::context::ToolOutcome;
use chorus_tool_exec::gate::{Authorized, RunGate, ToolCallRecord, handoff_outcome};
use serde_json::{Map, Value};
use tokio_stream::StreamExt as _;

use crate::auth::runs::run_of_token;
use crate::core::agent_tools::{self as core, AgentTools};
use crate::error::ServiceError;
use crate::state::AppState;

/// [`RunGate`] over this process's own state.
#[derive(Debug, Clone)]
pub struct InProcessGate {
    state: AppState,
    tools: AgentTools,
}

impl InProcessGate {
    pub fn new(state: AppState) -> Self {
        Self {
            tools: AgentTools::new(state.clone()),
            state,
        }
    }

    /// A handoff for the run of `token`, followed here until the child ends.
    async fn handoff(
        &self,
        token: &str,
        arguments: &Map<String, Value>,
        progress: &mut (dyn for<'p> FnMut(&'p HandoffProgress) + Send),
    ) -> Result<ToolOutcome, ToolError> {
        let verified = self
            .state
            .verifier
            .verify_token(token)
            .map_err(|e| refused(e.into()))?;
        let parent = core::handoff_parent(&self.state, &verified, Value::Object(arguments.clone()))
            .await
            .map_err(refused)?;
        let request = chorus_proto::handoff::request(arguments);
        let ask = crate::runner::handoff::HandoffAsk {
            agent: request.agent,
            prompt: request.prompt,
            timeout_secs: request.timeout_secs,
            ..crate::runner::handoff::HandoffAsk::default()
        };
        let mut stream = crate::runner::handoff::handoff(&self.state, ask, Some(parent))
            .await
            .map_err(refused)?;
        let mut started = String::new();
        while let Some(update) = stream.next().await {
            // Read as a gRPC caller reads it: the same answer either way.
            let message = crate::grpc::convert::handoff_event(update.map_err(refused)?);
            if let Some(outcome) = chorus_proto::handoff::outcome(message, &mut started, progress) {
                return handoff_outcome(outcome).map_err(|s| status(&s));
            }
        }
        Err(ToolError::GateUnavailable(
            "the handoff ended without its outcome: the orchestrator is stopping".to_owned(),
        ))
    }
}

/// A status of the orchestrator's own stream as tool-exec reports it.
fn status(status: &tonic::Status) -> ToolError {
    ToolError::Refused {
        code: status.code(),
        message: status.message().to_owned(),
    }
}

/// An orchestrator refusal as tool-exec reports it.
fn refused(e: ServiceError) -> ToolError {
    ToolError::Refused {
        code: e.code(),
        message: e.to_string(),
    }
}

#[tonic::async_trait]
impl RunGate for InProcessGate {
    async fn authorize(
        &self,
        token: &str,
        tool: &str,
        question: chorus_tool_exec::gate::Question<'_>,
    ) -> Result<Authorized, ToolError> {
        let call = question.call.map(|c| crate::core::approvals::ToolCall {
            arguments: c.arguments.clone(),
            call_key: c.key.clone(),
            resolved_path: c.resolved_path.clone(),
            while_waiting: crate::core::approvals::WhileWaiting::default(),
        });
        let authorized = core::authorize_reported(
            &self.state,
            token,
            tool,
            question.call_id.map(str::to_owned),
            call.as_ref(),
        )
        .await
        .map_err(refused)?;
        Ok(Authorized {
            fence: Some(std::time::Duration::from_millis(
                u64::try_from(authorized.fence_in_ms).unwrap_or(0),
            )),
            network_asks: authorized.network_asks,
        })
    }

    async fn record(
        &self,
        token: &str,
        call: ToolCallRecord,
        call_id: Option<&str>,
    ) -> Result<(), ToolError> {
        core::report(&self.state, token, call, call_id.map(str::to_owned))
            .await
            .map_err(refused)
    }

    async fn authenticate_key(&self, key: &str) -> Result<Principal, ToolError> {
        let key = ApiKey::parse(key.trim()).ok_or_else(|| {
            refused(ServiceError::BadCredential(
                "the API key is malformed (expected chorus_<id>_<secret>)".to_owned(),
            ))
        })?;
        self.state.auth.principal(&key).await.map_err(refused)
    }

    /// The embedded tool-exec answers while the orchestrator's database does.
    async fn ready(&self) -> Result<(), String> {
        self.state.store.ping().await.map_err(|e| e.to_string())
    }

    async fn call_orchestration(
        &self,
        token: &str,
        tool: &str,
        arguments: Map<String, Value>,
        progress: &mut (dyn for<'p> FnMut(&'p HandoffProgress) + Send),
    ) -> Result<ToolOutcome, ToolError> {
        if tool == "handoff" {
            return self.handoff(token, &arguments, progress).await;
        }
        let verified = self
            .state
            .verifier
            .verify_token(token)
            .map_err(|e| refused(e.into()))?;
        let run = run_of_token(&self.state, &verified)
            .await
            .map_err(refused)?;
        let called = self
            .tools
            .call(
                &run,
                tool,
                Value::Object(arguments),
                crate::core::approvals::WhileWaiting::default(),
            )
            .await
            .map_err(refused)?;
        Ok(ToolOutcome {
            output: called.output,
            error: None,
            metadata: Map::from_iter([("duration_ms".to_owned(), called.duration_ms.into())]),
        })
    }
}
