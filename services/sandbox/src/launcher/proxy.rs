//! The egress proxy of a proxied sandbox: it runs outside the sandbox (in the
//! launcher's proxy process, on the host's network) and accepts on listening
//! sockets that init made inside the sandbox's network namespace, so it is the
//! sandbox's only way out.
//!
//! - On [`crate::egress::PROXY_ADDR`]: an HTTP proxy. `CONNECT host:port` and
//!   absolute-form requests (`GET http://host/path`, sent on with
//!   `Connection: close`) to a destination the policy allows; the proxy
//!   resolves names itself, checks every address (see [`crate::egress`]),
//!   connects to those it checked and splices both ways. Anything else is
//!   answered with an error status and a one-line reason.
//! - On each forward's address: every connection goes to its target.
//!
//! Bounded: at most [`MAX_CONNECTIONS`] connections at once (more wait in the
//! listen backlog), a request head within [`HANDSHAKE`] and [`MAX_HEAD`]
//! bytes, a connection within [`CONNECT_TIMEOUT`], and a spliced connection
//! closed after [`IDLE`] without a byte either way.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep_until, timeout};

use crate::egress::{Destination, EgressRule, Host, canonical, refusal};
use crate::questions::Asker;

/// Most connections (proxied and forwarded) open at once per sandbox.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request head.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// Largest request head.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long resolving and connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A spliced connection without a byte either way for this long is closed.
pub const IDLE: Duration = Duration::from_secs(300);

/// What the proxy checks requests against.
#[derive(Debug)]
pub struct Rules {
    pub allow: Vec<EgressRule>,
    /// The host's own addresses (treated as private).
    pub local: Vec<IpAddr>,
    /// The channel the service is asked on before each connection the
    /// egress list allows (see [`crate::questions`]).
    pub questions: Option<std::os::fd::OwnedFd>,
}

/// The rules, and who is asked once they allow a connection.
#[derive(Debug)]
struct Checks {
    allow: Vec<EgressRule>,
    local: Vec<IpAddr>,
    asker: Option<Asker>,
}

/// What a listener does with its connections.
#[derive(Debug, Clone)]
enum Role {
    Proxy(Arc<Checks>),
    Forward(Arc<str>),
}

/// Serves the proxy listener and the forwards until the process is killed.
///
/// # Errors
/// The runtime or a listener could not be set up.
pub fn run(
    proxy: std::net::TcpListener,
    forwards: Vec<(std::net::TcpListener, String)>,
    rules: Rules,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    runtime.block_on(async move {
        let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        for (listener, target) in forwards {
            listener.set_nonblocking(true)?;
            let listener = TcpListener::from_std(listener)?;
            tokio::spawn(accept(
                listener,
                Role::Forward(target.into()),
                limit.clone(),
            ));
        }
        proxy.set_nonblocking(true)?;
        let proxy = TcpListener::from_std(proxy)?;
        let asker = match rules.questions {
            Some(channel) => {
                let channel = std::os::unix::net::UnixStream::from(channel);
                channel.set_nonblocking(true)?;
                Some(Asker::start(tokio::net::UnixStream::from_std(channel)?))
            }
            None => None,
        };
        let checks = Checks {
            allow: rules.allow,
            local: rules.local,
            asker,
        };
        accept(proxy, Role::Proxy(Arc::new(checks)), limit).await;
        Ok(())
    })
}

async fn accept(listener: TcpListener, role: Role, limit: Arc<Semaphore>) {
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // A client that left before its connection was taken, or no
            // descriptor to spare: the next one may do.
            Err(_) => {
                drop(permit);
                tokio::task::yield_now().await;
                continue;
            }
        };
        let role = role.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match role {
                Role::Proxy(checks) => proxy(stream, &checks).await,
                Role::Forward(target) => forward(stream, &target).await,
            }
        });
    }
}

/// One client of the HTTP proxy.
async fn proxy(mut client: TcpStream, rules: &Checks) {
    let Ok(Ok((head, rest))) = timeout(HANDSHAKE, read_head(&mut client)).await else {
        respond(&mut client, 408, "no complete request head in time").await;
        return;
    };
    let request = match Request::parse(&head) {
        Ok(request) => request,
        Err((status, why)) => return respond(&mut client, status, &why).await,
    };
    let (destination, first) = match request.target() {
        Ok(target) => target,
        Err((status, why)) => return respond(&mut client, status, &why).await,
    };
    // Where connections are asked about, a client that goes away while its
    // connection is decided (an ask waiting for a person) takes its question
    // with it. (One that only shuts its sending side looks the same.)
    let reached = if rules.asker.is_some() {
        tokio::select! {
            reached = reach(&destination, rules) => reached,
            () = gone(&client) => return,
        }
    } else {
        reach(&destination, rules).await
    };
    let upstream = match reached {
        Ok(upstream) => upstream,
        Err((status, why)) => return respond(&mut client, status, &why).await,
    };
    let mut upstream = upstream;
    let sent = match first {
        // CONNECT: the tunnel is open; what the client sent after its head
        // (a TLS hello) goes on.
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Some(head) => upstream.write_all(&head).await,
    };
    if sent.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    splice(client, upstream).await;
}

/// Resolves once `client` has closed its side; never when it sends more
/// first (what it sent is left to be read).
async fn gone(client: &TcpStream) {
    let mut byte = [0u8; 1];
    match client.peek(&mut byte).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// One connection to a forward: to its target, whatever it is.
async fn forward(client: TcpStream, target: &str) {
    let connected = timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await;
    if let Ok(Ok(upstream)) = connected {
        splice(client, upstream).await;
    }
}

/// Checks `destination` against the rules, resolves it, checks every
/// address, asks the service (when it is to be asked), and connects to one
/// of them.
async fn reach(destination: &Destination, rules: &Checks) -> Result<TcpStream, (u16, String)> {
    if !rules.allow.iter().any(|r| r.allows(destination)) {
        let allowed = if rules.allow.is_empty() {
            "the agent's egress list is empty, so nothing outside is reachable".to_owned()
        } else {
            let list: Vec<String> = rules.allow.iter().map(ToString::to_string).collect();
            format!("the agent's egress list allows only {}", list.join(", "))
        };
        return Err((
            403,
            format!("egress to {destination} is not allowed: {allowed}"),
        ));
    }
    let port = destination.port;
    let addresses: Vec<SocketAddr> = match &destination.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
        Host::Name(name) => {
            match timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((name.as_str(), port)),
            )
            .await
            {
                Ok(Ok(found)) => found.collect(),
                Ok(Err(e)) => return Err((502, format!("cannot resolve {name}: {e}"))),
                Err(_) => return Err((504, format!("resolving {name} took too long"))),
            }
        }
    };
    if addresses.is_empty() {
        return Err((502, format!("{destination} resolves to no address")));
    }
    let mut checked = Vec::with_capacity(addresses.len());
    for address in addresses {
        let ip = canonical(address.ip());
        let named = rules
            .allow
            .iter()
            .any(|r| r.port() == port && r.names_address(ip));
        if let Some(why) = refusal(ip, named, &rules.local) {
            let is = match destination.host {
                Host::Ip(_) => "it is",
                Host::Name(_) => "it resolves to",
            };
            return Err((
                403,
                format!(
                    "egress to {destination} is refused: {is} {ip}, {why}; the host's loopback, link-local and metadata addresses are never reachable"
                ),
            ));
        }
        checked.push(SocketAddr::new(ip, port));
    }
    if let Some(asker) = &rules.asker {
        let host = match &destination.host {
            Host::Name(name) => name.clone(),
            Host::Ip(ip) => ip.to_string(),
        };
        asker.ask(host, port).await.map_err(|why| (403, why))?;
    }
    match timeout(CONNECT_TIMEOUT, TcpStream::connect(&checked[..])).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err((502, format!("cannot connect to {destination}: {e}"))),
        Err(_) => Err((504, format!("connecting to {destination} took too long"))),
    }
}

/// Reads up to the end of the request head; returns the head and what came
/// after it.
async fn read_head(client: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let searched_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[searched_from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
        {
            let end = searched_from + end + 4;
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::other("request head too large"));
        }
    }
}

/// A parsed request head.
struct Request {
    method: String,
    target: String,
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
}

type Refusal = (u16, String);

impl Request {
    fn parse(head: &[u8]) -> Result<Self, Refusal> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) | Err(_) => {
                return Err((400, "the request is not HTTP/1".to_owned()));
            }
        }
        Ok(Self {
            method: request.method.unwrap_or_default().to_owned(),
            target: request.path.unwrap_or_default().to_owned(),
            version: request.version.unwrap_or(1),
            headers: request
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                .collect(),
        })
    }

    /// Where the request goes, and the head to send there (None for
    /// CONNECT).
    fn target(&self) -> Result<(Destination, Option<Vec<u8>>), Refusal> {
        if self.method == "CONNECT" {
            let destination =
                Destination::parse(&self.target).map_err(|e| (400, format!("CONNECT {e}")))?;
            return Ok((destination, None));
        }
        let Some(rest) = strip_prefix_ignore_case(&self.target, "http://") else {
            return Err((
                400,
                "this proxy takes CONNECT host:port, or an absolute http:// URL".to_owned(),
            ));
        };
        let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.contains('@') {
            return Err((400, "credentials in a proxied URL are refused".to_owned()));
        }
        let with_port = if authority.ends_with(']') || !authority.contains(':') {
            format!("{authority}:80")
        } else {
            authority.to_owned()
        };
        let destination = Destination::parse(&with_port).map_err(|e| (400, e))?;
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        let mut head = format!("{} {path} HTTP/1.{}\r\n", self.method, self.version).into_bytes();
        for (name, value) in &self.headers {
            if matches!(
                name.as_str(),
                "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
            ) {
                continue;
            }
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"Connection: close\r\n\r\n");
        Ok((destination, Some(head)))
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Answers with `status` and `why` as a one-line body, and closes.
async fn respond(client: &mut TcpStream, status: u16, why: &str) {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("chorus-sandbox: {why}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = timeout(HANDSHAKE, client.write_all(response.as_bytes())).await;
    let _ = client.shutdown().await;
}

/// Copies both ways until both sides are done, or nothing moved for [`IDLE`].
async fn splice(client: TcpStream, upstream: TcpStream) {
    let start = Instant::now();
    let activity = Arc::new(AtomicU64::new(0));
    let mut client = Watched {
        inner: client,
        start,
        activity: activity.clone(),
    };
    let mut upstream = Watched {
        inner: upstream,
        start,
        activity: activity.clone(),
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        () = idle(start, &activity) => {}
    }
}

/// Returns once nothing moved for [`IDLE`].
async fn idle(start: Instant, activity: &AtomicU64) {
    loop {
        let last = Duration::from_millis(activity.load(Ordering::Relaxed));
        let deadline = start + last + IDLE;
        if Instant::now() >= deadline {
            return;
        }
        sleep_until(deadline).await;
    }
}

/// A stream that notes when bytes last moved through it.
struct Watched {
    inner: TcpStream,
    start: Instant,
    activity: Arc<AtomicU64>,
}

impl Watched {
    fn moved(&self) {
        let since = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.activity.store(since, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(head: &str) -> Result<(Destination, Option<String>), Refusal> {
        let request = Request::parse(head.as_bytes())?;
        request
            .target()
            .map(|(d, h)| (d, h.map(|h| String::from_utf8_lossy(&h).into_owned())))
    }

    #[test]
    fn connect_names_its_destination() {
        let (dest, head) =
            target("CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443\r\n\r\n")
                .expect("connect");
        assert_eq!(dest.to_string(), "github.com:443");
        assert!(head.is_none());
        let (status, why) = target("CONNECT github.com HTTP/1.1\r\n\r\n").expect_err("no port");
        assert_eq!(status, 400, "{why}");
    }

    #[test]
    fn absolute_requests_go_on_in_origin_form_and_close() {
        let (dest, head) = target(
            "GET http://Example.com/a?b HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .expect("get");
        assert_eq!(dest.to_string(), "example.com:80");
        let head = head.expect("head");
        assert!(head.starts_with("GET /a?b HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("accept: */*\r\n"), "{head}");
        assert!(
            !head.to_ascii_lowercase().contains("proxy-connection"),
            "{head}"
        );
        assert!(head.ends_with("Connection: close\r\n\r\n"), "{head}");
        let (dest, _) = target("GET http://[2001:db8::1]:8080 HTTP/1.1\r\n\r\n").expect("v6");
        assert_eq!(dest.to_string(), "[2001:db8::1]:8080");
        for refused in [
            "GET /relative HTTP/1.1\r\n\r\n",
            "GET https://example.com/ HTTP/1.1\r\n\r\n",
            "GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",
            "GET http://2130706433/ HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(target(refused).expect_err(refused).0, 400, "{refused}");
        }
    }
}
