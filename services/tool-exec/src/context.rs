//! What a tool implementation gets: the sandbox, the grant, the limits, and a
//! cancellation token that fires when the service shuts down.

use std::sync::Arc;

use chorus_run_token::RunGrant;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::error::ToolError;
use crate::sandbox::Sandbox;

#[derive(Debug, Clone)]
pub struct ToolContext {
    pub sandbox: Arc<Sandbox>,
    pub grant: Arc<RunGrant>,
    pub limits: Limits,
    /// Where bash and git run.
    pub processes: chorus_sandbox::Sandbox,
    /// Fires on service shutdown: long-running tools stop and clean up.
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// Runs blocking filesystem work off the async threads.
    pub async fn blocking<T, F>(&self, work: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&Sandbox) -> Result<T, ToolError> + Send + 'static,
    {
        let sandbox = Arc::clone(&self.sandbox);
        tokio::task::spawn_blocking(move || work(&sandbox))
            .await
            .map_err(|e| ToolError::Internal(format!("tool task failed: {e}")))?
    }
}

/// A tool's answer: `{output, error?, metadata?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub output: Value,
    /// Set when the tool ran but failed and its output is still worth reading.
    pub error: Option<InBandError>,
    pub metadata: Map<String, Value>,
}

/// An error reported alongside output (e.g. a bash timeout with partial output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InBandError {
    /// gRPC status code name in lower snake case, e.g. "deadline_exceeded".
    pub code: String,
    pub message: String,
}

impl ToolOutcome {
    /// A successful answer with `output` serialized to JSON.
    pub fn ok<T: Serialize>(output: &T) -> Self {
        let output = serde_json::to_value(output)
            .unwrap_or_else(|e| Value::String(format!("unserializable output: {e}")));
        Self {
            output,
            error: None,
            metadata: Map::new(),
        }
    }

    /// Adds one metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    /// Marks the answer as failed while keeping its output.
    #[must_use]
    pub fn with_error(mut self, code: &str, message: impl Into<String>) -> Self {
        self.error = Some(InBandError {
            code: code.to_owned(),
            message: message.into(),
        });
        self
    }
}
