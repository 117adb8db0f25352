use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::broadcast;

use crate::domain::{Event, TaskId};

/// Events a live watcher may be behind before it re-reads from the store.
const CHANNEL_CAPACITY: usize = 256;

/// Fans committed events out to the watchers of each task.
#[derive(Debug, Default)]
pub struct EventHub {
    channels: Mutex<HashMap<TaskId, broadcast::Sender<Event>>>,
}

impl EventHub {
    pub fn new() -> Self {
        Self::default()
    }

    /// Announces events that are committed to the store. Call after the commit.
    pub fn publish(&self, events: &[Event]) {
        let mut channels = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for event in events {
            if let Some(sender) = channels.get(&event.task_id)
                && sender.send(event.clone()).is_err()
            {
                // Nobody listens any more.
                channels.remove(&event.task_id);
            }
        }
    }

    /// A receiver of the task's events committed from now on.
    pub fn subscribe(&self, task: TaskId) -> broadcast::Receiver<Event> {
        let mut channels = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        channels
            .entry(task)
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }

    /// Number of tasks with live watchers (for tests and metrics).
    pub fn watched_tasks(&self) -> usize {
        let channels = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        channels.values().filter(|s| s.receiver_count() > 0).count()
    }
}
