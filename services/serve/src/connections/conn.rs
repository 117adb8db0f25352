//! One accepted connection, wrapped: its bounds are checked where it is read
//! and written, and its frames followed for a goodbye.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::goaway::Http2;
use super::{ConnState, ConnectionLimits, HANDSHAKE_BYTES, Registry};

/// One accepted connection, within its bounds.
#[derive(Debug)]
pub struct Conn {
    pub(super) io: TcpStream,
    pub(super) state: Arc<ConnState>,
    pub(super) registry: Arc<Registry>,
    pub(super) accepted: Instant,
    /// Bytes read, counted up to [`HANDSHAKE_BYTES`].
    pub(super) read: usize,
    /// Its frames, for a goodbye.
    pub(super) http2: Http2,
    pub(super) said_goodbye: bool,
    /// Its client has opened a stream (mirrors `ConnState::asked`).
    pub(super) asked: bool,
    pub(super) timer: Pin<Box<Sleep>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let registry = &self.registry;
        registry.open.fetch_sub(1, Ordering::Relaxed);
        registry.dropped.notify_waiters();
        chorus_telemetry::metrics().connections.add(-1, &[]);
        {
            let mut by_peer = registry
                .by_peer
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if by_peer
                .get(&self.state.peer)
                .is_some_and(|w| w.as_ptr() == Arc::as_ptr(&self.state))
            {
                by_peer.remove(&self.state.peer);
            }
        }
        if !self.state.proven.swap(true, Ordering::AcqRel) {
            registry.proven(self.state.peer.ip());
        }
        if let Some(holder) = self.state.holder.get() {
            registry.let_go(holder);
        }
    }
}

impl Conn {
    /// The earliest bound the connection can break now, and what breaking it
    /// means.
    fn next_bound(&self) -> Option<(Instant, Bound)> {
        let limits = &self.registry.limits;
        let mut next: Option<(Instant, Bound)> = None;
        let mut consider = |at: Instant, bound: Bound| {
            if next.is_none_or(|(earliest, _)| at < earliest) {
                next = Some((at, bound));
            }
        };
        if self.read < HANDSHAKE_BYTES {
            consider(self.accepted + limits.handshake, Bound::Handshake);
        }
        if self.state.calls.load(Ordering::Acquire) == 0 {
            let since = *self
                .state
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            consider(since + limits.idle, Bound::Idle);
        }
        if let Some(since) = self.state.oldest_answer() {
            consider(since + limits.answer_send, Bound::Answer);
        }
        next
    }

    /// Ok while the connection is within its bounds; the error that ends it
    /// once it is not. Keeps the timer set for the next bound, woken with the
    /// connection's task.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        {
            let mut waker = self
                .state
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
        }
        loop {
            let closing = self
                .state
                .closing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(why) = closing.why.clone() {
                let taken = closing.taken;
                drop(closing);
                self.goodbye(taken, &why);
                return Err(io::Error::new(io::ErrorKind::ConnectionAborted, why));
            }
            drop(closing);
            let Some((at, bound)) = self.next_bound() else {
                return Ok(());
            };
            if self.timer.deadline() != at {
                self.timer.as_mut().reset(at);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            let why = bound.describe(&self.registry.limits);
            chorus_telemetry::metrics().refused(bound.reason(), "connection", None);
            self.registry.log_close(Some(self.state.peer), &why);
            self.state.close(why);
        }
    }
}

impl Conn {
    /// Tells the client, once, that the connection ends and which of its
    /// calls were taken (all it opened, or none when `taken` is false), then
    /// ends the server's side of it. The client's bytes not yet read are read
    /// and dropped first: the socket then closes without a reset that could
    /// come before the goodbye.
    fn goodbye(&mut self, taken: bool, why: &str) {
        if std::mem::replace(&mut self.said_goodbye, true) {
            return;
        }
        // Streams the server has not read were not taken, whatever `taken`.
        let last = if taken { self.http2.last_stream() } else { 0 };
        let mut unread = [0_u8; 4096];
        for _ in 0..16 {
            match self.io.try_read(&mut unread) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.http2.read(&unread[..n]),
            }
        }
        let Some(bytes) = self.http2.goodbye(last, why) else {
            return;
        };
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            match self.io.try_write(rest) {
                Ok(n) if n > 0 => rest = &rest[n..],
                _ => return,
            }
        }
        let _ = socket2::SockRef::from(&self.io).shutdown(std::net::Shutdown::Write);
        self.registry.linger(&self.io);
    }
}

/// A bound a connection can break.
#[derive(Debug, Clone, Copy)]
enum Bound {
    Handshake,
    Idle,
    Answer,
}

impl Bound {
    fn reason(self) -> &'static str {
        match self {
            Self::Handshake => "handshake-timeout",
            Self::Idle => "connection-idle",
            Self::Answer => "answer-unread",
        }
    }

    fn describe(self, limits: &ConnectionLimits) -> String {
        match self {
            Self::Handshake => format!(
                "it sent no HTTP/2 preface within {} s (--handshake-timeout-secs)",
                limits.handshake.as_secs()
            ),
            Self::Idle => format!(
                "it carried no call for {} s (--connection-idle-secs)",
                limits.idle.as_secs()
            ),
            Self::Answer => format!(
                "an answer waited {} s to be read (--answer-send-secs): the client does not read what it asked for",
                limits.answer_send.as_secs()
            ),
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.io.local_addr().ok(),
            remote_addr: Some(self.state.peer),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let new = &buf.filled()[before..];
        this.http2.read(new);
        if !this.asked && this.http2.last_stream() > 0 {
            this.asked = true;
            this.state.asked.store(true, Ordering::Release);
        }
        if this.read < HANDSHAKE_BYTES {
            this.read += new.len();
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.http2.written(&buf[..n]);
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = written {
            for buf in bufs {
                let part = n.min(buf.len());
                this.http2.written(&buf[..part]);
                n -= part;
                if n == 0 {
                    break;
                }
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
