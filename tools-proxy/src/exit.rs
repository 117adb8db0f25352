//! Exit codes and the JSON error printed on stderr.

use std::process::ExitCode;

use serde_json::json;
use tonic::Code;

/// What the process exit code tells the calling agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 1: the tool ran and failed (not found, already exists, timed out, ...).
    ToolFailed = 1,
    /// 2: chorus-tools was called wrongly (arguments, environment).
    Usage = 2,
    /// 3: the call was refused (tool not allowed, path outside, bad token).
    Denied = 3,
    /// 4: the tool's arguments were wrong (bad JSON, unknown tool, schema).
    InvalidArguments = 4,
    /// 5: the service could not be reached or is not configured.
    Unavailable = 5,
}

/// A failed call: its exit code and the `{code, message}` printed on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub exit: Exit,
    pub code: String,
    pub message: String,
}

impl Failure {
    pub fn new(exit: Exit, code: &str, message: impl Into<String>) -> Self {
        Self {
            exit,
            code: code.to_owned(),
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, "usage", message)
    }

    /// A failure from a gRPC status.
    pub fn from_status(status: &tonic::Status, service: &str) -> Self {
        let exit = match status.code() {
            Code::PermissionDenied | Code::Unauthenticated => Exit::Denied,
            Code::InvalidArgument => Exit::InvalidArguments,
            Code::Unavailable => Exit::Unavailable,
            _ => Exit::ToolFailed,
        };
        let message = match status.code() {
            Code::Unavailable
                if status.message().is_empty() || status.message().contains("transport") =>
            {
                format!("{service} is unavailable: {}", status.message())
            }
            _ => status.message().to_owned(),
        };
        Self::new(exit, chorus_proto::code_name(status.code()), message)
    }

    /// Prints the JSON error on stderr and returns the exit code.
    pub fn report(&self) -> ExitCode {
        eprintln!("{}", json!({"code": self.code, "message": self.message}));
        ExitCode::from(self.exit as u8)
    }
}
