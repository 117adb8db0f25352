//! The one error type of the orchestrator's services and its one mapping to
//! gRPC status codes.

use chorus_run_token::TokenError;
use tonic::{Code, Status};

use crate::domain::DomainError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Unauthenticated(#[from] TokenError),
    /// An API key that is unknown, does not verify or was revoked; a run token
    /// whose claims are not its run's.
    #[error("{0}")]
    BadCredential(String),
    /// The call is well-formed but names nothing usable (unknown tool for CallTool, ...).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    /// A position past the end (a sequence number beyond the last event).
    #[error("{0}")]
    OutOfRange(String),
    /// The request is valid but the system is not in a state to do it (an agent
    /// without a provider, no tool-exec configured, ...).
    #[error("{0}")]
    Precondition(String),
    /// A failure of the service itself (a task of it that panicked).
    #[error("{0}")]
    Internal(String),
}

fn domain_code(e: &DomainError) -> Code {
    match e {
        DomainError::Invalid { .. } => Code::InvalidArgument,
        DomainError::Transition(_) | DomainError::RunNotActive(_) => Code::FailedPrecondition,
        DomainError::AlreadyDone(_) => Code::AlreadyExists,
        DomainError::NotAllowed(_) => Code::PermissionDenied,
        DomainError::NotItsToken(_) => Code::Unauthenticated,
    }
}

impl ServiceError {
    /// The gRPC code. One reviewed table.
    pub fn code(&self) -> Code {
        match self {
            Self::Store(StoreError::NotFound { .. }) => Code::NotFound,
            Self::Store(StoreError::AlreadyExists { .. }) => Code::AlreadyExists,
            Self::Store(
                StoreError::ProviderInUse { .. }
                | StoreError::WorkspaceInUse { .. }
                | StoreError::AgentInUse { .. }
                | StoreError::LastAdminKey { .. }
                | StoreError::Undecryptable { .. },
            ) => Code::FailedPrecondition,
            Self::Store(StoreError::Domain(e)) | Self::Domain(e) => domain_code(e),
            Self::Store(StoreError::ReplicaTaken { .. }) => Code::Unavailable,
            Self::Store(StoreError::Corrupt { .. } | StoreError::Database(_)) => Code::Internal,
            Self::Store(StoreError::Unreachable(_)) => Code::Unavailable,
            Self::Unauthenticated(_) | Self::BadCredential(_) => Code::Unauthenticated,
            Self::Invalid(_) => Code::InvalidArgument,
            Self::Unavailable(_) => Code::Unavailable,
            Self::OutOfRange(_) => Code::OutOfRange,
            Self::Precondition(_) => Code::FailedPrecondition,
            Self::Internal(_) => Code::Internal,
        }
    }
}

impl From<ServiceError> for Status {
    fn from(err: ServiceError) -> Self {
        Status::new(err.code(), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_failure_has_its_code() {
        let cases: Vec<(ServiceError, Code)> = vec![
            (
                StoreError::NotFound {
                    what: "task",
                    key: "x".into(),
                }
                .into(),
                Code::NotFound,
            ),
            (
                StoreError::AlreadyExists {
                    what: "agent",
                    key: "x".into(),
                }
                .into(),
                Code::AlreadyExists,
            ),
            (
                StoreError::ProviderInUse {
                    provider: "p".into(),
                    agents: vec![],
                    system_provider: true,
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (
                StoreError::Domain(DomainError::Transition("no".into())).into(),
                Code::FailedPrecondition,
            ),
            (
                DomainError::invalid("name", "bad").into(),
                Code::InvalidArgument,
            ),
            (
                DomainError::AlreadyDone("twice".into()).into(),
                Code::AlreadyExists,
            ),
            (
                DomainError::NotAllowed("no".into()).into(),
                Code::PermissionDenied,
            ),
            (
                ServiceError::Internal("a task failed".into()),
                Code::Internal,
            ),
            (
                DomainError::RunNotActive("ended".into()).into(),
                Code::FailedPrecondition,
            ),
            (
                StoreError::Undecryptable {
                    provider: "openai".into(),
                    reason: "another key".into(),
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (StoreError::Database("boom".into()).into(), Code::Internal),
            (TokenError::Expired.into(), Code::Unauthenticated),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code, "{err}");
        }
    }
}
