//! Task history delivery: a hub that fans committed events out to live watchers,
//! and the watch loop that replays from the store and then follows live events
//! with no gap and no duplicate.
//!
//! The store is the record; the hub is only a doorbell. A watcher that falls
//! behind, or sees a sequence number jump, goes back to the store for what it
//! missed, so a slow or lagging watcher never loses an event. The task feed
//! (many tasks' changes in one stream, `feed`) works the same way.

mod feed;
pub(crate) mod hub;
mod pg_connect;
pub mod relay;
mod watch;

pub use feed::{ChangeSource, FeedItem, watch_changes};
pub use hub::{EventHub, Subscription};
pub use watch::{EventSource, Until, WatchEnd, watch_task};
