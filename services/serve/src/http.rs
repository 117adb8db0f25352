//! A plain HTTP face beside the gRPC port (the MCP endpoint, the web
//! console): HTTP/1.1 and HTTP/2 on a listener of its own, TLS with the
//! services' certificate when they have one, connections bounded in number
//! and in how long a client may take to send its request head or its TLS
//! handshake, and a stop that ends it (connections finish the request in
//! hand, within a grace).
//!
//! At the connection limit a new connection makes room rather than being
//! turned away: the oldest connection that has not yet carried a request
//! with a credential the service accepted ([`Standing::prove`]) is closed,
//! or else the one that has been idle (no request in hand) longest. Only
//! when every connection has a request in hand is the new one closed. So
//! connections that say nothing, or only fetch pages, or come with keys
//! that do not exist, cannot keep a person with a key out.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use chorus_auth::tls::ServerTls;
use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How long a client has for its TLS handshake, and for a request's head.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long connections get to finish after the stop.
const GRACE: Duration = Duration::from_secs(5);
/// How long a new connection at the limit waits for the one closed to make
/// room for it (in the kernel's backlog, read no further).
const ROOM: Duration = Duration::from_secs(1);
/// Requests one HTTP/2 connection may have in hand at once.
const H2_STREAMS: u32 = 64;

/// The rustls configuration of `tls` (HTTP/2 and HTTP/1.1 offered by ALPN).
pub fn rustls_config(tls: &ServerTls) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| anyhow::anyhow!("the TLS certificate {}: {e}", tls.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| anyhow::anyhow!("the TLS key {}: {e}", tls.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What the face knows of one connection: its age, whether a request on it
/// carried an accepted credential, how many requests it has in hand and
/// since when it has had none. The service finds it in each request's
/// extensions and proves it ([`Standing::prove`]).
#[derive(Debug, Clone)]
pub struct Standing(Arc<Slot>);

#[derive(Debug)]
struct Slot {
    proven: AtomicBool,
    busy: AtomicUsize,
    /// When it last had no request in hand (ms since the face started).
    idle_since_ms: AtomicU64,
    close: CancellationToken,
}

impl Standing {
    /// The connection carried a request whose credential the service
    /// accepted: it is no longer the first to go when room is needed.
    pub fn prove(&self) {
        self.0.proven.store(true, Ordering::Relaxed);
    }

    /// Closes the connection at once, with everything buffered for it (its
    /// client left an answer unread too long).
    pub fn close(&self) {
        self.0.close.cancel();
    }
}

/// The connections of a face, oldest first, for making room.
struct Held {
    started: Instant,
    next: AtomicU64,
    slots: Mutex<BTreeMap<u64, Arc<Slot>>>,
}

impl Held {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            next: AtomicU64::new(0),
            slots: Mutex::new(BTreeMap::new()),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn add(&self) -> (u64, Arc<Slot>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            proven: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            close: CancellationToken::new(),
        });
        self.lock().insert(id, Arc::clone(&slot));
        (id, slot)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes one connection to make room: the oldest unproven one, else
    /// the one idle longest. False when every connection is busy.
    fn make_room(&self) -> bool {
        let slots = self.lock();
        let unproven = slots
            .iter()
            .find(|(_, s)| !s.proven.load(Ordering::Relaxed) && !s.close.is_cancelled());
        let victim = unproven.or_else(|| {
            slots
                .iter()
                .filter(|(_, s)| s.busy.load(Ordering::Relaxed) == 0 && !s.close.is_cancelled())
                .min_by_key(|(_, s)| s.idle_since_ms.load(Ordering::Relaxed))
        });
        match victim {
            Some((_, slot)) => {
                slot.close.cancel();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves `service` on `listener` (over TLS with `tls`) until `stop` fires,
/// holding at most `max_connections` at once (one more makes room, see the
/// module's notes). `name` names the face in the log.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
    name: &'static str,
    stop: CancellationToken,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let places = Arc::new(Semaphore::new(max_connections));
    let held = Arc::new(Held::new());
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let connections = tokio_util::task::TaskTracker::new();
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, tls = acceptor.is_some(), "{name} serving");
    }
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or the like: the next accept may do.
                    warn!(error = %e, "{name}: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let place = match Arc::clone(&places).try_acquire_owned() {
            Ok(place) => place,
            Err(_) if held.make_room() => {
                match tokio::time::timeout(ROOM, Arc::clone(&places).acquire_owned()).await {
                    Ok(Ok(place)) => place,
                    _ => {
                        debug!(%peer, "{name}: no room made in time; a connection is closed");
                        continue;
                    }
                }
            }
            Err(_) => {
                debug!(%peer, "{name}: every connection has a request in hand; a connection is closed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, slot) = held.add();
        let held = Arc::clone(&held);
        let service = Tracked {
            inner: service.clone(),
            slot: Arc::clone(&slot),
            held: Arc::clone(&held),
        };
        let stop = stop.clone();
        let acceptor = acceptor.clone();
        connections.spawn(async move {
            serve_connection(stream, peer, service, acceptor, name, stop, &slot.close).await;
            held.remove(id);
            drop(place);
        });
    }
    connections.close();
    if tokio::time::timeout(GRACE, connections.wait())
        .await
        .is_err()
    {
        warn!(grace = ?GRACE, "{name}: connections still open after the grace; dropped");
    }
}

/// Serves one connection (after its TLS handshake, when TLS is on) until it
/// ends or is closed to make room; at the stop, the request in hand is
/// answered, then it ends.
async fn serve_connection<S, B>(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    service: Tracked<S>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    name: &'static str,
    stop: CancellationToken,
    close: &CancellationToken,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE);
    builder.http2().max_concurrent_streams(H2_STREAMS);
    let stream = match acceptor {
        Some(acceptor) => {
            let handshake = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream));
            let Some(Ok(Ok(stream))) = close.run_until_cancelled(handshake).await else {
                debug!(%peer, "{name}: TLS handshake failed, took too long or made room");
                return;
            };
            Either::Right(stream)
        }
        None => Either::Left(stream),
    };
    let service = TowerToHyperService::new(service);
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = close.cancelled() => {
            debug!(%peer, "{name}: a connection is closed to make room");
        }
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(GRACE, connection).await;
        }
    }
}

/// The service of one connection: each request carries the connection's
/// [`Standing`] and counts as in hand until its answer's body is done.
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    slot: Arc<Slot>,
    held: Arc<Held>,
}

impl<S, B> tower::Service<Request<Incoming>> for Tracked<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<InHand<B>>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Incoming>) -> Self::Future {
        request
            .extensions_mut()
            .insert(Standing(Arc::clone(&self.slot)));
        let guard = Busy::new(Arc::clone(&self.slot), Arc::clone(&self.held));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| InHand {
                body: Box::pin(body),
                _busy: guard,
            }))
        })
    }
}

/// A request in hand on a connection, from its call until its answer's body
/// is dropped.
struct Busy {
    slot: Arc<Slot>,
    held: Arc<Held>,
}

impl Busy {
    fn new(slot: Arc<Slot>, held: Arc<Held>) -> Self {
        slot.busy.fetch_add(1, Ordering::Relaxed);
        Self { slot, held }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.slot.busy.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.slot
                .idle_since_ms
                .store(self.held.now_ms(), Ordering::Relaxed);
        }
    }
}

/// An answer's body, holding its request in hand until it is done.
pub struct InHand<B> {
    body: std::pin::Pin<Box<B>>,
    _busy: Busy,
}

impl<B: Body<Data = Bytes>> Body for InHand<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        self.body.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
