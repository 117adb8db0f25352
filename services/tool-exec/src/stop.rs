//! When a tool call stops early: its deadline passed, its caller went away, or
//! tool-exec is shutting down.
//!
//! Every call gets a [`CallStop`]. The runner fires it for the deadline and for
//! a caller that left; the service's shutdown token, its parent, fires it on
//! shutdown. Async work waits on [`CallStop::token`] (bash and git kill their
//! processes); blocking work cannot be aborted from outside, so its loops call
//! [`CallStop::check`], one atomic load, and return the stop's error.
//!
//! A call that changes files passes [`CallStop::commit`] right before the
//! change is made. Before that point a stop abandons the call and it changes
//! nothing; after it the change is made and reported, whatever fires later.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::ToolError;

/// Why a call stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The call ran past its deadline.
    Deadline,
    /// The caller stopped waiting for the answer (the client went away).
    CallerLeft,
    /// tool-exec is shutting down.
    ShuttingDown,
    /// The run ended (or its driver lost it) while the call ran.
    RunEnded,
}

/// Where a call stands with respect to its change.
const RUNNING: u8 = 0;
/// The call passed [`CallStop::commit`]: its change is being made.
const COMMITTED: u8 = 1;
/// The call was stopped before its change: it may not make one any more.
const ABANDONED: u8 = 2;

/// The stop of one tool call; clones share it.
#[derive(Debug, Clone)]
pub struct CallStop {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    tool: &'static str,
    deadline: Duration,
    /// Fires when the call must stop, whatever the reason.
    token: CancellationToken,
    /// Set by [`CallStop::stop`]; unset when the shutdown token fired.
    reason: OnceLock<StopReason>,
    state: AtomicU8,
}

impl CallStop {
    /// The stop of a call of `tool` with a `deadline`; it fires too when
    /// `shutdown` does.
    pub fn new(shutdown: &CancellationToken, tool: &'static str, deadline: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                tool,
                deadline,
                token: shutdown.child_token(),
                reason: OnceLock::new(),
                state: AtomicU8::new(RUNNING),
            }),
        }
    }

    /// Stops the call for `reason` (the first reason given is kept).
    pub fn stop(&self, reason: StopReason) {
        let _ = self.inner.reason.set(reason);
        self.inner.token.cancel();
    }

    /// Fires when the call must stop.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// The time the call is given.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Why the call stopped, once it did.
    pub fn reason(&self) -> Option<StopReason> {
        self.is_stopped().then(|| {
            self.inner
                .reason
                .get()
                .copied()
                .unwrap_or(StopReason::ShuttingDown)
        })
    }

    /// The stop's error once the call is stopped: loops in blocking work call
    /// this between steps.
    pub fn check(&self) -> Result<(), ToolError> {
        if self.is_stopped() {
            return Err(self.error());
        }
        Ok(())
    }

    /// The error a stopped call answers with.
    pub fn error(&self) -> ToolError {
        let tool = self.inner.tool;
        match self.reason() {
            Some(StopReason::Deadline) => ToolError::DeadlineExceeded(format!(
                "{tool} ran past its {}-second deadline and was stopped; nothing was changed; \
                 ask for less in one call (fewer patches, a narrower path or pattern)",
                self.inner.deadline.as_secs()
            )),
            Some(StopReason::CallerLeft) => ToolError::Cancelled(format!(
                "the caller went away before {tool} finished; it was stopped and nothing was changed"
            )),
            Some(StopReason::RunEnded) => ToolError::Aborted(format!(
                "the run ended while {tool} ran (or its orchestrator lost it); {tool} was stopped"
            )),
            Some(StopReason::ShuttingDown) | None => ToolError::ShuttingDown,
        }
    }

    /// Called right before the call changes anything. Once the call is stopped
    /// it is refused with the stop's error; once it passed, the change is made
    /// and reported even if the call is stopped meanwhile. Calling it again
    /// after it passed is a no-op.
    pub fn commit(&self) -> Result<(), ToolError> {
        if self.is_stopped() && self.abandon() {
            return Err(self.error());
        }
        match self.inner.state.compare_exchange(
            RUNNING,
            COMMITTED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) | Err(COMMITTED) => Ok(()),
            Err(_) => Err(self.error()),
        }
    }

    /// Gives the call up after it stopped: true when it had not committed (it
    /// can no longer change anything), false when its change is being made.
    pub fn abandon(&self) -> bool {
        match self.inner.state.compare_exchange(
            RUNNING,
            ABANDONED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) | Err(ABANDONED) => true,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
impl CallStop {
    /// A signal nobody fires, for tests of the work itself.
    pub(crate) fn idle() -> Self {
        Self::new(&CancellationToken::new(), "test", Duration::from_secs(3600))
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn signal() -> (CancellationToken, CallStop) {
        let shutdown = CancellationToken::new();
        let stop = CallStop::new(&shutdown, "file.patch", Duration::from_secs(7));
        (shutdown, stop)
    }

    #[test]
    fn a_running_call_passes_its_checks() {
        let (_shutdown, stop) = signal();
        assert!(stop.check().is_ok());
        assert_eq!(stop.reason(), None);
    }

    #[test]
    fn each_reason_has_its_own_code_and_message() {
        let (_shutdown, stop) = signal();
        stop.stop(StopReason::Deadline);
        let err = stop.check().expect_err("stopped");
        assert_eq!(err.code(), Code::DeadlineExceeded);
        assert!(
            err.to_string()
                .contains("file.patch ran past its 7-second deadline")
        );

        let (_shutdown, stop) = signal();
        stop.stop(StopReason::CallerLeft);
        let err = stop.check().expect_err("stopped");
        assert_eq!(err.code(), Code::Cancelled);
        assert!(err.to_string().contains("the caller went away"), "{err}");

        let (shutdown, stop) = signal();
        shutdown.cancel();
        assert_eq!(stop.reason(), Some(StopReason::ShuttingDown));
        assert_eq!(stop.check().expect_err("stopped").code(), Code::Unavailable);
    }

    #[test]
    fn the_first_reason_is_kept() {
        let (_shutdown, stop) = signal();
        stop.stop(StopReason::CallerLeft);
        stop.stop(StopReason::Deadline);
        assert_eq!(stop.reason(), Some(StopReason::CallerLeft));
    }

    #[test]
    fn a_stopped_call_cannot_commit() {
        let (_shutdown, stop) = signal();
        stop.stop(StopReason::Deadline);
        assert_eq!(
            stop.commit().expect_err("stopped").code(),
            Code::DeadlineExceeded
        );
        assert!(stop.abandon(), "it stays abandoned");
    }

    #[test]
    fn an_abandoned_call_cannot_commit() {
        let (_shutdown, stop) = signal();
        assert!(stop.abandon());
        assert!(stop.commit().is_err());
    }

    #[test]
    fn a_committed_call_is_not_abandoned() {
        let (_shutdown, stop) = signal();
        stop.commit().expect("running");
        stop.commit().expect("a second commit is a no-op");
        stop.stop(StopReason::CallerLeft);
        assert!(!stop.abandon(), "its change is being made");
        stop.commit().expect("a committed call goes on");
    }
}
