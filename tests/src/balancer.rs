//! A TCP load balancer for tests of several orchestrator replicas: each new
//! connection goes to the next backend in turn (round robin), as a Kubernetes
//! Service spreads connections over its pods; a backend that refuses the
//! connection is skipped. gRPC keeps one connection per channel, so every new
//! client (each chorus-tools call, each tool-exec channel) may land on
//! another replica.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The connections a balancer carries: the backend of each, and its splice.
type Carried = Arc<Mutex<Vec<(SocketAddr, JoinHandle<()>)>>>;

/// Serves on 127.0.0.1 until dropped.
pub struct Balancer {
    pub addr: SocketAddr,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    carried: Carried,
    accept: JoinHandle<()>,
}

impl Balancer {
    /// A balancer over `backends` on a port of the system's choosing.
    pub async fn start(backends: Vec<SocketAddr>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let backends = Arc::new(Mutex::new(backends));
        let carried: Carried = Arc::default();
        let next = Arc::new(AtomicUsize::new(0));
        let (shared, held) = (Arc::clone(&backends), Arc::clone(&carried));
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (backends, next, held) =
                    (Arc::clone(&shared), Arc::clone(&next), Arc::clone(&held));
                tokio::spawn(async move {
                    let candidates = backends
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    let first = next.fetch_add(1, Ordering::Relaxed);
                    for i in 0..candidates.len() {
                        let backend = candidates[(first + i) % candidates.len()];
                        if let Ok(outbound) = TcpStream::connect(backend).await {
                            let splice = tokio::spawn(splice(inbound, outbound));
                            let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
                            held.retain(|(_, s)| !s.is_finished());
                            held.push((backend, splice));
                            return;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            backends,
            carried,
            accept,
        }
    }

    /// Replaces the backends (a replica restarted on another port, or left).
    pub fn set_backends(&self, backends: Vec<SocketAddr>) {
        *self.backends.lock().unwrap_or_else(PoisonError::into_inner) = backends;
    }

    /// Closes every connection it carries (their clients connect again).
    pub fn cut_all(&self) {
        for (_, splice) in self
            .carried
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            splice.abort();
        }
    }

    /// How many open connections it carries to `backend`.
    pub fn connections_to(&self, backend: SocketAddr) -> usize {
        self.carried
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(b, splice)| *b == backend && !splice.is_finished())
            .count()
    }
}

async fn splice(mut inbound: TcpStream, mut outbound: TcpStream) {
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.cut_all();
        self.accept.abort();
    }
}
