//! How a command ends: its exit code, and the message a person reads.

use tonic::Code;

/// Exit codes. A script can tell how a followed task ended without parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; a followed task completed.
    Ok = 0,
    /// Chorus refused or failed the request, or could not be reached.
    Error = 1,
    /// The command line or the configuration is wrong.
    Usage = 2,
    /// The followed task failed.
    TaskFailed = 3,
    /// The followed task was canceled.
    TaskCanceled = 4,
    /// The followed task waits for a person (answers, a start, a decision).
    NeedsYou = 5,
}

/// What `--help` says of the exit codes.
pub const EXIT_CODES: &str = "Exit codes: 0 done (a followed task completed), 1 Chorus refused or failed the request or could not be reached, 2 wrong command line or configuration, 3 the task failed, 4 the task was canceled, 5 the task waits for you (answer its questions, start it, or decide).";

/// A command that did not end well.
#[derive(Debug)]
pub struct Fail {
    pub exit: Exit,
    pub message: String,
}

impl Fail {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Error,
            message: message.into(),
        }
    }

    /// A call that Chorus answered with an error, or that did not reach it.
    pub fn call(what: &str, status: &tonic::Status) -> Self {
        let message = match status.code() {
            Code::Unavailable
                if status.message().contains("transport")
                    || status.message().contains("connect") =>
            {
                format!(
                    "{what}: cannot reach Chorus ({}); is it running, and is the address right?",
                    status.message()
                )
            }
            Code::Unauthenticated => format!(
                "{what}: the API key was refused ({}); check CHORUS_API_KEY_FILE or the profile's key",
                status.message()
            ),
            Code::PermissionDenied => format!(
                "{what}: not allowed with this key's role ({})",
                status.message()
            ),
            code => format!("{what}: {} ({code:?})", status.message()),
        };
        Self::error(message)
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
