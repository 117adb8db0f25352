//! Exit codes and the JSON error printed on stderr.

use std::process::ExitCode;

use serde_json::json;
use tonic::Code;

/// Metadata of a refusal at a service's limit of calls: how long to wait.
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

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
    /// 5: the service could not be reached, is not configured, or is busy
    /// (at its limit of calls: retry after the time its message gives).
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
            // Refused unrun at the service's limit of calls, with a retry hint.
            Code::ResourceExhausted if status.metadata().contains_key(RETRY_PUSHBACK) => {
                Exit::Unavailable
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_service_is_unavailable_and_a_too_large_call_a_failure() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert(RETRY_PUSHBACK, "1000".parse().expect("ascii"));
        let busy = tonic::Status::with_metadata(
            Code::ResourceExhausted,
            "tool-exec is serving its limit of 256 calls at once",
            metadata,
        );
        let failure = Failure::from_status(&busy, "tool-exec");
        assert_eq!(failure.exit, Exit::Unavailable);
        assert_eq!(failure.code, "resource_exhausted");
        let too_large = tonic::Status::resource_exhausted("the request is 17825792 bytes");
        assert_eq!(
            Failure::from_status(&too_large, "tool-exec").exit,
            Exit::ToolFailed
        );
    }
}
