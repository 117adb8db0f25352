use std::future::Future;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::{EventHub, Subscription};
use crate::domain::{Event, EventKind, TaskId, TaskStatus};

/// Most events read from the store per round trip while replaying (the store
/// also bounds a batch by bytes).
const REPLAY_BATCH: u32 = 500;

/// Where committed events are read from (the store).
pub trait EventSource: Send + Sync {
    type Error: Send;
    /// Events of `task` with a sequence number above `after`, in order, at most
    /// `limit`, maybe fewer (large events make short batches): only an empty
    /// batch means there are no more.
    fn events_after(
        &self,
        task: TaskId,
        after: u64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Event>, Self::Error>> + Send;
    /// Whether nothing more will be recorded for the task: it is completed,
    /// failed or canceled and every one of its runs has ended.
    fn settled(&self, task: TaskId) -> impl Future<Output = Result<bool, Self::Error>> + Send;
}

/// Why a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEnd {
    /// The task reached a final status and its runs ended (and the caller did
    /// not ask to follow).
    TaskFinished,
    /// The receiver went away.
    ReceiverGone,
    /// The service is shutting down.
    Cancelled,
    /// Reading the store failed; the error was sent to the receiver.
    SourceFailed,
}

/// Sends the task's events after `after` into `tx`: first what the store has,
/// then each new event as it is committed. Every event is sent exactly once and
/// in order. Ends once the task is settled — in a final status with all its runs
/// ended, so its last events (the run's end after the report that completed the
/// task) are included — unless `follow`; also when `tx`'s receiver is dropped or
/// `cancel` fires.
pub async fn watch_task<S: EventSource>(
    source: &S,
    hub: &Arc<EventHub>,
    task: TaskId,
    after: u64,
    follow: bool,
    tx: mpsc::Sender<Result<Event, S::Error>>,
    cancel: CancellationToken,
) -> WatchEnd {
    // Subscribe before the first read: an event committed between the read and the
    // subscription would otherwise be missed.
    let mut live = hub.subscribe(task);
    let mut cursor = after;
    loop {
        // A task settled before this replay has all its events in the store: after
        // the replay there is nothing left to wait for.
        let settled_before_replay = if follow {
            false
        } else {
            match source.settled(task).await {
                Ok(settled) => settled,
                Err(e) => return failed(&tx, e).await,
            }
        };
        let replayed_an_end = match replay(source, task, &mut cursor, &tx).await {
            Ok(replayed_an_end) => replayed_an_end,
            Err(end) => return end,
        };
        if settled_before_replay {
            return WatchEnd::TaskFinished;
        }
        // An end committed after the check above was replayed: live, it would
        // come again below the cursor and be skipped. Settled now: replay once
        // more (what was committed between the replay and this check, e.g. the
        // run's own end after the report that completed the task), then end.
        if replayed_an_end && !follow {
            match source.settled(task).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return failed(&tx, e).await,
            }
        }
        let following = Following {
            source,
            task,
            follow,
            tx: &tx,
            cancel: &cancel,
        };
        if let Some(end) = following.live(&mut live, &mut cursor).await {
            return end;
        }
    }
}

/// Sends the store's failure to the receiver: the watch ends.
async fn failed<E>(tx: &mpsc::Sender<Result<Event, E>>, error: E) -> WatchEnd {
    let _ = tx.send(Err(error)).await;
    WatchEnd::SourceFailed
}

/// Replays what the store has after `cursor` (moved along), until a batch is
/// empty; whether an event that may settle the task was among them.
async fn replay<S: EventSource>(
    source: &S,
    task: TaskId,
    cursor: &mut u64,
    tx: &mpsc::Sender<Result<Event, S::Error>>,
) -> Result<bool, WatchEnd> {
    let mut replayed_an_end = false;
    loop {
        let batch = match source.events_after(task, *cursor, REPLAY_BATCH).await {
            Ok(batch) => batch,
            Err(e) => return Err(failed(tx, e).await),
        };
        if batch.is_empty() {
            return Ok(replayed_an_end);
        }
        for event in batch {
            *cursor = event.sequence;
            replayed_an_end |= ends_task(&event) || ends_run(&event);
            if tx.send(Ok(event)).await.is_err() {
                return Err(WatchEnd::ReceiverGone);
            }
        }
    }
}

/// A watch following live events.
struct Following<'a, S: EventSource> {
    source: &'a S,
    task: TaskId,
    follow: bool,
    tx: &'a mpsc::Sender<Result<Event, S::Error>>,
    cancel: &'a CancellationToken,
}

impl<S: EventSource> Following<'_, S> {
    /// Sends live events that continue the cursor until one does not (a gap,
    /// a lagging receiver) or one settles the task: None, replay again. Some:
    /// how the watch ends.
    async fn live(&self, live: &mut Subscription, cursor: &mut u64) -> Option<WatchEnd> {
        loop {
            let received = tokio::select! {
                () = self.cancel.cancelled() => return Some(WatchEnd::Cancelled),
                () = self.tx.closed() => return Some(WatchEnd::ReceiverGone),
                received = live.recv() => received,
            };
            match received {
                Ok(event) if event.sequence <= *cursor => {}
                Ok(event) if event.sequence == *cursor + 1 => {
                    *cursor = event.sequence;
                    let may_settle = !self.follow && (ends_task(&event) || ends_run(&event));
                    if self.tx.send(Ok(event)).await.is_err() {
                        return Some(WatchEnd::ReceiverGone);
                    }
                    if may_settle {
                        match self.source.settled(self.task).await {
                            Ok(true) => return None,
                            Ok(false) => {}
                            Err(e) => return Some(failed(self.tx, e).await),
                        }
                    }
                }
                // A gap (an event committed before we subscribed is still in the
                // store) or a lagging receiver: replay from the store.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => return None,
                Err(broadcast::error::RecvError::Closed) => return Some(WatchEnd::Cancelled),
            }
        }
    }
}

/// True for an event that ends a run.
fn ends_run(event: &Event) -> bool {
    matches!(
        event.kind,
        EventKind::AgentCompleted
            | EventKind::RunFailed
            | EventKind::RunCanceled
            | EventKind::RunInterrupted
    )
}

/// True for a status change into completed, failed or canceled.
fn ends_task(event: &Event) -> bool {
    event.kind == EventKind::StatusChanged
        && event
            .data
            .get("to")
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse::<TaskStatus>().ok())
            .is_some_and(TaskStatus::is_terminal)
}

#[cfg(test)]
mod tests;
