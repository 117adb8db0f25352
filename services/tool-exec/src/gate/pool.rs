//! A separate tool-exec's connections to its orchestrators: several, each
//! made anew through the address it was given (a load balancer in front of
//! the replicas sends each to a replica), each following that replica's
//! health. Calls go round the connections whose replica says SERVING; one
//! whose replica stops serving (cut from its database, shutting down) or
//! that breaks is replaced by a new connection, which the balancer may send
//! elsewhere. So the runs of healthy replicas keep their tool calls when one
//! replica fails, and the calls spread over the replicas.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tracing::{debug, info};

/// How many connections a separate tool-exec keeps by default: with a
/// balancer that spreads connections, enough to reach three replicas.
pub const DEFAULT_CONNECTIONS: usize = 4;

/// The first pause before a connection whose replica does not serve is
/// replaced, doubled at each failure up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// One connection and what its replica last said.
#[derive(Debug)]
struct Slot {
    channel: RwLock<Channel>,
    /// The replica says SERVING (false until it first does).
    serving: AtomicBool,
}

impl Slot {
    fn channel(&self) -> Channel {
        self.channel
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, channel: Channel) {
        *self.channel.write().unwrap_or_else(PoisonError::into_inner) = channel;
    }
}

/// The connections; cheap to clone (they are shared).
#[derive(Debug, Clone)]
pub struct Pool {
    slots: Arc<[Slot]>,
    next: Arc<AtomicUsize>,
    /// Told whenever a connection's replica says SERVING.
    serving_again: Arc<Notify>,
}

/// How long a call waits for a connection whose replica serves when none
/// does (one was just found not serving, and is being made again).
const PATIENCE: Duration = Duration::from_secs(2);

impl Pool {
    /// `size` connections to `endpoint` (made lazily), each followed by a
    /// task that watches its replica's health of `service`; the tasks end
    /// when the pool is dropped. Within a tokio runtime.
    pub fn new(endpoint: &Endpoint, size: usize, service: &str) -> Self {
        let pool = Self::unwatched(endpoint, size);
        for index in 0..pool.slots.len() {
            tokio::spawn(follow(
                Arc::downgrade(&pool.slots),
                index,
                endpoint.clone(),
                service.to_owned(),
                Arc::clone(&pool.serving_again),
            ));
        }
        pool
    }

    /// The connections, none known to serve yet, and nothing watching them.
    fn unwatched(endpoint: &Endpoint, size: usize) -> Self {
        Self {
            slots: (0..size.max(1))
                .map(|_| Slot {
                    channel: RwLock::new(endpoint.connect_lazy()),
                    serving: AtomicBool::new(false),
                })
                .collect(),
            next: Arc::new(AtomicUsize::new(0)),
            serving_again: Arc::new(Notify::new()),
        }
    }

    /// The connection for the next call: the next one round whose replica
    /// serves; when none does, the next one round (the call then says why).
    pub fn pick(&self) -> Channel {
        self.slots[self.pick_index()].channel()
    }

    /// [`Pool::pick`], waiting a little for a connection whose replica
    /// serves when none does now.
    pub async fn ready(&self) -> Channel {
        self.slots[self.ready_index().await].channel()
    }

    async fn ready_index(&self) -> usize {
        if !self.any_serving() {
            let again = self.serving_again.notified();
            if !self.any_serving() {
                let _ = tokio::time::timeout(PATIENCE, again).await;
            }
        }
        self.pick_index()
    }

    fn pick_index(&self) -> usize {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.slots[i].serving.load(Ordering::Relaxed))
            .unwrap_or(start % n)
    }

    /// Whether some connection's replica says SERVING now.
    pub fn any_serving(&self) -> bool {
        self.slots
            .iter()
            .any(|slot| slot.serving.load(Ordering::Relaxed))
    }
}

/// Follows the health of slot `index`'s replica for as long as the pool
/// lives; replaces the connection when its replica does not serve, or the
/// connection breaks.
async fn follow(
    slots: Weak<[Slot]>,
    index: usize,
    endpoint: Endpoint,
    service: String,
    serving_again: Arc<Notify>,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        let Some(channel) = slots.upgrade().map(|s| s[index].channel()) else {
            return;
        };
        let request = HealthCheckRequest {
            service: service.clone(),
        };
        let watched = HealthClient::new(channel).watch(request).await;
        let mut why = "the connection broke".to_owned();
        if let Err(status) = &watched
            && status.code() == tonic::Code::Unimplemented
        {
            // An orchestrator without health to follow: taken as serving.
            if let Some(slots) = slots.upgrade() {
                slots[index].serving.store(true, Ordering::Relaxed);
                serving_again.notify_waiters();
            }
            return;
        }
        if let Ok(answers) = watched {
            let mut answers = answers.into_inner();
            while let Ok(Some(answer)) = answers.message().await {
                let Some(slots) = slots.upgrade() else { return };
                let serving = answer.status() == ServingStatus::Serving;
                slots[index].serving.store(serving, Ordering::Relaxed);
                if serving {
                    pause = FIRST_PAUSE;
                    serving_again.notify_waiters();
                } else {
                    why = format!("its orchestrator reports {:?}", answer.status());
                    break;
                }
            }
        }
        let Some(live) = slots.upgrade() else { return };
        if live[index].serving.swap(false, Ordering::Relaxed) {
            info!(connection = index, why = %why, "a connection to the orchestrators no longer serves: calls go over the others, and it is made again");
        } else {
            debug!(connection = index, why = %why, "a connection to the orchestrators does not serve yet");
        }
        drop(live);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
        let Some(live) = slots.upgrade() else { return };
        live[index].replace(endpoint.connect_lazy());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(pool: &Pool) -> usize {
        pool.slots
            .iter()
            .filter(|slot| slot.serving.load(Ordering::Relaxed))
            .count()
    }

    /// Three connections (to nothing: none is used), each serving.
    fn serving_pool() -> Pool {
        let pool = Pool::unwatched(&Endpoint::from_static("http://127.0.0.1:9"), 3);
        for slot in pool.slots.iter() {
            slot.serving.store(true, Ordering::Relaxed);
        }
        pool
    }

    #[tokio::test]
    async fn calls_go_round_the_connections() {
        let pool = serving_pool();
        assert_eq!(serving(&pool), 3);
        let taken: Vec<usize> = (0..6).map(|_| pool.pick_index()).collect();
        assert_eq!(taken, [0, 1, 2, 0, 1, 2]);
    }

    #[tokio::test]
    async fn calls_skip_connections_whose_replica_does_not_serve() {
        let pool = serving_pool();
        pool.slots[0].serving.store(false, Ordering::Relaxed);
        pool.slots[1].serving.store(false, Ordering::Relaxed);
        let taken: Vec<usize> = (0..4).map(|_| pool.pick_index()).collect();
        assert_eq!(taken, [2, 2, 2, 2]);
        assert_eq!(serving(&pool), 1);
        // None serves: still round, the call says why it fails.
        pool.slots[2].serving.store(false, Ordering::Relaxed);
        assert!(!pool.any_serving());
        let taken: Vec<usize> = (0..3).map(|_| pool.pick_index()).collect();
        assert_eq!(taken, [1, 2, 0]);
    }

    #[tokio::test]
    async fn a_call_waits_a_little_for_a_connection_that_serves() {
        let pool = Pool::unwatched(&Endpoint::from_static("http://127.0.0.1:9"), 2);
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.ready_index().await }
        });
        // Not before a connection serves; then it takes that one, not the
        // next one round (0).
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        pool.slots[1].serving.store(true, Ordering::Relaxed);
        pool.serving_again.notify_waiters();
        assert_eq!(waiting.await.expect("waited"), 1);
    }
}
