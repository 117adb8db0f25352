//! The concurrency limit, with load shedding, per kind of caller. It sits
//! inside the auth layer, so no call holds a place before its credential is
//! checked, and it tells callers apart by the principal that layer found:
//!
//! - **agents** (run tokens) have places of their own (`--agent-max-concurrent-
//!   requests`, `--agent-max-concurrent-streams`) that no API key can take;
//! - **API keys** (and client certificates) share `--max-concurrent-requests`
//!   unary calls and `--max-concurrent-streams` streams;
//! - **no credential** (the open methods: server reflection) gets a few places
//!   (`--max-anonymous-calls`), and each of its streams ends after
//!   `--anonymous-stream-secs`.
//!
//! Keys without reserved room (all but admins' and tool-exec's) hold
//! together at most seven eighths of the API keys' calls and of their
//! streams: however many read-only keys fill their shares, an admin is
//! served.
//!
//! Within its kind, one credential — a key, or a run — holds at most
//! `--max-concurrent-requests-per-credential` unary calls and
//! `--max-concurrent-streams-per-credential` streams, or what a `--quota` of
//! its key, its role or agents says: one busy dashboard cannot take every
//! place of its kind.
//!
//! A call whose client sends one message takes its credential's place, then
//! waits at most `--request-body-secs` for that message, and only then takes
//! a place of its kind: headers without a message stall only their sender.
//!
//! Unary calls and streams are separate pools, so long streams (WatchTask,
//! Handoff) never starve unary calls. A call beyond a limit is not queued: it
//! is answered at once RESOURCE_EXHAUSTED, with a message naming the limit and
//! its flag and a `grpc-retry-pushback-ms` hint. Nothing of such a call has
//! run, so retrying it is always safe. Health is never counted.
//!
//! A unary call holds its places until its client has taken its answer; a
//! stream until it ends (its response body is finished or dropped, e.g. when
//! the client goes). Each frame sent counts as unread bytes of its caller's
//! kind and credential until the next is asked for; past their limits the
//! answer ends RESOURCE_EXHAUSTED. The connection learns of every call and of
//! every unary answer waiting to be read ([`crate::connections`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tower::{Layer, Service};
use tracing::debug;

use crate::calls::{CallKind, Calls};
use crate::connections::{AnswerGuard, CallGuard, ConnState, Connections};

/// Metadata key of the retry hint (gRFC A6), in milliseconds.
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

/// How many calls a server serves at once, per kind of caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Unary calls of API keys at once (`--max-concurrent-requests`).
    pub unary: usize,
    /// Streams of API keys at once (`--max-concurrent-streams`).
    pub streams: usize,
    /// Unary calls of agents at once (`--agent-max-concurrent-requests`).
    pub agent_unary: usize,
    /// Streams of agents at once (`--agent-max-concurrent-streams`).
    pub agent_streams: usize,
    /// Unary calls of one key or one run at once
    /// (`--max-concurrent-requests-per-credential`).
    pub credential_unary: usize,
    /// Streams of one key or one run at once
    /// (`--max-concurrent-streams-per-credential`).
    pub credential_streams: usize,
    /// Calls and streams without a credential at once, each pool
    /// (`--max-anonymous-calls`).
    pub anonymous: usize,
    /// How long a stream without a credential may last
    /// (`--anonymous-stream-secs`).
    pub anonymous_stream: Duration,
    /// How long a refused caller is told to wait before retrying.
    pub retry_after: Duration,
    /// How long the request of a call whose client sends one message may
    /// take to arrive once its headers have (`--request-body-secs`).
    pub request_body: Duration,
    /// Bytes of a request read before the call is passed on: past them the
    /// service's own message limit answers.
    pub request_bytes: usize,
    /// Bytes of answers of API keys sent but not yet read
    /// (`--max-unread-answer-bytes`).
    pub answer_bytes: usize,
    /// Bytes of answers of agents sent but not yet read
    /// (`--agent-max-unread-answer-bytes`).
    pub agent_answer_bytes: usize,
    /// Bytes of answers of one key or one run sent but not yet read
    /// (`--max-unread-answer-bytes-per-credential`).
    pub credential_answer_bytes: usize,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            unary: 256,
            streams: 1024,
            agent_unary: 1024,
            agent_streams: 1024,
            credential_unary: 64,
            credential_streams: 256,
            anonymous: 32,
            anonymous_stream: Duration::from_secs(60),
            retry_after: Duration::from_secs(1),
            request_body: Duration::from_secs(15),
            request_bytes: 16 * MIB,
            answer_bytes: 128 * MIB,
            agent_answer_bytes: 256 * MIB,
            credential_answer_bytes: 32 * MIB,
        }
    }
}

const MIB: usize = 1024 * 1024;

/// Bytes of answers without a credential (reflection) sent but not yet read.
const ANONYMOUS_ANSWER_BYTES: usize = 8 * MIB;

/// Refuses calls beyond [`Capacity`] at once.
#[derive(Debug, Clone)]
pub struct LoadShedLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    calls: Calls,
    keys: Pools,
    /// The part of the keys' unary calls and streams that keys without
    /// reserved room may hold (see [`crate::unreserved_share`]).
    unreserved: Unreserved,
    agents: Pools,
    anonymous: Pools,
    per_credential: PerCredential,
    anonymous_stream: Duration,
    retry_after: Duration,
    request_body: Duration,
    request_bytes: usize,
    /// The connections calls come on, when the server bounds them.
    connections: Option<Connections>,
    /// "the orchestrator", "tool-exec": who says it is busy.
    service: &'static str,
}

/// The unary calls and streams of API keys that keys without reserved room
/// may hold together.
#[derive(Debug)]
struct Unreserved {
    unary: Pool,
    streams: Pool,
}

/// The unary and stream pools of one kind of caller, and its bytes of
/// answers not yet read.
#[derive(Debug)]
struct Pools {
    unary: Pool,
    streams: Pool,
    answers: Pool,
}

#[derive(Debug)]
struct Pool {
    places: Arc<Semaphore>,
    limit: usize,
    what: &'static str,
    flag: &'static str,
}

impl Pool {
    fn new(limit: usize, what: &'static str, flag: &'static str) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            places: Arc::new(Semaphore::new(limit)),
            limit,
            what,
            flag,
        }
    }

    fn take(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n).ok()?;
        Arc::clone(&self.places).try_acquire_many_owned(n).ok()
    }
}

impl LoadShedLayer {
    /// `service` names the server in refusals ("the orchestrator");
    /// `connections`, when the server bounds its connections, learns of the
    /// calls on each.
    pub fn new(
        calls: Calls,
        capacity: Capacity,
        quotas: Vec<Quota>,
        connections: Option<Connections>,
        service: &'static str,
    ) -> Self {
        let pools =
            |unary, streams, answers, what: [&'static str; 3], flag: [&'static str; 3]| Pools {
                unary: Pool::new(unary, what[0], flag[0]),
                streams: Pool::new(streams, what[1], flag[1]),
                answers: Pool::new(answers, what[2], flag[2]),
            };
        Self {
            shared: Arc::new(Shared {
                calls,
                keys: pools(
                    capacity.unary,
                    capacity.streams,
                    capacity.answer_bytes,
                    [
                        "calls of API keys",
                        "streams of API keys",
                        "bytes of API keys' answers not yet read",
                    ],
                    [
                        "--max-concurrent-requests",
                        "--max-concurrent-streams",
                        "--max-unread-answer-bytes",
                    ],
                ),
                unreserved: Unreserved {
                    unary: Pool::new(
                        crate::unreserved_share(capacity.unary),
                        "calls of keys other than admins' (seven eighths of --max-concurrent-requests)",
                        "--max-concurrent-requests",
                    ),
                    streams: Pool::new(
                        crate::unreserved_share(capacity.streams),
                        "streams of keys other than admins' (seven eighths of --max-concurrent-streams)",
                        "--max-concurrent-streams",
                    ),
                },
                agents: pools(
                    capacity.agent_unary,
                    capacity.agent_streams,
                    capacity.agent_answer_bytes,
                    [
                        "calls of agents",
                        "streams of agents",
                        "bytes of agents' answers not yet read",
                    ],
                    [
                        "--agent-max-concurrent-requests",
                        "--agent-max-concurrent-streams",
                        "--agent-max-unread-answer-bytes",
                    ],
                ),
                anonymous: pools(
                    capacity.anonymous,
                    capacity.anonymous,
                    ANONYMOUS_ANSWER_BYTES,
                    [
                        "calls without a credential",
                        "streams without a credential",
                        "bytes of answers without a credential not yet read",
                    ],
                    [
                        "--max-anonymous-calls",
                        "--max-anonymous-calls",
                        "--max-anonymous-calls",
                    ],
                ),
                per_credential: PerCredential {
                    held: Arc::default(),
                    limits: [
                        capacity.credential_unary.max(1),
                        capacity.credential_streams.max(1),
                        capacity.credential_answer_bytes.max(1),
                    ],
                    quotas,
                },
                anonymous_stream: capacity.anonymous_stream,
                retry_after: capacity.retry_after,
                request_body: capacity.request_body,
                request_bytes: capacity.request_bytes,
                connections,
                service,
            }),
        }
    }
}

impl<S> Layer<S> for LoadShedLayer {
    type Service = LoadShed<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LoadShed {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// [`LoadShedLayer`]'s service.
#[derive(Debug, Clone)]
pub struct LoadShed<S> {
    inner: S,
    shared: Arc<Shared>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<http::Request<Body>> for LoadShed<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The service that was polled ready serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(Arc::clone(&self.shared).serve(inner, request))
    }
}

/// A call refused before anything of it ran.
struct Refused {
    status: Status,
    reason: &'static str,
}

impl Shared {
    /// Serves `request` with `inner` once it holds its places, or refuses it.
    async fn serve<S>(
        self: Arc<Self>,
        mut inner: S,
        request: http::Request<Body>,
    ) -> Result<http::Response<Body>, S::Error>
    where
        S: Service<http::Request<Body>, Response = http::Response<Body>>,
    {
        let kind = self.calls.kind(request.uri().path());
        let conn = self
            .connections
            .as_ref()
            .and_then(|c| c.of(request.extensions()));
        let caller = Caller::of(request.extensions());
        if let Some(conn) = &conn
            && !conn.take_call(caller.holder().as_ref())
        {
            // Its client is told by the connection's GOAWAY that this call
            // was not taken; it may send it again.
            let (kind_label, credential) = caller.labels();
            chorus_telemetry::metrics().refused("connection-closing", kind_label, credential);
            return Ok(Status::unavailable(
                "the connection is closing and this call was not taken: send it again",
            )
            .into_http());
        }
        let on_conn = conn.as_ref().map(ConnState::call);
        if kind == CallKind::Health {
            let response = inner.call(request).await?;
            return Ok(response.map(|body| Body::new(Held::health(body, on_conn))));
        }
        let path = request.uri().path().to_owned();
        let (request, places) = match self.admit(kind, &caller, request).await {
            Ok(admitted) => admitted,
            Err(refused) => {
                let (kind_label, credential) = caller.labels();
                chorus_telemetry::metrics().refused(refused.reason, kind_label, credential);
                debug!(method = %path, caller = ?caller, reason = refused.reason, "call refused");
                return Ok(refused.status.into_http());
            }
        };
        let lifetime = matches!(caller, Caller::Anonymous)
            .then_some(self.anonymous_stream)
            .filter(|_| kind == CallKind::Stream);
        let held = HeldPlaces(Arc::new(Mutex::new(Some(places))));
        let mut request = request;
        request.extensions_mut().insert(held.clone());
        let response = inner.call(request).await?;
        // A unary answer waits to be read from when it is made: a client that
        // leaves its window shut never lets its first frame be asked for.
        let made = conn
            .as_ref()
            .filter(|_| kind != CallKind::Stream)
            .map(ConnState::answer);
        let shared = Arc::clone(&self);
        Ok(response.map(|body| {
            Body::new(Held {
                body,
                places: held.take(),
                made,
                on_conn,
                answers: Some(Answers {
                    conn,
                    caller,
                    shared,
                    unread: None,
                }),
                ends: lifetime.map(|d| (Box::pin(tokio::time::sleep(d)), d)),
                ended: false,
            })
        }))
    }

    /// The places of a call (its credential's first, then its request's
    /// message, then its kind's), and the request with its message read.
    async fn admit(
        &self,
        kind: CallKind,
        caller: &Caller,
        request: http::Request<Body>,
    ) -> Result<(http::Request<Body>, Places), Refused> {
        let stream = kind == CallKind::Stream;
        let pools = self.pools(caller);
        let pool = if stream { &pools.streams } else { &pools.unary };
        let own = match caller.who() {
            Some(who) => {
                let which = if stream { STREAMS } else { UNARY };
                Some(self.per_credential.take(caller, which, 1).ok_or_else(|| {
                    let (limit, what, flag) = self.per_credential.refusal_of(caller, which);
                    Refused {
                        status: self.refusal(limit, what, flag, &format!(" for {who}")),
                        reason: "credential-calls",
                    }
                })?)
            }
            None => None,
        };
        // A call waiting for its message holds no place of its kind: a
        // client that sends headers and no message stalls only itself.
        let request = if self.calls.client_streams(request.uri().path()) {
            request
        } else {
            self.receive(request).await?
        };
        let place = pool.take(1).ok_or_else(|| Refused {
            status: self.refusal(pool.limit, pool.what, pool.flag, ""),
            reason: "calls",
        })?;
        let share = match caller {
            Caller::Key(..) if !caller.reserved() => {
                let shared = if stream {
                    &self.unreserved.streams
                } else {
                    &self.unreserved.unary
                };
                Some(shared.take(1).ok_or_else(|| Refused {
                    status: self.refusal(shared.limit, shared.what, shared.flag, ""),
                    reason: "calls",
                })?)
            }
            _ => None,
        };
        Ok((
            request,
            Places {
                _kind: place,
                _share: share,
                _own: own,
            },
        ))
    }

    fn pools(&self, caller: &Caller) -> &Pools {
        match caller {
            Caller::Agent(_) => &self.agents,
            Caller::Key(..) => &self.keys,
            Caller::Anonymous => &self.anonymous,
        }
    }

    /// The request with its message read, within `request_body` of its
    /// headers; up to `request_bytes`, past which the rest is passed on
    /// unread for the service's message limit to answer.
    async fn receive(&self, request: http::Request<Body>) -> Result<http::Request<Body>, Refused> {
        let (parts, body) = request.into_parts();
        let limit = self.request_bytes.saturating_add(GRPC_FRAME_HEADER);
        match tokio::time::timeout(self.request_body, read_up_to(body, limit)).await {
            Ok(Ok(body)) => Ok(http::Request::from_parts(parts, body)),
            Ok(Err(status)) => Err(Refused {
                status,
                reason: "request-unreadable",
            }),
            Err(_) => Err(Refused {
                status: Status::deadline_exceeded(format!(
                    "the request's message did not arrive within {} s of its headers (--request-body-secs); nothing of this call was done: send the message with the headers",
                    self.request_body.as_secs()
                )),
                reason: "request-body-timeout",
            }),
        }
    }

    fn refusal(&self, limit: usize, what: &str, flag: &str, whose: &str) -> Status {
        let ms = self.retry_after.as_millis();
        let mut metadata = MetadataMap::new();
        if let Ok(value) = ms.to_string().parse() {
            metadata.insert(RETRY_PUSHBACK, value);
        }
        Status::with_metadata(
            Code::ResourceExhausted,
            format!(
                "{} is serving its limit of {limit} {what}{whose} at once ({flag}); nothing of this call was done: retry after {ms} ms",
                self.service
            ),
            metadata,
        )
    }
}

/// What an admitted call holds until it ends: its place of its kind, of the
/// unreserved share (keys without reserved room), of its credential.
#[derive(Debug)]
struct Places {
    _kind: OwnedSemaphorePermit,
    _share: Option<OwnedSemaphorePermit>,
    _own: Option<CredentialPlace>,
}

/// An admitted call's places, given to its handler as a request extension:
/// a call that is about to wait for a person, not for the service (an
/// approval), gives them back, so that however many calls wait for people
/// at once, no caller's or kind's places fill and other calls are served.
/// What the call does after its wait holds no place; the places of the
/// calls that caused it (an agent's call to tool-exec) still bound it.
#[derive(Debug, Clone)]
pub struct HeldPlaces(Arc<Mutex<Option<Places>>>);

impl HeldPlaces {
    /// Gives back the call's places now (once; later calls do nothing).
    pub fn give_back(&self) {
        drop(self.take());
    }

    fn take(&self) -> Option<Places> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The bytes of an answer sent but not yet read, counted against its
/// caller's kind and credential, and the connection's timer.
struct Answers {
    conn: Option<Arc<ConnState>>,
    caller: Caller,
    shared: Arc<Shared>,
    unread: Option<Unread>,
}

struct Unread {
    #[allow(dead_code, reason = "held for their drop")]
    held: (
        OwnedSemaphorePermit,
        Option<CredentialPlace>,
        Option<AnswerGuard>,
    ),
}

impl Answers {
    /// Counts `bytes` as sent and unread until the next frame is asked for;
    /// the refusal when that is over a limit.
    fn send(&mut self, bytes: usize) -> Result<(), Status> {
        self.unread = None;
        let shared = &self.shared;
        let pool = &shared.pools(&self.caller).answers;
        let Some(place) = pool.take(bytes) else {
            self.refused("unread-answer-bytes");
            return Err(shared.refusal(pool.limit, pool.what, pool.flag, ""));
        };
        let own = match self.caller.who() {
            Some(who) => match shared
                .per_credential
                .take(&self.caller, ANSWER_BYTES, bytes)
            {
                Some(own) => Some(own),
                None => {
                    self.refused("credential-unread-answer-bytes");
                    let (limit, what, flag) =
                        shared.per_credential.refusal_of(&self.caller, ANSWER_BYTES);
                    return Err(shared.refusal(limit, what, flag, &format!(" for {who}")));
                }
            },
            None => None,
        };
        self.unread = Some(Unread {
            held: (place, own, self.conn.as_ref().map(ConnState::answer)),
        });
        Ok(())
    }

    fn refused(&self, reason: &'static str) {
        let (kind, credential) = self.caller.labels();
        chorus_telemetry::metrics().refused(reason, kind, credential);
    }
}

/// A response body that holds a call's places until it ends or is dropped
/// (a unary call's until its answer has been taken, not only made), counts
/// its frames as unread until the next is asked for, and ends a stream of a
/// caller without a credential when its time is up.
struct Held {
    body: Body,
    #[allow(dead_code, reason = "held for their drop")]
    places: Option<Places>,
    /// A unary answer's wait to be read, until its end is asked for.
    #[allow(dead_code, reason = "held for its drop")]
    made: Option<AnswerGuard>,
    #[allow(dead_code, reason = "held for its drop")]
    on_conn: Option<CallGuard>,
    answers: Option<Answers>,
    ends: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
    ended: bool,
}

impl Held {
    /// A health answer: only the connection learns of it.
    fn health(body: Body, on_conn: Option<CallGuard>) -> Self {
        Self {
            body,
            places: None,
            made: None,
            on_conn,
            answers: None,
            ends: None,
            ended: false,
        }
    }

    /// Ends the answer with `status` in its trailers.
    fn end_with(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.ended = true;
        self.answers = None;
        self.places = None;
        self.made = None;
        let mut trailers = http::HeaderMap::new();
        for (name, value) in status.into_http::<Body>().headers() {
            if name.as_str().starts_with("grpc-") {
                trailers.insert(name.clone(), value.clone());
            }
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // Asked for the next frame: the last one has been taken.
        if let Some(answers) = &mut self.answers {
            answers.unread = None;
        }
        if let Some((ends, lifetime)) = &mut self.ends
            && ends.as_mut().poll(cx).is_ready()
        {
            let status = Status::deadline_exceeded(format!(
                "a stream without a credential lasts at most {} s (--anonymous-stream-secs); open a new one",
                lifetime.as_secs()
            ));
            return self.end_with(status);
        }
        let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
        let sent = match &frame {
            Some(Ok(frame)) => frame.data_ref().map(Bytes::len),
            _ => None,
        };
        match (sent, &mut self.answers) {
            (Some(bytes), Some(answers)) => {
                if let Err(status) = answers.send(bytes) {
                    return self.end_with(status);
                }
            }
            // Trailers or the end: nothing is left to read.
            (None, _) => {
                self.answers = None;
                self.made = None;
            }
            (Some(_), None) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

mod credential;
mod request;

use credential::{ANSWER_BYTES, Caller, CredentialPlace, PerCredential, STREAMS, UNARY};
pub use credential::{Quota, QuotaOf};
use request::{GRPC_FRAME_HEADER, read_up_to};

#[cfg(test)]
mod tests;
