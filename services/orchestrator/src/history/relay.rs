//! Events across replicas (PostgreSQL only; SQLite has one orchestrator).
//!
//! Every transaction that changes a task sends `NOTIFY chorus_tasks '<task>
//! <last sequence>'`, delivered only if it commits. Each replica keeps one
//! connection of its own that LISTENs, and for each notice about a task it
//! watches reads the events it has not sent from the store and publishes them
//! to its hub (what it committed itself it published already). A notice can
//! be missed (the connection dropped): on every reconnect, and every
//! [`RESYNC`] anyway, each watched task is checked against the store, so a
//! missed notice costs latency, never an event.
//!
//! The same connection holds the replica's advisory lock: no two live
//! processes act as one replica id, and a process that dies loses its lock
//! with its connection.

use std::sync::Arc;
use std::time::Duration;

use chorus_run_token::RunTokenSigner;
use sha2::Digest as _;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::EventHub;
use crate::domain::TaskId;
use crate::domain::feed::{ChangeFilter, FeedCursor};
use crate::store::{
    EVENT_PAGE_BYTES, FEED_CHANNEL, HANDED_ON_CHANNEL, KEYS_CHANNEL, Store, StoreError,
    TASK_CHANNEL, parse_task_notice,
};

/// How often watched tasks are checked against the store even without notices.
pub const RESYNC: Duration = Duration::from_secs(1);
/// Every this many resyncs the shared key set is read again (a missed
/// rotation notice).
const KEYS_EVERY: u32 = 30;
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long start-up waits for a replica id another process holds.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The advisory lock key of a replica id in a schema (deployments in other
/// schemas of one database are apart; advisory locks are per database).
pub fn replica_lock_key(schema: &str, replica: &str) -> i64 {
    let digest = sha2::Sha256::digest(format!("chorus-replica\0{schema}\0{replica}").as_bytes());
    let mut bytes = [0_u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// A connection's notifications (channel, payload), or why it failed.
type Notices = mpsc::UnboundedReceiver<Result<(String, String), String>>;

/// A live listener connection.
struct Listener {
    client: tokio_postgres::Client,
    notices: Notices,
}

/// Connects, takes the replica's lock and listens.
///
/// # Errors
/// The connection failed (the message says why), or `Ok(None)` when another
/// process holds the replica's lock.
async fn connect(url: &str, replica: &str) -> Result<Option<Listener>, String> {
    let connect = super::pg_connect::from_url(url)?;
    let (client, notices) = match connect.tls {
        Some(tls) => listen(
            connect
                .config
                .connect(tls)
                .await
                .map_err(|e| e.to_string())?,
        ),
        None => listen(
            connect
                .config
                .connect(NoTls)
                .await
                .map_err(|e| e.to_string())?,
        ),
    };
    let schema: String = client
        .query_one("SELECT current_schema()::text", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    let lock_key = replica_lock_key(&schema, replica);
    let locked: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&lock_key])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    if !locked {
        return Ok(None);
    }
    client
        .batch_execute(&format!(
            "LISTEN {TASK_CHANNEL}; LISTEN {KEYS_CHANNEL}; LISTEN {HANDED_ON_CHANNEL}; LISTEN {FEED_CHANNEL}"
        ))
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some(Listener { client, notices }))
}

/// Drives a connection, forwarding its notifications (channel, payload), or
/// why it failed.
fn listen<S, T>(
    (client, mut connection): (tokio_postgres::Client, tokio_postgres::Connection<S, T>),
) -> (tokio_postgres::Client, Notices)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, notices) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if tx
                        .send(Ok((n.channel().to_owned(), n.payload().to_owned())))
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
                None => {
                    let _ = tx.send(Err("the connection closed".to_owned()));
                    return;
                }
            }
        }
    });
    (client, notices)
}

/// The relay of one replica: started once its lock is held.
pub struct Relay {
    listener: Listener,
    url: String,
    replica: String,
}

impl Relay {
    /// Connects to `store`'s PostgreSQL, takes the lock of `store`'s replica
    /// id (waiting a little for an earlier process of it to be gone) and
    /// listens.
    ///
    /// # Errors
    /// The database cannot be reached, or another live process holds the
    /// replica id.
    pub async fn start(store: &Store) -> anyhow::Result<Self> {
        let url = store.url().to_owned();
        let replica = store.replica().id.clone();
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            match connect(&url, &replica).await {
                Ok(Some(listener)) => {
                    return Ok(Self {
                        listener,
                        url,
                        replica,
                    });
                }
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(None) => anyhow::bail!(
                    "replica id '{replica}' is in use by another live orchestrator on this database; give each replica its own --replica-id"
                ),
                Err(e) => anyhow::bail!("cannot listen for other replicas' events: {e}"),
            }
        }
    }

    /// Relays notices into `hub` until `stop` fires. `lost` fires when the
    /// replica's lock went to another process while the connection was down
    /// (this process must stop driving runs).
    pub async fn run(
        mut self,
        store: Store,
        hub: Arc<EventHub>,
        signer: Arc<RunTokenSigner>,
        claim_now: Arc<tokio::sync::Notify>,
        stop: CancellationToken,
        lost: CancellationToken,
    ) {
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u32 = 0;
        loop {
            let notice = tokio::select! {
                () = stop.cancelled() => return,
                _ = resync.tick() => {
                    catch_up_all(&store, &hub).await;
                    catch_up_feed(&store, &hub, None).await;
                    ticks = ticks.wrapping_add(1);
                    if ticks.is_multiple_of(KEYS_EVERY) {
                        reload_keys(&store, &signer).await;
                    }
                    continue;
                }
                notice = self.listener.notices.recv() => notice,
            };
            let problem = match notice {
                Some(Ok((channel, _))) if channel == KEYS_CHANNEL => {
                    reload_keys(&store, &signer).await;
                    continue;
                }
                Some(Ok((channel, _))) if channel == HANDED_ON_CHANNEL => {
                    claim_now.notify_one();
                    continue;
                }
                Some(Ok((channel, payload))) if channel == FEED_CHANNEL => {
                    catch_up_feed(&store, &hub, payload.parse().ok()).await;
                    continue;
                }
                Some(Ok((_, payload))) => {
                    match parse_task_notice(&payload) {
                        Some((task, sequence)) => catch_up(&store, &hub, task, sequence).await,
                        None => debug!(payload, "an unknown notice"),
                    }
                    continue;
                }
                Some(Err(e)) => e,
                None => "the connection closed".to_owned(),
            };
            warn!(error = %problem, "the connection that listens for other replicas' events failed; reconnecting");
            match self.reconnect(&stop).await {
                Reconnected::Yes => {
                    info!("listening for other replicas' events again");
                    // What was committed meanwhile was never announced here.
                    catch_up_all(&store, &hub).await;
                    catch_up_feed(&store, &hub, None).await;
                    reload_keys(&store, &signer).await;
                }
                Reconnected::Stopped => return,
                Reconnected::LockTaken => {
                    warn!(replica = %self.replica, "another process took this replica's id while its connection was down; this process stops driving runs");
                    lost.cancel();
                    return;
                }
            }
        }
    }

    async fn reconnect(&mut self, stop: &CancellationToken) -> Reconnected {
        let mut backoff = Duration::from_millis(100);
        loop {
            tokio::select! {
                () = stop.cancelled() => return Reconnected::Stopped,
                () = tokio::time::sleep(backoff) => {}
            }
            match connect(&self.url, &self.replica).await {
                Ok(Some(listener)) => {
                    self.listener = listener;
                    return Reconnected::Yes;
                }
                Ok(None) => return Reconnected::LockTaken,
                Err(e) => {
                    debug!(error = %e, "reconnecting the listener");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Closes the listener: the replica's lock is released.
    pub async fn close(self) {
        drop(self.listener.client);
    }
}

enum Reconnected {
    Yes,
    Stopped,
    LockTaken,
}

/// Re-reads the shared run-token key set (a rotation on another replica).
pub async fn reload_keys(store: &Store, signer: &RunTokenSigner) {
    match store.run_token_keys().await {
        Ok(keys) if !keys.is_empty() => {
            if let Err(e) = signer.adopt(keys) {
                warn!(error = %e, "the shared run-token key set cannot be used");
            }
        }
        Ok(_) => {}
        Err(e) => warn!(error = %e, "cannot read the shared run-token key set"),
    }
}

/// Publishes what the store has of `task` beyond what the hub sent, when the
/// task is watched here and its history reaches `sequence`; wakes whoever
/// waits on the task's changes either way.
pub async fn catch_up(store: &Store, hub: &EventHub, task: TaskId, sequence: u64) {
    if let Some(after) = hub.behind(task, sequence)
        && let Err(e) = publish_after(store, hub, task, after).await
    {
        warn!(task_id = %task, error = %e, "cannot read another replica's events");
    }
    hub.poke(task);
}

/// Checks every watched task against the store.
pub async fn catch_up_all(store: &Store, hub: &EventHub) {
    let watched = hub.watched();
    if watched.is_empty() {
        return;
    }
    let tasks: Vec<TaskId> = watched.iter().map(|(t, _)| *t).collect();
    match store.last_sequences(tasks).await {
        Ok(lasts) => {
            for (task, last) in lasts {
                if hub.behind(task, last).is_some() {
                    catch_up(store, hub, task, last).await;
                }
            }
        }
        Err(e) => warn!(error = %e, "cannot check the watched tasks against the store"),
    }
}

/// When the feed is followed here: publishes the changes the store has
/// beyond what the hub sent (up to `reaches`, or all when None).
pub async fn catch_up_feed(store: &Store, hub: &EventHub, reaches: Option<u64>) {
    let Some(mut after) = hub.changes_followed() else {
        return;
    };
    if reaches.is_some_and(|p| p <= after) {
        return;
    }
    loop {
        match store
            .changes_after(FeedCursor(after), ChangeFilter::default(), 500)
            .await
        {
            Ok(page) => {
                hub.publish_changes(&page.changes);
                after = page.through.0;
                if !page.more {
                    return;
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot read other replicas' changes of the task feed");
                return;
            }
        }
    }
}

async fn publish_after(
    store: &Store,
    hub: &EventHub,
    task: TaskId,
    mut after: u64,
) -> Result<(), StoreError> {
    loop {
        let batch = store.events(task, after, 500, EVENT_PAGE_BYTES).await?;
        let Some(last) = batch.last() else {
            return Ok(());
        };
        after = last.sequence;
        hub.publish(&batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_get_distinct_stable_lock_keys() {
        assert_eq!(replica_lock_key("s", "a"), replica_lock_key("s", "a"));
        assert_ne!(replica_lock_key("s", "a"), replica_lock_key("s", "b"));
        assert_ne!(replica_lock_key("s", "a"), replica_lock_key("t", "a"));
    }
}
