//! Typed configuration of tool-exec, validated once at start.

use std::time::Duration;

use std::sync::Arc;

use chorus_auth::tls::{PeerRoles, ServerTls};
use chorus_run_token::RunTokenVerifier;
use chorus_serve::ServeConfig;

use crate::gate::RunGate;

/// Resource limits applied to every tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file file.read, file.patch and file.search will load.
    pub max_file_bytes: u64,
    /// Largest content written by file.create, file.write and file.patch.
    pub max_write_bytes: u64,
    /// Largest tool output (read content, bash stdout and stderr each, diff text).
    pub max_output_bytes: usize,
    /// Most entries file.list returns.
    pub max_list_entries: usize,
    /// Upper bound on file.search's max_results.
    pub max_search_results: u32,
    /// bash timeout when the call gives none.
    pub bash_default_timeout: Duration,
    /// Largest timeout a bash call may ask for.
    pub bash_max_timeout: Duration,
    /// Timeout of every git command.
    pub git_timeout: Duration,
    /// Deadline of every tool call. bash and git calls get more when their own
    /// timeouts are longer (see [`crate::runner`]).
    pub tool_timeout: Duration,
    /// Whether file tools read regular files that have more than one link.
    pub hard_links: crate::sandbox::HardLinks,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_file_bytes: chorus_proto::limits::DEFAULT_CONTENT_BYTES,
            max_write_bytes: chorus_proto::limits::DEFAULT_CONTENT_BYTES,
            max_output_bytes: 256 * 1024,
            max_list_entries: 10_000,
            max_search_results: 10_000,
            bash_default_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            git_timeout: Duration::from_secs(120),
            tool_timeout: Duration::from_secs(120),
            hard_links: crate::sandbox::HardLinks::Refuse,
        }
    }
}

impl Limits {
    /// The largest gRPC message these limits make: one that carries a whole
    /// write, a whole file, or both of bash's streams (see
    /// [`chorus_proto::limits::message_bytes`]).
    pub fn message_bytes(&self) -> usize {
        let output = u64::try_from(self.max_output_bytes)
            .unwrap_or(u64::MAX)
            .saturating_mul(2);
        chorus_proto::limits::message_bytes(
            self.max_write_bytes.max(self.max_file_bytes).max(output),
        )
    }

    /// What a caller over [`Limits::message_bytes`] is told to do.
    pub fn message_hint(&self) -> String {
        format!(
            "a call carries at most {} bytes of file content (--max-write-bytes): send less",
            self.max_write_bytes
        )
    }
}

/// Everything the service needs to run.
#[derive(Debug, Clone)]
pub struct ToolExecConfig {
    /// Verifies run tokens (holds only the public key).
    pub verifier: RunTokenVerifier,
    /// Where bash and git run: the run sandbox (see `chorus_sandbox`).
    pub processes: chorus_sandbox::Sandbox,
    pub limits: Limits,
    /// Limits and timeouts of calls, keepalive, health checks, the drain and
    /// the grace of a shutdown.
    pub serve: ServeConfig,
    /// Checks runs with the orchestrator and records calls in task history. None:
    /// the token alone decides (standalone development use).
    pub gate: Option<Arc<dyn RunGate>>,
    /// TLS on the listener; None: plaintext.
    pub tls: Option<ServerTls>,
    /// Client certificates that act with a role.
    pub peers: PeerRoles,
    /// The MCP endpoint (Streamable HTTP) beside the gRPC port; None: off.
    pub mcp: Option<crate::mcp::McpFace>,
}

impl ToolExecConfig {
    pub fn new(verifier: RunTokenVerifier, processes: chorus_sandbox::Sandbox) -> Self {
        Self {
            verifier,
            processes,
            limits: Limits::default(),
            serve: ServeConfig::default(),
            gate: None,
            tls: None,
            peers: PeerRoles::default(),
            mcp: None,
        }
    }
}
