use std::future::Future;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::{EventHub, Subscription};
use crate::domain::{Event, EventKind, TaskId, TaskStatus};

/// Most events read from the store per round trip while replaying (the store
/// also bounds a batch by bytes): what a watch holds while its watcher reads.
const REPLAY_BATCH: u32 = 32;

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
    /// When the task waits for a person (its status needs one, see
    /// [`TaskStatus::needs_you`], and none of its runs is going): its last
    /// sequence. None otherwise.
    fn needs_you(
        &self,
        task: TaskId,
    ) -> impl Future<Output = Result<Option<u64>, Self::Error>> + Send;
}

/// When a watch ends by itself. With neither it follows until the watcher
/// leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Until {
    /// Once the task is final and its runs have ended.
    pub settled: bool,
    /// Once the task waits for a person, after the events that say so.
    pub needed: bool,
}

impl Until {
    /// Never by itself.
    pub const NEVER: Until = Until {
        settled: false,
        needed: false,
    };
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
    /// The task waits for a person (and the caller asked to end there).
    NeedsYou,
}

/// Sends the task's events after `after` into `tx`: first what the store has,
/// then each new event as it is committed. Every event is sent exactly once and
/// in order. Ends, as `until` asks, once the task is settled — in a final
/// status with all its runs ended, so its last events (the run's end after the
/// report that completed the task) are included — or once it waits for a
/// person; also when `tx`'s receiver is dropped or `cancel` fires.
pub async fn watch_task<S: EventSource>(
    source: &S,
    hub: &Arc<EventHub>,
    task: TaskId,
    after: u64,
    until: Until,
    tx: mpsc::Sender<Result<Event, S::Error>>,
    cancel: CancellationToken,
) -> WatchEnd {
    // Subscribe before the first read: an event committed between the read and the
    // subscription would otherwise be missed.
    let mut live = hub.subscribe(task);
    let mut following = Following {
        source,
        task,
        until,
        tx: &tx,
        cancel: &cancel,
        // Unknown until a status change is seen: the store is asked.
        maybe_needed: true,
    };
    let mut cursor = after;
    loop {
        // A task settled before this replay has all its events in the store: after
        // the replay there is nothing left to wait for.
        let settled_before_replay = if until.settled {
            match source.settled(task).await {
                Ok(settled) => settled,
                Err(e) => return failed(&tx, e).await,
            }
        } else {
            false
        };
        let replayed_an_end = match following.replay(&mut cursor).await {
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
        if replayed_an_end && until.settled {
            match source.settled(task).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return failed(&tx, e).await,
            }
        }
        if let Some(end) = following.needed(cursor).await {
            return end;
        }
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

/// A watch following live events.
struct Following<'a, S: EventSource> {
    source: &'a S,
    task: TaskId,
    until: Until,
    tx: &'a mpsc::Sender<Result<Event, S::Error>>,
    cancel: &'a CancellationToken,
    /// Whether the task may be waiting for a person: the last status change
    /// sent entered a status that needs one (or none was seen yet).
    maybe_needed: bool,
}

impl<S: EventSource> Following<'_, S> {
    /// Replays what the store has after `cursor` (moved along), until a batch
    /// is empty; whether an event that may settle the task was among them.
    async fn replay(&mut self, cursor: &mut u64) -> Result<bool, WatchEnd> {
        let mut replayed_an_end = false;
        loop {
            let batch = match self
                .source
                .events_after(self.task, *cursor, REPLAY_BATCH)
                .await
            {
                Ok(batch) => batch,
                Err(e) => return Err(failed(self.tx, e).await),
            };
            if batch.is_empty() {
                return Ok(replayed_an_end);
            }
            for event in batch {
                *cursor = event.sequence;
                replayed_an_end |= ends_task(&event) || ends_run(&event);
                self.saw(&event);
                if self.tx.send(Ok(event)).await.is_err() {
                    return Err(WatchEnd::ReceiverGone);
                }
            }
        }
    }

    /// Notes what a sent event says of whether the task waits for a person.
    fn saw(&mut self, event: &Event) {
        if let Some(status) = event.status_entered() {
            self.maybe_needed = status.needs_you().is_some();
        }
    }

    /// With `until.needed`: Some(NeedsYou) once the task waits for a person
    /// and every event up to `cursor` has been sent.
    async fn needed(&self, cursor: u64) -> Option<WatchEnd> {
        if !self.until.needed || !self.maybe_needed {
            return None;
        }
        match self.source.needs_you(self.task).await {
            Ok(Some(last)) if last <= cursor => Some(WatchEnd::NeedsYou),
            Ok(_) => None,
            Err(e) => Some(failed(self.tx, e).await),
        }
    }

    /// Sends live events that continue the cursor until one does not (a gap,
    /// a lagging receiver) or one settles the task: None, replay again. Some:
    /// how the watch ends.
    async fn live(&mut self, live: &mut Subscription, cursor: &mut u64) -> Option<WatchEnd> {
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
                    let may_settle = self.until.settled && (ends_task(&event) || ends_run(&event));
                    self.saw(&event);
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
                    if let Some(end) = self.needed(*cursor).await {
                        return Some(end);
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
    event.status_entered().is_some_and(TaskStatus::is_terminal)
}

#[cfg(test)]
mod tests;
