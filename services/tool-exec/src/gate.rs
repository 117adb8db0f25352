//! The run gate: before a tool runs, the orchestrator confirms the run is active
//! and may use the tool; after it ran, the orchestrator records it in the task's
//! history. tool-exec verifies the token itself either way; without a gate
//! (standalone, development) the token alone decides.

use std::fmt::Debug;
use std::time::Duration;

use chorus_proto::json;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::orchestrator::v1::{AuthorizeToolCallRequest, RecordToolCallRequest};
use serde_json::Value;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::error::ToolError;

/// Most bytes of a tool's output kept in its history record.
pub const OUTPUT_EXCERPT_BYTES: usize = 2048;

/// One finished tool call, as the task's history records it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub tool: String,
    pub input: Value,
    /// "ok", or the failure's gRPC code name in lower snake case.
    pub status: String,
    pub duration_ms: u64,
    /// The start of the output, or the error message.
    pub output_excerpt: String,
}

/// Asks whether a run may call a tool, and records what it called.
#[tonic::async_trait]
pub trait RunGate: Send + Sync + Debug {
    /// Ok when the run holding `token` is active and may call `tool` now.
    async fn authorize(&self, token: &str, tool: &str) -> Result<(), ToolError>;
    /// Records a finished call in the run's task history.
    async fn record(&self, token: &str, call: ToolCallRecord) -> Result<(), ToolError>;
}

/// The orchestrator's `AgentTools` service as the gate.
#[derive(Debug, Clone)]
pub struct OrchestratorGate {
    client: AgentToolsClient<Channel>,
    addr: String,
}

impl OrchestratorGate {
    /// A gate for the orchestrator at `addr` (`host:port` or a URL). Connects lazily.
    pub fn new(addr: &str) -> Result<Self, ToolError> {
        let url = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let channel = Endpoint::from_shared(url.clone())
            .map_err(|e| {
                ToolError::Internal(format!(
                    "orchestrator address '{addr}' is not a valid URI: {e}"
                ))
            })?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Self {
            client: AgentToolsClient::new(channel),
            addr: url,
        })
    }

    fn request<T>(&self, token: &str, message: T) -> Result<tonic::Request<T>, ToolError> {
        let mut request = tonic::Request::new(message);
        let bearer = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| ToolError::Internal("run token is not valid metadata".to_owned()))?;
        request.metadata_mut().insert("authorization", bearer);
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
    async fn authorize(&self, token: &str, tool: &str) -> Result<(), ToolError> {
        let request = self.request(
            token,
            AuthorizeToolCallRequest {
                tool: tool.to_owned(),
            },
        )?;
        self.client
            .clone()
            .authorize_tool_call(request)
            .await
            .map_err(|s| self.refused(&s))?;
        Ok(())
    }

    async fn record(&self, token: &str, call: ToolCallRecord) -> Result<(), ToolError> {
        let input = match call.input {
            Value::Object(map) => Some(json::to_struct(map)),
            _ => None,
        };
        let request = self.request(
            token,
            RecordToolCallRequest {
                tool: call.tool,
                input,
                status: call.status,
                duration_ms: call.duration_ms,
                output_excerpt: call.output_excerpt,
            },
        )?;
        self.client
            .clone()
            .record_tool_call(request)
            .await
            .map_err(|s| self.refused(&s))?;
        Ok(())
    }
}

/// The first `OUTPUT_EXCERPT_BYTES` of `text`, cut at a character boundary.
pub fn excerpt(text: &str) -> String {
    if text.len() <= OUTPUT_EXCERPT_BYTES {
        return text.to_owned();
    }
    let cut = (0..=OUTPUT_EXCERPT_BYTES)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}…", &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_cut_at_a_character_boundary() {
        assert_eq!(excerpt("short"), "short");
        let long = "é".repeat(OUTPUT_EXCERPT_BYTES);
        let cut = excerpt(&long);
        assert!(cut.len() <= OUTPUT_EXCERPT_BYTES + "…".len());
        assert!(cut.ends_with('…'));
    }
}
