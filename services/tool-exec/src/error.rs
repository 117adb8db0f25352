//! The one error type of tool-exec and its one mapping to gRPC status codes.

use std::path::PathBuf;

use chorus_run_token::TokenError;
use tonic::{Code, Status};

/// Everything that can stop a tool call. Messages are lowercase, name the thing
/// that was wrong and, where useful, what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Unauthenticated(#[from] TokenError),
    #[error("tool '{tool}' is not allowed for agent '{agent}'; its allowed tools are: {allowed}")]
    NotAllowed {
        tool: String,
        agent: String,
        allowed: String,
    },
    #[error(
        "{tool} needs the '{grant}' grant, which agent '{agent}' does not have; add \"{grant}\" to its allowed tools"
    )]
    GrantMissing {
        tool: String,
        grant: &'static str,
        agent: String,
    },
    #[error("unknown tool '{0}'; call {{\"tool\":\"help\"}} to list the tools")]
    UnknownTool(String),
    #[error("tool '{tool}' is executed by the {executor}, not by tool-exec")]
    WrongService {
        tool: String,
        executor: &'static str,
    },
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments { tool: String, message: String },
    #[error("path '{path}' is outside the workspace root")]
    OutsideWorkspace { path: String },
    #[error("path '{path}' is not allowed: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("path '{path}' is inside .git; change the repository through the git tools")]
    ProtectedPath { path: String },
    #[error("'{path}' does not exist")]
    NotFound { path: String },
    #[error("'{path}' already exists; use file.write or file.patch to change it")]
    AlreadyExists { path: String },
    #[error("'{path}' is a directory, not a file")]
    IsDirectory { path: String },
    #[error("'{path}' is not a directory")]
    NotADirectory { path: String },
    #[error(
        "'{path}' is {kind}, not a regular file; file tools read and change regular files only"
    )]
    NotAFile { path: String, kind: &'static str },
    #[error(
        "'{path}' is {size} bytes, over the {limit}-byte limit; read a part of it with bash (head, sed -n) or find lines with file.search"
    )]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("'{path}' is a binary file; only UTF-8 text files can be read or edited")]
    Binary { path: String },
    #[error("'{path}' is not valid UTF-8 text (first bad byte at offset {offset})")]
    NotUtf8 { path: String, offset: usize },
    #[error("patch {index} of {total} failed: {reason}; no change was written")]
    PatchFailed {
        index: usize,
        total: usize,
        reason: String,
    },
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("workspace root {root} is not usable: {reason}")]
    WorkspaceUnavailable { root: PathBuf, reason: String },
    #[error("workspace root '{given}' does not match this run's workspace '{expected}'")]
    RootMismatch { given: String, expected: String },
    /// A bounded operation (a call, a git command) ran past its time limit and was stopped.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// The caller went away; the call was stopped.
    #[error("{0}")]
    Cancelled(String),
    /// The run ended while the call ran; the call was stopped.
    #[error("{0}")]
    Aborted(String),
    /// The call's processes went past a limit of their run (written bytes,
    /// memory without a cgroup) and were killed.
    #[error("{0}")]
    OverLimit(String),
    /// The orchestrator refused the call (run not active, tool not allowed, ...).
    #[error("{message}")]
    Refused { code: Code, message: String },
    #[error("{0}")]
    GateUnavailable(String),
    #[error("tool-exec is shutting down; retry on another instance")]
    ShuttingDown,
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl ToolError {
    /// The gRPC code for this error. One reviewed table.
    pub fn code(&self) -> Code {
        match self {
            Self::Unauthenticated(_) => Code::Unauthenticated,
            Self::NotAllowed { .. }
            | Self::GrantMissing { .. }
            | Self::OutsideWorkspace { .. }
            | Self::ProtectedPath { .. } => Code::PermissionDenied,
            Self::UnknownTool(_)
            | Self::InvalidArguments { .. }
            | Self::InvalidPath { .. }
            | Self::IsDirectory { .. }
            | Self::NotADirectory { .. }
            | Self::NotAFile { .. }
            | Self::RootMismatch { .. } => Code::InvalidArgument,
            Self::NotFound { .. } => Code::NotFound,
            Self::AlreadyExists { .. } => Code::AlreadyExists,
            Self::WrongService { .. }
            | Self::TooLarge { .. }
            | Self::Binary { .. }
            | Self::NotUtf8 { .. }
            | Self::PatchFailed { .. }
            | Self::FailedPrecondition(_)
            | Self::WorkspaceUnavailable { .. } => Code::FailedPrecondition,
            Self::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Self::Cancelled(_) => Code::Cancelled,
            Self::Aborted(_) => Code::Aborted,
            Self::OverLimit(_) => Code::ResourceExhausted,
            Self::Refused { code, .. } => *code,
            Self::ShuttingDown | Self::GateUnavailable(_) => Code::Unavailable,
            Self::Io { .. } | Self::Internal(_) => Code::Internal,
        }
    }

    /// Wraps an unexpected I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<ToolError> for Status {
    fn from(err: ToolError) -> Self {
        Status::new(err.code(), err.to_string())
    }
}
