//! Watching a task: its history from a sequence on, then live, until the task
//! reaches a final status (or for as long as the watcher stays, with
//! `follow`). The same guarantees for every face: nothing missed, nothing
//! twice, in order.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

use crate::domain::{Event, TaskId};
use crate::error::ServiceError;
use crate::history::{self, WatchEnd};
use crate::state::AppState;
use crate::store::StoreError;

/// Events a watch buffers before its producer waits for the watcher.
const WATCH_BUFFER: usize = 64;

/// Starts watching `task` after sequence `after`: NOT_FOUND at once when the
/// task does not exist, OUT_OF_RANGE for a sequence past its last event;
/// otherwise a stream fed by a spawned [`history::watch_task`].
///
/// Who stops what: the producer ends by itself when the task reaches a final
/// status (unless `follow`); when the watcher leaves, it drops the stream and
/// with it the receiver, which the producer notices; on shutdown
/// `state.shutdown` fires, its child token stops the producer, and the stream
/// ends with UNAVAILABLE. Nobody else cancels the producer.
pub async fn watch(
    state: &AppState,
    task: TaskId,
    after: u64,
    follow: bool,
) -> Result<TaskWatch, ServiceError> {
    let last = state.store.get_task(task).await?.last_sequence;
    // A sequence beyond the last event cannot be waited for: nothing would
    // ever say the caller is ahead.
    if after > last {
        return Err(ServiceError::OutOfRange(format!(
            "after_sequence {after} is beyond task {task}'s last event ({last}); watch from {last} or less"
        )));
    }
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let cancel = state.shutdown.child_token();
    let (store, hub) = (state.store.clone(), state.hub.clone());
    let producer = tokio::spawn(async move {
        let _watching = Watching::new();
        history::watch_task(&store, &hub, task, after, follow, tx, cancel).await
    });
    Ok(TaskWatch {
        events: ReceiverStream::new(rx),
        producer: Some(producer),
    })
}

/// One open watch, counted in the `chorus.watchers` metric while its
/// producer lives.
struct Watching;

impl Watching {
    fn new() -> Self {
        chorus_telemetry::metrics().watchers.add(1, &[]);
        Self
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        chorus_telemetry::metrics().watchers.add(-1, &[]);
    }
}

/// A task's events as the producer sends them; when the producer stopped
/// because of shutdown, one last UNAVAILABLE.
#[derive(Debug)]
pub struct TaskWatch {
    events: ReceiverStream<Result<Event, StoreError>>,
    /// Taken once the event channel has ended and the producer's verdict is read.
    producer: Option<JoinHandle<WatchEnd>>,
}

impl Stream for TaskWatch {
    type Item = Result<Event, ServiceError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(item) = ready!(Pin::new(&mut self.events).poll_next(cx)) {
            return Poll::Ready(Some(item.map_err(ServiceError::from)));
        }
        // The channel ended: the producer has returned (or panicked).
        let Some(producer) = self.producer.as_mut() else {
            return Poll::Ready(None);
        };
        let end = ready!(Pin::new(producer).poll(cx));
        self.producer = None;
        Poll::Ready(match end {
            Ok(WatchEnd::Cancelled) => Some(Err(ServiceError::Unavailable(
                "the orchestrator is shutting down; watch again from the last sequence you saw"
                    .to_owned(),
            ))),
            Ok(_) => None,
            Err(e) => Some(Err(ServiceError::Internal(format!(
                "the watch failed: {e}"
            )))),
        })
    }
}
