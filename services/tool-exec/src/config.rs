//! Typed configuration of tool-exec, validated once at start.

use std::time::Duration;

use std::sync::Arc;

use chorus_run_token::RunTokenVerifier;

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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_file_bytes: 10 * 1024 * 1024,
            max_write_bytes: 10 * 1024 * 1024,
            max_output_bytes: 256 * 1024,
            max_list_entries: 10_000,
            max_search_results: 10_000,
            bash_default_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            git_timeout: Duration::from_secs(120),
        }
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
    /// How long shutdown waits for calls in flight before cutting them off.
    pub shutdown_grace: Duration,
    /// Checks runs with the orchestrator and records calls in task history. None:
    /// the token alone decides (standalone development use).
    pub gate: Option<Arc<dyn RunGate>>,
}

impl ToolExecConfig {
    pub fn new(verifier: RunTokenVerifier, processes: chorus_sandbox::Sandbox) -> Self {
        Self {
            verifier,
            processes,
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(10),
            gate: None,
        }
    }
}
