//! A TCP proxy in front of PostgreSQL that a test controls, to cut one
//! replica from the database the two ways partitions happen: connections
//! reset (the peer answers with RST), or hung (packets dropped: nothing
//! answers, nothing closes).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const OPEN: u8 = 0;
const RESET: u8 = 1;
const HUNG: u8 = 2;

/// Forwards to its target until told otherwise; stops when dropped.
pub struct DbProxy {
    pub addr: SocketAddr,
    state: Arc<AtomicU8>,
    changed: watch::Sender<u8>,
    accept: JoinHandle<()>,
}

impl DbProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(AtomicU8::new(OPEN));
        let (changed, _) = watch::channel(OPEN);
        let (shared, notify) = (Arc::clone(&state), changed.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                match shared.load(Ordering::SeqCst) {
                    OPEN => {}
                    RESET => {
                        let _ = inbound.set_zero_linger();
                        continue;
                    }
                    // Hung: the connection is taken and answered only once
                    // the partition heals (as a retransmitted SYN would be).
                    _ => {
                        let mut rx = notify.subscribe();
                        tokio::spawn(async move {
                            if !healed(&mut rx).await {
                                let _ = inbound.set_zero_linger();
                                return;
                            }
                            if let Ok(outbound) = TcpStream::connect(target).await {
                                forward(inbound, outbound, rx).await;
                            }
                        });
                        continue;
                    }
                }
                let Ok(outbound) = TcpStream::connect(target).await else {
                    continue;
                };
                tokio::spawn(forward(inbound, outbound, notify.subscribe()));
            }
        });
        Self {
            addr,
            state,
            changed,
            accept,
        }
    }

    /// `url` (a libpq URL naming the target's host:port) through this proxy.
    pub fn url(&self, url: &str, target: SocketAddr) -> String {
        url.replacen(&target.to_string(), &self.addr.to_string(), 1)
    }

    /// Every connection is reset now, and every new one at once.
    pub fn reset(&self) {
        self.set(RESET);
    }

    /// Nothing is forwarded any more, and nothing closes, until
    /// [`Self::open`] heals it (a partition that drops packets).
    pub fn hang(&self) {
        self.set(HUNG);
    }

    /// Connections are forwarded again: new ones, and those hung, with what
    /// was sent meanwhile (those reset stay so).
    pub fn open(&self) {
        self.set(OPEN);
    }

    fn set(&self, state: u8) {
        self.state.store(state, Ordering::SeqCst);
        let _ = self.changed.send(state);
    }
}

/// Copies both ways while the proxy is open; on reset closes both sides with
/// RST, on hang stops reading and keeps both open.
/// Waits, while hung, until the proxy is open again (true) or reset, or
/// gone (false).
async fn healed(state: &mut watch::Receiver<u8>) -> bool {
    loop {
        if state.changed().await.is_err() {
            return false;
        }
        let now = *state.borrow();
        match now {
            OPEN => return true,
            RESET => return false,
            _ => {}
        }
    }
}

async fn forward(mut inbound: TcpStream, mut outbound: TcpStream, mut state: watch::Receiver<u8>) {
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut a, mut b) = ([0u8; 16 * 1024], [0u8; 16 * 1024]);
    loop {
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = *state.borrow();
                // Hung: nothing is carried either way, and nothing closes,
                // until the partition heals (what was sent meanwhile then
                // arrives, as TCP would retransmit it) or the connections
                // are reset.
                let reset = now == RESET || (now == HUNG && !healed(&mut state).await);
                if reset {
                    let _ = inbound.set_zero_linger();
                    let _ = outbound.set_zero_linger();
                    return;
                }
            }
            read = inbound.read(&mut a) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if outbound.write_all(&a[..n]).await.is_err() { return },
            },
            read = outbound.read(&mut b) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if inbound.write_all(&b[..n]).await.is_err() { return },
            },
        }
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
