//! The embedded tool-exec's gate: the checks and records AgentTools does for a
//! separate tool-exec, called in-process (no loopback gRPC, no service key).

use chorus_auth::{ApiKey, Principal};
use chorus_tool_exec::ToolError;
use chorus_tool_exec::gate::{Authorized, RunGate, ToolCallRecord};

use crate::error::ServiceError;
use crate::grpc::agent_tools::{authorize_reported, report};
use crate::state::AppState;

/// [`RunGate`] over this process's own state.
#[derive(Debug, Clone)]
pub struct InProcessGate {
    state: AppState,
}

impl InProcessGate {
    pub fn new(state: AppState) -> Self {
        Self { state }
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
        call_id: Option<&str>,
    ) -> Result<Authorized, ToolError> {
        let fence = authorize_reported(&self.state, token, tool, call_id.map(str::to_owned))
            .await
            .map_err(refused)?;
        Ok(Authorized {
            fence: Some(std::time::Duration::from_millis(
                u64::try_from(fence).unwrap_or(0),
            )),
        })
    }

    async fn record(
        &self,
        token: &str,
        call: ToolCallRecord,
        call_id: Option<&str>,
    ) -> Result<(), ToolError> {
        report(&self.state, token, call, call_id.map(str::to_owned))
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
}
