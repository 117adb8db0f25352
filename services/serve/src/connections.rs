//! The connections a server holds, bounded: in number, in how long one may
//! take to say something, in how long it may sit without a call, and in how
//! long it may leave an answer unread. A caller that breaks a bound loses its
//! connection; no one else waits for it.
//!
//! [`Connections::incoming`] accepts connections of a listener and wraps each
//! in a [`Conn`]:
//!
//! - at most `max` connections at once (`--max-connections`; by default three
//!   quarters of the file descriptors, raised to the hard limit at start by
//!   [`raise_fd_limit`]): one more closes the oldest connection that has not
//!   carried a call with a credential, or, when every connection has, is
//!   closed as soon as it is accepted; while the connections closed to make
//!   room are still being dropped, the next waits in the kernel's backlog
//!   (at most a second) rather than being closed on arrival;
//! - at most `per_credential` connections that carried a call with one
//!   credential — an API key or a run (`--max-connections-per-credential`):
//!   one more closes that credential's oldest connection without a call in
//!   flight; and the connections of keys other than admins' hold at most
//!   seven eighths of `max`, so one more of theirs closes the oldest idle one
//!   of them: callers with keys cannot fill the room admins and agents need;
//! - at most `per_peer` connections per peer address that have not yet
//!   carried a call with a credential (`--max-unproven-connections-per-peer`);
//!   one more closes the oldest of them: one address cannot hold every
//!   connection with sockets that say nothing, and a caller that makes its
//!   call at once is never turned away;
//! - at most `unproven` such connections of all addresses together
//!   (`--max-unproven-connections`); one more closes the oldest of all of
//!   them: many addresses (a botnet, an IPv6 prefix) cannot together keep
//!   thousands of silent connections standing, each costing the server its
//!   socket, its timer and its close, while a caller that makes its call at
//!   once is proven long before it is the oldest;
//! - a connection that has not sent the HTTP/2 preface and a frame header
//!   within `handshake` (`--handshake-timeout-secs`) is closed;
//! - a connection without a call for `idle` (`--connection-idle-secs`) is
//!   closed;
//! - a connection that has left an answer unread for `answer_send`
//!   (`--answer-send-secs`) is closed, and with it every answer buffered for
//!   it.
//!
//! The layers find a call's connection by the peer address in its
//! `TcpConnectInfo` ([`Connections::of`]) and tell it when a call starts and
//! ends ([`ConnState::call`]), when an answer waits to be read
//! ([`ConnState::answer`]) and when a credential has been checked on it
//! ([`ConnState::prove`]).
//!
//! The bounds are checked where the connection is read and written: the
//! server's connection task polls the timer with its socket, so idle
//! connections cost no task and no periodic wake-up.
//!
//! A connection closed by a bound says goodbye in HTTP/2 when it can
//! ([`goaway`]): a GOAWAY naming the last call the server took. A connection
//! closed before any call was taken ([`ConnState::take_call`] refuses calls
//! once it is closing) tells its client that none was: a client whose calls
//! came in a burst with many others sends them again instead of failing.

mod book;
mod conn;
mod goaway;

pub use book::Holder;
use book::{Book, Holders};
pub use conn::Conn;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::Waker;
use std::time::Duration;

use chorus_telemetry::LogRate;
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tracing::{info, warn};

use goaway::Http2;

/// Bytes of the HTTP/2 client preface and the header of the frame after it
/// (the client's SETTINGS): a connection that has sent these has begun
/// HTTP/2 (or, under TLS, its handshake).
const HANDSHAKE_BYTES: usize = 24 + 9;

/// Closed connections logged at most this often a second.
const CLOSES_LOGGED_PER_SECOND: u32 = 10;

/// The bounds of [`Connections`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections at once; None: three quarters of the file descriptors.
    pub max: Option<usize>,
    /// Connections per peer address that have carried no call with a
    /// credential yet.
    pub per_peer: usize,
    /// Connections of all addresses together that have carried no call with
    /// a credential yet.
    pub unproven: usize,
    /// Connections that carried a call with one credential.
    pub per_credential: usize,
    /// Time to send the HTTP/2 preface and a frame header.
    pub handshake: Duration,
    /// Time a connection may hold no call.
    pub idle: Duration,
    /// Time an answer may wait to be read.
    pub answer_send: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: None,
            per_peer: 1024,
            unproven: 2048,
            per_credential: 64,
            handshake: Duration::from_secs(10),
            idle: Duration::from_secs(300),
            answer_send: Duration::from_secs(30),
        }
    }
}

/// The connections of one server.
#[derive(Debug, Clone)]
pub struct Connections {
    registry: Arc<Registry>,
}

#[derive(Debug)]
struct Registry {
    limits: ConnectionLimits,
    /// The effective `max`.
    max: usize,
    open: AtomicUsize,
    /// Told when a connection is dropped (see [`Registry::room`]).
    dropped: tokio::sync::Notify,
    /// Sockets kept open after a goodbye.
    lingering: AtomicUsize,
    by_peer: Mutex<HashMap<SocketAddr, Weak<ConnState>>>,
    /// Connections that carried no call with a credential yet.
    unproven: Mutex<Book>,
    /// Connections proven by each credential, and by credentials with no
    /// reserved room.
    holders: Mutex<Holders>,
    closes: LogRate,
    /// "the orchestrator", "tool-exec".
    service: &'static str,
}

impl Connections {
    /// `fd_limit`: the file descriptors this process may open (see
    /// [`raise_fd_limit`]), for the default of `max`.
    pub fn new(limits: ConnectionLimits, fd_limit: u64, service: &'static str) -> Self {
        let auto = usize::try_from(fd_limit / 4 * 3).unwrap_or(usize::MAX);
        let max = limits.max.unwrap_or(auto).max(1);
        Self {
            registry: Arc::new(Registry {
                limits,
                max,
                open: AtomicUsize::new(0),
                dropped: tokio::sync::Notify::new(),
                lingering: AtomicUsize::new(0),
                by_peer: Mutex::default(),
                unproven: Mutex::default(),
                holders: Mutex::default(),
                closes: LogRate::new(CLOSES_LOGGED_PER_SECOND),
                service,
            }),
        }
    }

    /// Most connections at once.
    pub fn max(&self) -> usize {
        self.registry.max
    }

    /// The bounds.
    pub fn limits(&self) -> ConnectionLimits {
        self.registry.limits
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        self.registry.open.load(Ordering::Relaxed)
    }

    /// The connections of `listener` within the bounds, with TCP keepalive
    /// and no Nagle delay; `tls`: the server speaks TLS on them (else HTTP/2
    /// in the clear). A connection beyond a count is closed at once; an
    /// accept that fails (no file descriptor left) is retried after a pause.
    pub fn incoming(
        &self,
        listener: TcpListener,
        keepalive: Option<Duration>,
        tls: bool,
    ) -> impl futures_util::Stream<Item = io::Result<Conn>> + Send + 'static {
        let registry = Arc::clone(&self.registry);
        futures_util::stream::unfold(listener, move |listener| {
            let registry = Arc::clone(&registry);
            async move {
                loop {
                    registry.room().await;
                    let (stream, peer) = match listener.accept().await {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            registry.log_close(None, &format!("cannot accept a connection: {e}"));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    match registry.admit(stream, peer, keepalive, tls) {
                        Ok(conn) => return Some((Ok(conn), listener)),
                        Err(why) => {
                            chorus_telemetry::metrics().refused(why.reason(), "connection", None);
                            registry.log_close(Some(peer), &why.to_string());
                        }
                    }
                }
            }
        })
    }

    /// The connection a call came on, found by its peer address.
    pub fn of(&self, extensions: &http::Extensions) -> Option<Arc<ConnState>> {
        let peer = extensions
            .get::<TcpConnectInfo>()
            .or_else(|| {
                extensions
                    .get::<TlsConnectInfo<TcpConnectInfo>>()
                    .map(TlsConnectInfo::get_ref)
            })?
            .remote_addr?;
        self.registry
            .by_peer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)?
            .upgrade()
    }
}

/// Connections past `max` held while the ones closed to make room for them
/// are still being dropped.
const ROOM_BEING_MADE: usize = 64;

/// Longest the accept loop waits for connections closed to make room to be
/// dropped, before it takes the next connection (and closes it at once if
/// there is still no room).
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// How long a connection that said goodbye is read (and what comes dropped)
/// before its socket closes, and how many at once at most: a client that
/// sends its call just after the goodbye must read the goodbye, not a reset
/// that data arriving at a closed socket would bring.
const LINGER: Duration = Duration::from_secs(2);
const LINGERING_AT_ONCE: usize = 1024;

/// Why a connection was closed at once.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(
        "{service} holds its limit of {max} connections (--max-connections); the connection was closed"
    )]
    Total { service: &'static str, max: usize },
    #[error("the connection cannot be set up: {0}")]
    Socket(io::Error),
}

impl Refused {
    fn reason(&self) -> &'static str {
        match self {
            Self::Total { .. } => "connections",
            Self::Socket(_) => "socket",
        }
    }
}

impl Registry {
    fn admit(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        keepalive: Option<Duration>,
        tls: bool,
    ) -> Result<Conn, Refused> {
        let open = self.open.load(Ordering::Relaxed);
        let refused = || Refused::Total {
            service: self.service,
            max: self.max,
        };
        if open >= self.max + ROOM_BEING_MADE {
            return Err(refused());
        }
        let state = Arc::new(ConnState {
            peer,
            calls: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            answers: Mutex::default(),
            next_answer: AtomicU64::new(0),
            proven: AtomicBool::new(false),
            asked: AtomicBool::new(false),
            holder: std::sync::OnceLock::new(),
            closing: Mutex::default(),
            waker: Mutex::new(None),
            registry: Arc::downgrade(self),
        });
        if !self.count_unproven(&state, open >= self.max) {
            return Err(refused());
        }
        // Counted from here: a refusal below gives the counts back.
        self.open.fetch_add(1, Ordering::Relaxed);
        chorus_telemetry::metrics().connections.add(1, &[]);
        let conn = Conn {
            io: stream,
            state: Arc::clone(&state),
            registry: Arc::clone(self),
            accepted: Instant::now(),
            read: 0,
            http2: Http2::new(!tls),
            said_goodbye: false,
            asked: false,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        };
        self.by_peer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer, Arc::downgrade(&state));
        set_up(&conn.io, keepalive).map_err(Refused::Socket)?;
        Ok(conn)
    }

    /// Waits, at most [`ROOM_WAIT`], while the connections closed to make room
    /// for newer ones are still being dropped. A burst of connections (a flood
    /// of silent ones, and a caller among them) can outrun the tasks that drop
    /// the ones it pushes out; the next connection then waits in the kernel's
    /// backlog instead of being closed on arrival — which a client that had
    /// already sent its call sees as a reset, and cannot tell from a call lost
    /// after it ran.
    async fn room(&self) {
        let crowded = || self.open.load(Ordering::Relaxed) >= self.max + ROOM_BEING_MADE;
        let until = Instant::now() + ROOM_WAIT;
        while crowded() {
            let dropped = self.dropped.notified();
            tokio::pin!(dropped);
            // Registered before the count is read again: a drop in between
            // is not missed.
            dropped.as_mut().enable();
            if !crowded() || tokio::time::timeout_at(until, dropped).await.is_err() {
                return;
            }
        }
    }

    /// Keeps the socket of `io`, whose server side has ended, open for
    /// [`LINGER`] (within [`LINGERING_AT_ONCE`]), reading and dropping what the
    /// client still sends until it closes.
    fn linger(self: &Arc<Self>, io: &TcpStream) {
        use std::os::fd::AsFd as _;
        // A kept socket is a file descriptor: it comes out of the connections'
        // budget, never on top of it (an attack that fills the budget leaves
        // nothing to linger).
        let lingering = self.lingering.fetch_add(1, Ordering::AcqRel);
        if lingering >= LINGERING_AT_ONCE
            || lingering + self.open.load(Ordering::Relaxed) >= self.max
        {
            self.lingering.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let registry = Arc::clone(self);
        let kept = io
            .as_fd()
            .try_clone_to_owned()
            .map(std::net::TcpStream::from)
            .and_then(TcpStream::from_std);
        let (Ok(mut kept), Ok(runtime)) = (kept, tokio::runtime::Handle::try_current()) else {
            registry.lingering.fetch_sub(1, Ordering::AcqRel);
            return;
        };
        runtime.spawn(async move {
            let mut rest = (&mut kept).take(64 * 1024);
            let mut sink = tokio::io::sink();
            let _ = tokio::time::timeout(LINGER, tokio::io::copy(&mut rest, &mut sink)).await;
            drop(kept);
            registry.lingering.fetch_sub(1, Ordering::AcqRel);
        });
    }

    fn log_close(&self, peer: Option<SocketAddr>, why: &str) {
        if let Some(unlogged) = self.closes.admit() {
            match peer {
                Some(peer) => {
                    info!(%peer, not_logged_before = unlogged, "connection closed: {why}");
                }
                None => warn!(not_logged_before = unlogged, "{why}"),
            }
        }
    }

    /// Counts a new connection among the unproven ones. When that makes one
    /// too many for its address — or for all addresses together, or, `full`,
    /// for the server — the oldest unproven connection (of the address, else
    /// of all) is closed: addresses that open connections and say nothing
    /// cycle through their own share, and a caller that makes its call at
    /// once is never turned away. False when the server is full of
    /// connections that all carried calls.
    fn count_unproven(&self, state: &Arc<ConnState>, full: bool) -> bool {
        let why = |flag: &str| {
            format!(
                "too many connections carried no call with a credential ({flag}); the oldest was closed"
            )
        };
        let (evicted, reason) = {
            let mut book = self.unproven.lock().unwrap_or_else(PoisonError::into_inner);
            let ip = state.peer.ip();
            let mine = book.by_ip.entry(ip).or_default();
            let mut evicted = None;
            let mut reason = "unproven-connections-per-peer";
            if mine.count >= self.limits.per_peer {
                evicted = mine.evict_oldest(&why("--max-unproven-connections-per-peer"));
            }
            if evicted.is_some() {
                book.all.remove_unproven();
            } else {
                // Of all addresses: the server is full, or they hold their
                // share together.
                let over = if full {
                    Some(("--max-connections", "connections"))
                } else if book.all.count >= self.limits.unproven {
                    Some(("--max-unproven-connections", "unproven-connections"))
                } else {
                    None
                };
                if let Some((flag, over_reason)) = over {
                    evicted = book.all.evict_oldest(&why(flag));
                    reason = over_reason;
                    if let Some(oldest) = &evicted
                        && let Some(theirs) = book.by_ip.get_mut(&oldest.peer.ip())
                    {
                        theirs.remove_unproven();
                    }
                }
            }
            if full && evicted.is_none() {
                return false;
            }
            book.by_ip.entry(ip).or_default().add(state);
            book.all.add(state);
            (evicted, reason)
        };
        if let Some(oldest) = evicted {
            chorus_telemetry::metrics().refused(reason, "connection", None);
            if let Some(why) = oldest.closing_why() {
                self.log_close(Some(oldest.peer), &why);
            }
            oldest.wake();
        }
        true
    }

    /// One connection of `ip` no longer counts as unproven.
    fn proven(&self, ip: IpAddr) {
        let mut book = self.unproven.lock().unwrap_or_else(PoisonError::into_inner);
        book.all.remove_unproven();
        if let Some(mine) = book.by_ip.get_mut(&ip) {
            mine.remove_unproven();
            if mine.count == 0 {
                book.by_ip.remove(&ip);
            }
        }
    }

    /// Most connections proven by credentials without reserved room: seven
    /// eighths of `max`.
    fn unreserved_max(&self) -> usize {
        crate::unreserved_share(self.max)
    }

    /// `state` was proven by `holder`: it counts against the holder's
    /// connections, and the oldest idle one past a bound is closed.
    fn held_by(&self, state: &Arc<ConnState>, holder: &Holder) {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = holders.by_name.entry(holder.name.clone()).or_default();
        mine.add(state);
        if mine.count > self.limits.per_credential {
            let why = format!(
                "{} holds its limit of {} connections with calls (--max-connections-per-credential); its oldest idle one was closed",
                holder.name, self.limits.per_credential
            );
            mine.close_oldest_idle(state, &why);
        }
        if !holder.reserved {
            holders.unreserved.add(state);
            if holders.unreserved.count > self.unreserved_max() {
                let why = format!(
                    "keys other than admins' hold {} of {} connections (--max-connections: an eighth is kept for admins and agents); the oldest idle one was closed",
                    holders.unreserved.count, self.max
                );
                holders.unreserved.close_oldest_idle(state, &why);
            }
        }
    }

    /// A connection proven by `holder` is gone.
    fn let_go(&self, holder: &Holder) {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mine) = holders.by_name.get_mut(&holder.name) {
            mine.remove_one(|_| true);
            if mine.count == 0 {
                holders.by_name.remove(&holder.name);
            }
        }
        if !holder.reserved {
            holders.unreserved.remove_one(|_| true);
        }
    }
}

fn set_up(stream: &TcpStream, keepalive: Option<Duration>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    if let Some(time) = keepalive {
        let socket = socket2::SockRef::from(stream);
        socket.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(time))?;
    }
    Ok(())
}

/// What the layers know of one connection.
#[derive(Debug)]
pub struct ConnState {
    peer: SocketAddr,
    /// Calls in flight (their answers included).
    calls: AtomicUsize,
    /// Since when no call has been in flight.
    idle_since: Mutex<Instant>,
    /// Answers waiting to be read, by number: since when.
    answers: Mutex<BTreeMap<u64, Instant>>,
    next_answer: AtomicU64,
    /// A call with a credential has been taken on it, or it was evicted:
    /// it no longer counts among the unproven.
    proven: AtomicBool,
    /// Its client has opened a stream (sent a request's headers).
    asked: AtomicBool,
    /// The credential whose call proved it.
    holder: std::sync::OnceLock<Holder>,
    closing: Mutex<Closing>,
    /// The connection task, to wake when a bound changes.
    waker: Mutex<Option<Waker>>,
    registry: Weak<Registry>,
}

/// Whether a connection is closing, and whether a call was taken on it: the
/// two are decided together, so that a connection closed before its first
/// call took none.
#[derive(Debug, Default)]
struct Closing {
    why: Option<String>,
    taken: bool,
}

impl ConnState {
    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// A call begins on the connection; it ends when the guard is dropped.
    pub fn call(self: &Arc<Self>) -> CallGuard {
        self.calls.fetch_add(1, Ordering::AcqRel);
        CallGuard {
            state: Arc::clone(self),
        }
    }

    /// An answer waits to be read from now until the guard is dropped.
    pub fn answer(self: &Arc<Self>) -> AnswerGuard {
        let id = self.next_answer.fetch_add(1, Ordering::Relaxed);
        let first = {
            let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
            answers.insert(id, Instant::now());
            answers.len() == 1
        };
        // The connection's timer may be set for later than this answer's
        // bound; while older answers wait, it is set for theirs, earlier.
        if first {
            self.wake();
        }
        AnswerGuard {
            state: Arc::clone(self),
            id,
        }
    }

    /// A call on the connection is about to run: false when the connection
    /// is closing, and the call must not run (its client is told it was not
    /// taken). A call with a credential (`holder`) proves the connection: it
    /// no longer counts against its address's unproven connections, and
    /// counts against the credential's.
    pub fn take_call(self: &Arc<Self>, holder: Option<&Holder>) -> bool {
        let mut closing = self.closing.lock().unwrap_or_else(PoisonError::into_inner);
        if closing.why.is_some() {
            return false;
        }
        closing.taken = true;
        let proves = holder.is_some() && !self.proven.swap(true, Ordering::AcqRel);
        let first_holder = holder.filter(|h| self.holder.set((*h).clone()).is_ok());
        drop(closing);
        if let Some(registry) = self.registry.upgrade() {
            if proves {
                registry.proven(self.peer.ip());
            }
            if let Some(holder) = first_holder {
                registry.held_by(self, holder);
            }
        }
        true
    }

    /// Whether it is closing (a bound, or a holder's limit, closed it).
    fn is_closing(&self) -> bool {
        self.closing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .why
            .is_some()
    }

    /// Closes an unproven connection for `why`, out of the unproven count;
    /// false when a call with a credential was taken on it first.
    fn evict(&self, why: &str) -> bool {
        let mut closing = self.closing.lock().unwrap_or_else(PoisonError::into_inner);
        if self.proven.swap(true, Ordering::AcqRel) {
            return false;
        }
        closing.why.get_or_insert_with(|| why.to_owned());
        true
    }

    fn closing_why(&self) -> Option<String> {
        self.closing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .why
            .clone()
    }

    /// Closes the connection: its next read or write fails, and the server
    /// drops it with every call and answer on it.
    pub fn close(&self, why: String) {
        self.closing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .why
            .get_or_insert(why);
        self.wake();
    }

    fn wake(&self) {
        if let Some(waker) = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            waker.wake();
        }
    }

    fn oldest_answer(&self) -> Option<Instant> {
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .next()
            .copied()
    }
}

/// A call in flight on a connection.
#[derive(Debug)]
pub struct CallGuard {
    state: Arc<ConnState>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.state.calls.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self
                .state
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Instant::now();
            self.state.wake();
        }
    }
}

/// An answer waiting to be read.
#[derive(Debug)]
pub struct AnswerGuard {
    state: Arc<ConnState>,
    id: u64,
}

impl Drop for AnswerGuard {
    fn drop(&mut self) {
        self.state
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// Connections the kernel completes and holds for the accept loop, at most
/// (capped by `net.core.somaxconn`).
const BACKLOG: u32 = 4096;

/// A listener on `addr` with a backlog of [`BACKLOG`] rather than tokio's
/// 1,024: when a burst of callers (a thousand agents' first calls) outruns the
/// accept loop, connections past the backlog are answered with SYN cookies,
/// and the kernel resets the ones whose cookie no longer checks out — a reset
/// that no client can tell from a call lost after it ran.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Raises this process's soft limit of open files to its hard limit, so that
/// connections are bounded by `--max-connections` rather than by a low
/// default; returns the limit in force.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                info!(
                    from = soft,
                    to = hard,
                    "open-file limit raised to the hard limit"
                );
                hard
            }
            Err(e) => {
                warn!(soft, hard, error = %e, "cannot raise the open-file limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(e) => {
            warn!(error = %e, "cannot read the open-file limit; assuming 1024");
            1024
        }
    }
}

#[cfg(test)]
mod tests;
