//! A2A errors: a gRPC status carrying `google.rpc.ErrorInfo` in the
//! `a2a-protocol.org` domain, whose reason A2A clients turn into their
//! typed errors (TaskNotFoundError, InvalidParamsError, ...).

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::error::ServiceError;
use crate::store::StoreError;

/// The error domain A2A clients read.
const DOMAIN: &str = "a2a-protocol.org";

/// The A2A error reasons this face gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    TaskNotFound,
    TaskNotCancelable,
    UnsupportedOperation,
    ContentTypeNotSupported,
    InvalidParams,
    VersionNotSupported,
    Internal,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Self::TaskNotFound => "TASK_NOT_FOUND",
            Self::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            Self::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            Self::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            Self::InvalidParams => "INVALID_PARAMS",
            Self::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            Self::Internal => "INTERNAL_ERROR",
        }
    }

    /// The gRPC code the A2A binding gives the reason.
    fn code(self) -> Code {
        match self {
            Self::TaskNotFound => Code::NotFound,
            Self::TaskNotCancelable | Self::UnsupportedOperation | Self::VersionNotSupported => {
                Code::FailedPrecondition
            }
            Self::ContentTypeNotSupported | Self::InvalidParams => Code::InvalidArgument,
            Self::Internal => Code::Internal,
        }
    }
}

/// An A2A error with `message`.
pub fn a2a(reason: Reason, message: impl Into<String>) -> Status {
    error(reason.code(), reason, message)
}

fn error(code: Code, reason: Reason, message: impl Into<String>) -> Status {
    let details = ErrorDetails::with_error_info(reason.as_str(), DOMAIN, HashMap::new());
    Status::with_error_details(code, message, details)
}

/// The request header an A2A client names its protocol version with.
pub const VERSION_HEADER: &str = "a2a-version";

/// Refuses a call whose client speaks another major version of A2A than
/// the one served (VERSION_NOT_SUPPORTED); a call that names none is taken
/// as of the version served (grpcurl and older gRPC clients send none).
#[allow(clippy::result_large_err)] // tonic's interceptor signature
pub fn check_version(request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
    let Some(asked) = request.metadata().get(VERSION_HEADER) else {
        return Ok(request);
    };
    let asked = asked.to_str().unwrap_or("?").trim();
    let served = super::PROTOCOL_VERSION;
    let major = |v: &str| v.split('.').next().map(str::to_owned);
    if asked.is_empty()
        || (major(asked) == major(served) && asked.split('.').all(|p| p.parse::<u32>().is_ok()))
    {
        return Ok(request);
    }
    Err(a2a(
        Reason::VersionNotSupported,
        format!(
            "A2A-Version '{asked}' is not served here: this agent serves A2A {served} (send A2A-Version: {served})"
        ),
    ))
}

/// What the core said, as an A2A error: an unknown task is TASK_NOT_FOUND,
/// a refusal of the call's input INVALID_PARAMS (INVALID_ARGUMENT, whatever
/// the core's code), a task that cannot do what was asked in its state
/// UNSUPPORTED_OPERATION (TASK_NOT_CANCELABLE when `canceling`); otherwise
/// the code is the Chorus API's own.
pub fn from_core(e: ServiceError, canceling: bool) -> Status {
    let code = e.code();
    let message = e.to_string();
    let reason = match (&e, code) {
        (ServiceError::Store(StoreError::NotFound { what: "task", .. }), _) => Reason::TaskNotFound,
        (_, Code::InvalidArgument | Code::NotFound | Code::OutOfRange | Code::AlreadyExists) => {
            Reason::InvalidParams
        }
        (_, Code::FailedPrecondition) if canceling => Reason::TaskNotCancelable,
        (_, Code::FailedPrecondition) => Reason::UnsupportedOperation,
        (_, Code::Internal | Code::Unknown | Code::DataLoss) => Reason::Internal,
        // Unavailable, exhausted, deadline, credentials: the gRPC status says it.
        _ => return Status::new(code, message),
    };
    let code = match reason {
        Reason::InvalidParams => Code::InvalidArgument,
        _ => code,
    };
    error(code, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(version: &str) -> tonic::Request<()> {
        let mut request = tonic::Request::new(());
        request
            .metadata_mut()
            .insert(VERSION_HEADER, version.parse().expect("ascii"));
        request
    }

    #[test]
    fn a_client_of_another_major_version_is_told_the_one_served() {
        for taken in ["1.0", "1", "1.0.2", "1.1"] {
            assert!(check_version(asking(taken)).is_ok(), "{taken}");
        }
        assert!(check_version(tonic::Request::new(())).is_ok());
        for refused in ["9.9", "0.3", "one", "1.x"] {
            let status = check_version(asking(refused)).expect_err(refused);
            assert_eq!(status.code(), Code::FailedPrecondition, "{refused}");
            assert!(status.message().contains("A2A 1.0"), "{}", status.message());
            let details = status.get_error_details();
            assert_eq!(
                details.error_info().map(|i| i.reason.as_str()),
                Some("VERSION_NOT_SUPPORTED")
            );
        }
    }
}
