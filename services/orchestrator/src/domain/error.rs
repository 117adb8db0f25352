/// A domain rule was broken. Each variant maps to one gRPC code in the adapter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// A value that does not satisfy its rule (INVALID_ARGUMENT).
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// A transition the state machine does not allow (FAILED_PRECONDITION).
    #[error("{0}")]
    Transition(String),
    /// Something that may happen once already happened (ALREADY_EXISTS).
    #[error("{0}")]
    AlreadyDone(String),
    /// The run may not call this tool (PERMISSION_DENIED).
    #[error("{0}")]
    NotAllowed(String),
    /// The run cannot act now: still starting, waiting on a handoff, or ended
    /// (FAILED_PRECONDITION).
    #[error("{0}")]
    RunNotActive(String),
    /// A run token whose claims are not its run's: it was not minted for the
    /// run it names (UNAUTHENTICATED).
    #[error("{0}")]
    NotItsToken(String),
}

impl DomainError {
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
