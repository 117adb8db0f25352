//! What a tool implementation gets: the sandbox, the grant, the limits, and the
//! call's stop signal (its deadline, its caller leaving, service shutdown).

use std::sync::Arc;
use std::time::Duration;

use chorus_run_token::RunGrant;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::Limits;
use crate::error::ToolError;
use crate::sandbox::FileRoot;
use crate::stop::CallStop;

/// How long a stopped call waits for its blocking work to wind down.
pub const STOPPED_WORK_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct ToolContext {
    pub sandbox: Arc<FileRoot>,
    pub grant: Arc<RunGrant>,
    pub limits: Limits,
    /// Where bash and git run.
    pub processes: chorus_sandbox::Sandbox,
    /// Fires when the call must stop: long-running tools stop and clean up.
    pub stop: CallStop,
    /// The call's fence, for the processes it starts (see [`crate::watch`]).
    pub fence: Option<std::path::PathBuf>,
    /// Asked before each connection a process of the call makes with the
    /// network grant (the run's approval rules on `network`).
    pub network_questions: Option<chorus_sandbox::NetworkQuestions>,
}

impl ToolContext {
    /// Runs blocking filesystem work off the async threads. The work gets the
    /// call's stop signal to check between steps and to commit a change with.
    ///
    /// When the call is stopped before the work committed a change, the work
    /// can change nothing any more, and the stop's error is the answer. The work
    /// normally notices at its next check and cleans up (a temporary file), and
    /// the answer waits for that; a thread stuck in the kernel is waited for at
    /// most [`STOPPED_WORK_WAIT`]. Work that committed is waited for, and its
    /// own result is the answer.
    pub async fn blocking<T, F>(&self, work: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&FileRoot, &CallStop) -> Result<T, ToolError> + Send + 'static,
    {
        self.stop.check()?;
        let sandbox = Arc::clone(&self.sandbox);
        let stop = self.stop.clone();
        let mut task = tokio::task::spawn_blocking(move || {
            // As the workspace's user, as the run's processes are.
            let _acting = sandbox.act()?;
            work(&sandbox, &stop)
        });
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            () = self.stop.token().cancelled() => {
                if self.stop.abandon() {
                    let _ = tokio::time::timeout(STOPPED_WORK_WAIT, &mut task).await;
                    return Err(self.stop.error());
                }
                task.await
            }
        };
        joined.map_err(|e| ToolError::Internal(format!("tool task failed: {e}")))?
    }
}

/// A tool's answer: `{output, error?, metadata?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub output: Value,
    /// Set when the tool ran but failed and its output is still worth reading.
    pub error: Option<InBandError>,
    pub metadata: Map<String, Value>,
}

/// An error reported alongside output (e.g. a bash timeout with partial output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InBandError {
    /// gRPC status code name in lower snake case, e.g. "deadline_exceeded".
    pub code: String,
    pub message: String,
}

impl ToolOutcome {
    /// A successful answer with `output` serialized to JSON.
    pub fn ok<T: Serialize>(output: &T) -> Self {
        let output = serde_json::to_value(output)
            .unwrap_or_else(|e| Value::String(format!("unserializable output: {e}")));
        Self {
            output,
            error: None,
            metadata: Map::new(),
        }
    }

    /// Adds one metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    /// Marks the answer as failed while keeping its output.
    #[must_use]
    pub fn with_error(mut self, code: &str, message: impl Into<String>) -> Self {
        self.error = Some(InBandError {
            code: code.to_owned(),
            message: message.into(),
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use tokio::sync::oneshot;
    use tonic::Code;

    use crate::stop::StopReason;
    use crate::tools::test_support::Workspace;

    /// Longer than any answer here may take; past it the test fails.
    const ANSWER_WITHIN: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_call_stopped_before_its_change_answers_though_its_work_is_stuck() {
        let ws = Workspace::new();
        let (started, work_started) = oneshot::channel();
        let (release, held) = mpsc::channel::<()>();
        let (committed, commit_result) = oneshot::channel();
        let call = ws.ctx.blocking(move |_, stop| {
            let _ = started.send(());
            // The thread is stuck until the answer is out.
            let _ = held.recv();
            let _ = committed.send(stop.commit().map_err(|e| e.code()));
            Ok(())
        });
        tokio::pin!(call);
        tokio::select! {
            biased;
            answer = &mut call => panic!("answered before the work started: {answer:?}"),
            _ = work_started => {}
        }

        ws.ctx.stop.stop(StopReason::CallerLeft);
        let answer = tokio::time::timeout(ANSWER_WITHIN, call)
            .await
            .expect("answers while the work is still stuck");
        assert_eq!(answer.expect_err("stopped").code(), Code::Cancelled);

        release.send(()).expect("the work waits");
        assert_eq!(
            commit_result.await.expect("the work ends"),
            Err(Code::Cancelled),
            "the work's change is refused"
        );
    }

    #[tokio::test]
    async fn a_call_stopped_after_its_change_committed_answers_with_the_change() {
        let ws = Workspace::new();
        let (committed, work_committed) = oneshot::channel();
        let (release, held) = mpsc::channel::<()>();
        let call = ws.ctx.blocking(move |_, stop| {
            stop.commit()?;
            let _ = committed.send(());
            let _ = held.recv();
            Ok("changed")
        });
        tokio::pin!(call);
        tokio::select! {
            biased;
            answer = &mut call => panic!("answered before the work committed: {answer:?}"),
            _ = work_committed => {}
        }

        ws.ctx.stop.stop(StopReason::CallerLeft);
        // The call sees the stop, and waits for the committed work.
        tokio::select! {
            biased;
            answer = &mut call => panic!("answered before the committed work ended: {answer:?}"),
            () = tokio::task::yield_now() => {}
        }
        release.send(()).expect("the work waits");
        let answer = tokio::time::timeout(ANSWER_WITHIN, call)
            .await
            .expect("answers once the work ended");
        assert_eq!(answer.expect("the change is the answer"), "changed");
    }
}
