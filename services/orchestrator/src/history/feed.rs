//! Following the task feed: many tasks' changes in one stream, from a
//! cursor, with the guarantees of a task's watch (nothing missed, nothing
//! twice, in order).

use std::future::Future;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::{EventHub, WatchEnd};
use crate::domain::feed::{ChangeFilter, FeedCursor, TaskChange};
use crate::store::ChangesPage;

/// Most changes read from the store per round trip while replaying.
const REPLAY_BATCH: u32 = 500;

/// Where committed changes are read from (the store).
pub trait ChangeSource: Send + Sync {
    type Error: Send;
    /// See [`crate::store::Store::changes_after`].
    fn changes_after(
        &self,
        after: FeedCursor,
        filter: ChangeFilter,
        limit: u32,
    ) -> impl Future<Output = Result<ChangesPage, Self::Error>> + Send;
}

/// What a follower of the feed is sent.
#[derive(Debug, Clone, PartialEq)]
pub enum FeedItem {
    /// A change the filter keeps.
    Change(TaskChange),
    /// Sent once, when the changes up to `cursor` have been replayed: what
    /// follows is live.
    CaughtUp(FeedCursor),
}

/// Sends the changes after `after` that `filter` keeps into `tx`: first what
/// the store has, then each new one as it is committed; once, in order. Runs
/// until `tx`'s receiver is dropped or `cancel` fires.
pub async fn watch_changes<S: ChangeSource>(
    source: &S,
    hub: &EventHub,
    filter: ChangeFilter,
    after: FeedCursor,
    tx: mpsc::Sender<Result<FeedItem, S::Error>>,
    cancel: CancellationToken,
) -> WatchEnd {
    // Subscribe before the first read: a change committed between the read
    // and the subscription would otherwise be missed.
    let mut live = hub.subscribe_changes();
    let mut cursor = after;
    let mut caught_up = false;
    loop {
        if let Err(end) = replay(source, &filter, &mut cursor, &tx).await {
            return end;
        }
        if !caught_up {
            caught_up = true;
            if tx.send(Ok(FeedItem::CaughtUp(cursor))).await.is_err() {
                return WatchEnd::ReceiverGone;
            }
        }
        loop {
            let received = tokio::select! {
                () = cancel.cancelled() => return WatchEnd::Cancelled,
                () = tx.closed() => return WatchEnd::ReceiverGone,
                received = live.recv() => received,
            };
            match received {
                Ok(change) if change.cursor <= cursor => {}
                Ok(change) if change.cursor.0 == cursor.0 + 1 => {
                    cursor = change.cursor;
                    if filter.matches(&change)
                        && tx.send(Ok(FeedItem::Change(change))).await.is_err()
                    {
                        return WatchEnd::ReceiverGone;
                    }
                }
                // A gap (a change committed elsewhere, or published out of
                // order) or a lagging receiver: read the store.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => return WatchEnd::Cancelled,
            }
        }
    }
}

/// Sends what the store has after `cursor` (moved along) until it has no more.
async fn replay<S: ChangeSource>(
    source: &S,
    filter: &ChangeFilter,
    cursor: &mut FeedCursor,
    tx: &mpsc::Sender<Result<FeedItem, S::Error>>,
) -> Result<(), WatchEnd> {
    loop {
        let page = match source
            .changes_after(*cursor, filter.clone(), REPLAY_BATCH)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return Err(WatchEnd::SourceFailed);
            }
        };
        for change in page.changes {
            if filter.matches(&change) && tx.send(Ok(FeedItem::Change(change))).await.is_err() {
                return Err(WatchEnd::ReceiverGone);
            }
        }
        *cursor = (*cursor).max(page.through);
        if !page.more {
            return Ok(());
        }
    }
}
