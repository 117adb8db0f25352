//! Watching a task: its history from a sequence on, then live, until the task
//! reaches a final status (or for as long as the watcher stays, with
//! `follow`), or, when asked, until it waits for a person. The same
//! guarantees for every face: nothing missed, nothing twice, in order.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

use crate::domain::feed::{ChangeFilter, FeedCursor};
use crate::domain::{Event, TaskId};
use crate::error::ServiceError;
use crate::history::{self, FeedItem, WatchEnd};
use crate::state::AppState;
use crate::store::StoreError;

/// Events a watch buffers before its producer waits for the watcher (with
/// the replay's page, what one watch holds for a watcher that does not read).
const WATCH_BUFFER: usize = 4;

/// Starts watching `task` after sequence `after`: NOT_FOUND at once when the
/// task does not exist, OUT_OF_RANGE for a sequence past its last event;
/// otherwise a stream fed by a spawned [`history::watch_task`].
///
/// Who stops what: the producer ends by itself when the task reaches a final
/// status (unless `follow`) or, with `until_needed`, once it waits for a
/// person (see [`crate::domain::TaskStatus::needs_you`]); when the watcher leaves, it drops the stream and
/// with it the receiver, which the producer notices; on shutdown
/// `state.shutdown` fires, its child token stops the producer, and the stream
/// ends with UNAVAILABLE. Nobody else cancels the producer.
pub async fn watch(
    state: &AppState,
    task: TaskId,
    after: u64,
    follow: bool,
    until_needed: bool,
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
        let until = history::Until {
            settled: !follow,
            needed: until_needed,
        };
        history::watch_task(&store, &hub, task, after, until, tx, cancel).await
    });
    Ok(Watch {
        events: ReceiverStream::new(rx),
        producer: Some(producer),
    })
}

/// Starts following the changes of many tasks (the feed) that `filter`
/// keeps, after `after` (from now on when None): NOT_FOUND for a workspace
/// that does not exist, OUT_OF_RANGE for a cursor past the last change. The
/// stream first replays, then says it caught up, then goes on live until the
/// watcher leaves or the service shuts down (UNAVAILABLE: follow again from
/// the last cursor seen).
pub async fn watch_tasks(
    state: &AppState,
    filter: ChangeFilter,
    after: Option<FeedCursor>,
) -> Result<TasksWatch, ServiceError> {
    if let Some(workspace) = filter.workspace {
        state.store.get_workspace(workspace).await?;
    }
    let head = state.store.feed_head().await?;
    let after = after.unwrap_or(head);
    if after > head {
        return Err(ServiceError::OutOfRange(format!(
            "after_cursor {after} is beyond the last change ({head}); follow from {head} or before, or from now on with no cursor"
        )));
    }
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let cancel = state.shutdown.child_token();
    let (store, hub) = (state.store.clone(), state.hub.clone());
    let producer = tokio::spawn(async move {
        let _watching = Watching::new();
        history::watch_changes(&store, &hub, filter, after, tx, cancel).await
    });
    Ok(Watch {
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
pub type TaskWatch = Watch<Event>;

/// The feed's changes as the producer sends them (see [`watch_tasks`]).
pub type TasksWatch = Watch<FeedItem>;

/// What a watch's producer sends, then how it ended.
#[derive(Debug)]
pub struct Watch<T> {
    events: ReceiverStream<Result<T, StoreError>>,
    /// Taken once the event channel has ended and the producer's verdict is read.
    producer: Option<JoinHandle<WatchEnd>>,
}

impl<T> Stream for Watch<T> {
    type Item = Result<T, ServiceError>;

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
                "the orchestrator is shutting down; watch again from the last sequence (or cursor) you saw"
                    .to_owned(),
            ))),
            Ok(_) => None,
            Err(e) => Some(Err(ServiceError::Internal(format!(
                "the watch failed: {e}"
            )))),
        })
    }
}
