use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{broadcast, watch};

use crate::domain::feed::TaskChange;
use crate::domain::{Event, TaskId};

/// Events a live watcher may be behind before it re-reads from the store.
const CHANNEL_CAPACITY: usize = 256;
/// Changes a follower of the feed may be behind before it re-reads the store.
const FEED_CAPACITY: usize = 1024;

/// Fans committed events out to the watchers of each task, in this process.
///
/// Events come from this process's commits ([`EventHub::publish`]) and, with
/// several replicas, from the relay that reads what other replicas committed
/// ([`EventHub::behind`]). Each event is sent once, in sequence order; one
/// that comes late (below what was sent) is dropped, and a watcher that sees
/// a gap reads the store. A task's channel lives while it has watchers.
///
/// The feed (changes of all tasks, numbered across them, see
/// `domain::feed`) goes out the same way on one channel of its own.
#[derive(Debug)]
pub struct EventHub {
    channels: Mutex<HashMap<TaskId, Channel>>,
    feed: Mutex<Feed>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            channels: Mutex::default(),
            feed: Mutex::new(Feed {
                changes: broadcast::channel(FEED_CAPACITY).0,
                last: 0,
            }),
        }
    }
}

/// The feed's channel and the highest position sent on it.
#[derive(Debug)]
struct Feed {
    changes: broadcast::Sender<TaskChange>,
    last: u64,
}

#[derive(Debug)]
struct Channel {
    events: broadcast::Sender<Event>,
    /// Bumped on every event and every change announced without one (a run
    /// released by its replica).
    changes: watch::Sender<u64>,
    /// The highest sequence sent.
    last: u64,
}

/// A watcher's subscription to a task: its events from now on, and a signal
/// on every change. The task's channel goes when its last subscription does.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<EventHub>,
    task: TaskId,
    events: Option<broadcast::Receiver<Event>>,
    changes: watch::Receiver<u64>,
}

impl EventHub {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Announces events that are committed to the store. Call after the commit.
    pub fn publish(&self, events: &[Event]) {
        let mut channels = self.lock();
        for event in events {
            if let Some(channel) = channels.get_mut(&event.task_id) {
                if event.sequence > channel.last {
                    channel.last = event.sequence;
                    // No receiver: the last subscription is being dropped.
                    let _ = channel.events.send(event.clone());
                }
                channel.changes.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Announces a change of the task that added no event.
    pub fn poke(&self, task: TaskId) {
        if let Some(channel) = self.lock().get(&task) {
            channel.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// For a task watched here whose history reaches `sequence`: the last
    /// sequence sent to its watchers, when that is below (the events between
    /// are to be read from the store and published). None when nobody here
    /// watches the task or nothing is missing.
    pub fn behind(&self, task: TaskId, sequence: u64) -> Option<u64> {
        self.lock()
            .get(&task)
            .filter(|c| c.last < sequence)
            .map(|c| c.last)
    }

    /// The watched tasks and the last sequence sent for each.
    pub fn watched(&self) -> Vec<(TaskId, u64)> {
        self.lock().iter().map(|(t, c)| (*t, c.last)).collect()
    }

    /// A subscription to the task's events committed from now on.
    pub fn subscribe(self: &Arc<Self>, task: TaskId) -> Subscription {
        let mut channels = self.lock();
        let channel = channels.entry(task).or_insert_with(|| Channel {
            events: broadcast::channel(CHANNEL_CAPACITY).0,
            changes: watch::Sender::new(0),
            last: 0,
        });
        Subscription {
            hub: Arc::clone(self),
            task,
            events: Some(channel.events.subscribe()),
            changes: channel.changes.subscribe(),
        }
    }

    fn feed(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Announces changes of the feed that are committed. Call after the
    /// commit. Each goes out once, in position order; one at or below what
    /// was sent is dropped (a follower that sees a gap reads the store).
    pub fn publish_changes(&self, changes: &[TaskChange]) {
        if changes.is_empty() {
            return;
        }
        let mut feed = self.feed();
        for change in changes {
            if change.cursor.0 > feed.last {
                feed.last = change.cursor.0;
                if feed.changes.receiver_count() > 0 {
                    let _ = feed.changes.send(change.clone());
                }
            }
        }
    }

    /// The feed's changes committed from now on.
    pub fn subscribe_changes(&self) -> broadcast::Receiver<TaskChange> {
        self.feed().changes.subscribe()
    }

    /// When anyone here follows the feed: the highest position sent.
    pub fn changes_followed(&self) -> Option<u64> {
        let feed = self.feed();
        (feed.changes.receiver_count() > 0).then_some(feed.last)
    }

    /// Number of tasks with live watchers (for tests and metrics).
    pub fn watched_tasks(&self) -> usize {
        self.lock().len()
    }
}

impl Subscription {
    /// The next event (see [`broadcast::Receiver::recv`]).
    pub async fn recv(&mut self) -> Result<Event, broadcast::error::RecvError> {
        match &mut self.events {
            Some(events) => events.recv().await,
            None => Err(broadcast::error::RecvError::Closed),
        }
    }

    /// Resolves on the next change of the task (an event, or a change without
    /// one) after the last one this subscription saw.
    pub async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            // The channel cannot go while this subscription holds it.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.hub.lock();
        drop(self.events.take());
        if channels
            .get(&self.task)
            .is_some_and(|c| c.events.receiver_count() == 0)
        {
            channels.remove(&self.task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::EventKind;

    fn event(task: TaskId, sequence: u64) -> Event {
        Event {
            task_id: task,
            sequence,
            kind: EventKind::CommentAdded,
            data: serde_json::json!({}),
            at_ms: 0,
        }
    }

    #[tokio::test]
    async fn a_tasks_channel_goes_with_its_last_watcher() {
        let hub = Arc::new(EventHub::new());
        let task = TaskId::new();
        let first = hub.subscribe(task);
        let second = hub.subscribe(task);
        assert_eq!(hub.watched_tasks(), 1);
        drop(first);
        assert_eq!(hub.watched_tasks(), 1);
        drop(second);
        assert_eq!(
            hub.watched_tasks(),
            0,
            "no ring is kept for a task nobody watches"
        );
    }

    #[tokio::test]
    async fn events_go_out_once_in_order_and_late_ones_are_dropped() {
        let hub = Arc::new(EventHub::new());
        let task = TaskId::new();
        let mut sub = hub.subscribe(task);
        hub.publish(&[event(task, 1), event(task, 2)]);
        // The relay read 2 and 3 from the store while 2 was published here.
        hub.publish(&[event(task, 2), event(task, 3)]);
        hub.publish(&[event(task, 1)]);
        for expected in 1..=3 {
            assert_eq!(sub.recv().await.expect("event").sequence, expected);
        }
        assert_eq!(hub.behind(task, 3), None);
        assert_eq!(hub.behind(task, 5), Some(3));
        assert_eq!(hub.behind(TaskId::new(), 5), None, "not watched here");
    }

    #[tokio::test]
    async fn a_change_without_an_event_wakes_the_waiters() {
        let hub = Arc::new(EventHub::new());
        let task = TaskId::new();
        let mut sub = hub.subscribe(task);
        let waiter = tokio::spawn(async move {
            sub.changed().await;
        });
        hub.poke(task);
        waiter.await.expect("woken");
    }
}
