//! How agents are run, one module per provider behind one interface.
//!
//! A run is one or two *attempts* (the second resumes the first with a reminder
//! when the agent ended without a completion report). An attempt gets the run's
//! context and a message, reports progress as it goes, and ends with the agent's
//! final output, session id and usage, or with a failure that says what happened.
//!
//! CLI providers (Claude Code, OpenCode) spawn the CLI; its tool calls arrive
//! through chorus-tools at tool-exec and the orchestrator. The API provider
//! (OpenAI-compatible) runs the model's tool loop here and sends each tool call
//! down the same path with the run's token ([`crate::execution::tools`]), so every
//! call is checked, executed and recorded the same way.

pub mod a2a;
pub mod claude;
pub mod claude_flags;
pub mod cli;
pub mod ledger;
pub mod openai;
pub mod opencode;
pub mod prompt;
pub mod provider;

pub use provider::{AttemptEnv, Provider, for_kind};

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::domain::{AgentKind, ModelCall, Name, ProviderKind, RunId, TaskId, ToolTransport};
use crate::execution::RunClock;

/// Most bytes of agent text kept in one progress event.
pub const PROGRESS_TEXT_BYTES: usize = 4096;

/// Something the agent did, as it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Text the agent wrote.
    Text(String),
    /// A tool the agent's model called (for a CLI: its own tool, e.g. Bash).
    ToolUse { tool: String, input: Value },
    /// A call that never ran: refused by the CLI's own permission rules
    /// (`by: "cli"`), or a model's call of an unknown tool or with arguments
    /// that are not JSON (`by: "chorus"`).
    Denied {
        tool: String,
        input: Value,
        reason: String,
        by: &'static str,
    },
    /// The provider named its session (CLI session id).
    Session(String),
    /// A model call failed in a way worth trying again (a 5xx, a 429, no
    /// answer at all): why, which retry this is, and how long it waits first.
    Retry {
        reason: String,
        retry: u32,
        wait_ms: u64,
    },
    /// A model call, as its answer was read: its tokens, and its cost when
    /// the provider reports one per call. Recorded at once, so a run that
    /// ends in any way keeps it.
    ModelCall(ModelCall),
    /// A model call was sent (`key` names it until it is answered): recorded
    /// at once with `estimate`, so a stop or a crash before its answer is
    /// read leaves it counted.
    CallSent { key: String, estimate: ModelCall },
    /// The answer of the call sent as `key` (else a call of its own).
    CallAnswered { key: String, call: ModelCall },
    /// The provider's totals for an attempt's `calls` (Claude Code's result
    /// line: `total_cost_usd`, 0 when absent, and its token `usage`), which
    /// correct what was recorded of them.
    AttemptTotal {
        reported_pico_usd: u64,
        tokens: ModelCall,
        calls: Vec<ModelCall>,
    },
}

/// The provider settings a run uses (the API key included: only runs read it).
#[derive(Clone)]
pub struct ProviderSettings {
    pub name: Name,
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub tool_transport: ToolTransport,
}

impl ProviderSettings {
    /// What its kind does for a run.
    pub fn provider(&self) -> &'static dyn Provider {
        for_kind(self.kind)
    }
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .field("tool_transport", &self.tool_transport)
            .finish()
    }
}

/// The catalog name of a tool a CLI names `<prefix><wire name>` (its MCP
/// tools: `mcp__chorus__file_read`, `chorus_file_read`), for progress and
/// records; any other name as it is (`Bash`, `WebSearch`).
pub fn catalog_name(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix)
        .and_then(chorus_catalog::by_wire_name)
        .map_or_else(|| name.to_owned(), |spec| spec.name.to_owned())
}

/// Everything about a run that its attempts share.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub run_id: RunId,
    /// The epoch this driver writes as (see `Run::epoch`).
    pub epoch: u32,
    /// The run was taken over from a replica that died or shut down: its
    /// session is resumed.
    pub resumed: bool,
    /// What was left of its task's cost limit when it started, in millionths
    /// of a US dollar: a CLI that has a limit of its own gets it (Claude
    /// Code's `--max-budget-usd`), besides the server's.
    pub cost_left_pico_usd: Option<u64>,
    pub task_id: TaskId,
    pub agent: Name,
    pub agent_kind: AgentKind,
    pub provider: ProviderSettings,
    pub model: Option<String>,
    /// The run's granted tools (profiles expanded, always-granted included).
    pub tools: Vec<String>,
    /// The agent's egress list when the run opened (what its token carries).
    pub egress: Vec<String>,
    pub system_prompt: String,
    /// The signed run token.
    pub token: String,
    /// `host:port` of tool-exec and of the orchestrator.
    pub tools_addr: String,
    pub orchestrator_addr: String,
    pub workspace_root: PathBuf,
    /// The run's private directory (its HOME for CLIs, generated config).
    pub run_dir: PathBuf,
    /// Who the run's processes run as (the workspace's owner; see
    /// `chorus_sandbox::Sandbox::identity_for`).
    pub identity: chorus_sandbox::Identity,
    /// When the run must be over (the clock stops while it waits for a
    /// handoff), and the timeout that set it.
    pub clock: RunClock,
    pub timeout: Duration,
    pub stop: CancellationToken,
    /// The run's span (its agent process continues it through `TRACEPARENT`).
    pub span: tracing::Span,
}

/// One attempt: the first message, or the reminder resuming a session.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub message: String,
    /// The session to resume (CLIs), when this is not the first attempt.
    pub resume: Option<String>,
}

/// How an attempt ended normally.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptEnd {
    /// The agent's final text, if any.
    pub output: Option<String>,
    pub session_id: Option<String>,
}

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    /// It failed; the message says how (exit code, signal, API error, ...).
    Failed { reason: String, partial: AttemptEnd },
    /// The run's deadline passed.
    TimedOut { reason: String, partial: AttemptEnd },
    /// The run was stopped (cancel or shutdown).
    Stopped { partial: AttemptEnd },
    /// The replica's fence fell: its processes were killed (or not started)
    /// because this replica could not prove it still holds the run. Not the
    /// run's end: it goes on, here or on another replica.
    Fenced { reason: String, partial: AttemptEnd },
}

impl AttemptError {
    pub fn partial(&self) -> &AttemptEnd {
        match self {
            Self::Failed { partial, .. }
            | Self::TimedOut { partial, .. }
            | Self::Fenced { partial, .. }
            | Self::Stopped { partial } => partial,
        }
    }
}

/// Notes the session id a CLI's event names: a change becomes a
/// [`Progress::Session`].
pub fn note_session(
    current: &mut Option<String>,
    named: Option<&str>,
    progress: &mut Vec<Progress>,
) {
    if let Some(session) = named
        && current.as_deref() != Some(session)
    {
        *current = Some(session.to_owned());
        progress.push(Progress::Session(session.to_owned()));
    }
}

/// Cuts agent text for an event, on a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let end = (0..=max)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}…", &text[..end])
}
