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
            Self::Internal => "INTERNAL_ERROR",
        }
    }

    /// The gRPC code the A2A binding gives the reason.
    fn code(self) -> Code {
        match self {
            Self::TaskNotFound => Code::NotFound,
            Self::TaskNotCancelable | Self::UnsupportedOperation => Code::FailedPrecondition,
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

/// What the core said, as an A2A error: an unknown task is TASK_NOT_FOUND,
/// a refusal of the call's input INVALID_PARAMS, a task that cannot do
/// what was asked in its state UNSUPPORTED_OPERATION (TASK_NOT_CANCELABLE
/// when `canceling`); the code is the Chorus API's own.
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
    error(code, reason, message)
}
