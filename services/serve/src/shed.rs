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
//! Within its kind, one credential — a key, or a run — holds at most
//! `--max-concurrent-requests-per-credential` unary calls and
//! `--max-concurrent-streams-per-credential` streams: one busy dashboard
//! cannot take every place of its kind.
//!
//! Unary calls and streams are separate pools, so long streams (WatchTask,
//! Handoff) never starve unary calls. A call beyond a limit is not queued: it
//! is answered at once RESOURCE_EXHAUSTED, with a message naming the limit and
//! its flag and a `grpc-retry-pushback-ms` hint. Nothing of such a call has
//! run, so retrying it is always safe. Health is never counted.
//!
//! A unary call holds its places until its answer is ready; a stream until it
//! ends (its response body is finished or dropped, e.g. when the client goes).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use chorus_auth::Principal;
use http_body::Frame;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tower::{Layer, Service};
use tracing::debug;

use crate::calls::{CallKind, Calls};

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
        }
    }
}

/// Refuses calls beyond [`Capacity`] at once.
#[derive(Debug, Clone)]
pub struct LoadShedLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    calls: Calls,
    keys: Pools,
    agents: Pools,
    anonymous: Pools,
    per_credential: PerCredential,
    anonymous_stream: Duration,
    retry_after: Duration,
    /// "the orchestrator", "tool-exec": who says it is busy.
    service: &'static str,
}

/// The unary and stream pools of one kind of caller.
#[derive(Debug)]
struct Pools {
    unary: Pool,
    streams: Pool,
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
}

/// How many unary calls and streams each credential holds now.
#[derive(Debug)]
struct PerCredential {
    held: Arc<Mutex<HashMap<String, [usize; 2]>>>,
    limits: [usize; 2],
}

/// One place of one credential, given back when dropped.
struct CredentialPlace {
    held: Arc<Mutex<HashMap<String, [usize; 2]>>>,
    who: String,
    pool: usize,
}

impl Drop for CredentialPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(counts) = held.get_mut(&self.who) {
            counts[self.pool] = counts[self.pool].saturating_sub(1);
            if *counts == [0, 0] {
                held.remove(&self.who);
            }
        }
    }
}

impl PerCredential {
    /// A place of `who` in `pool` (0: unary, 1: streams), unless it holds its
    /// limit already.
    fn take(&self, who: &str, pool: usize) -> Option<CredentialPlace> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let counts = held.entry(who.to_owned()).or_insert([0, 0]);
        if counts[pool] >= self.limits[pool] {
            return None;
        }
        counts[pool] += 1;
        Some(CredentialPlace {
            held: Arc::clone(&self.held),
            who: who.to_owned(),
            pool,
        })
    }
}

/// Who a call is from, as the auth layer found.
enum Caller {
    Agent(String),
    Key(String),
    Anonymous,
}

fn caller(extensions: &http::Extensions) -> Caller {
    match extensions.get::<Principal>() {
        Some(Principal::Run { verified, .. }) => Caller::Agent(verified.grant.run_id.clone()),
        Some(Principal::Key { id, .. }) => Caller::Key(id.clone()),
        Some(Principal::Internal) => Caller::Agent("internal".to_owned()),
        None => Caller::Anonymous,
    }
}

impl LoadShedLayer {
    /// `service` names the server in refusals ("the orchestrator").
    pub fn new(calls: Calls, capacity: Capacity, service: &'static str) -> Self {
        Self {
            shared: Arc::new(Shared {
                calls,
                keys: Pools {
                    unary: Pool::new(
                        capacity.unary,
                        "calls of API keys",
                        "--max-concurrent-requests",
                    ),
                    streams: Pool::new(
                        capacity.streams,
                        "streams of API keys",
                        "--max-concurrent-streams",
                    ),
                },
                agents: Pools {
                    unary: Pool::new(
                        capacity.agent_unary,
                        "calls of agents",
                        "--agent-max-concurrent-requests",
                    ),
                    streams: Pool::new(
                        capacity.agent_streams,
                        "streams of agents",
                        "--agent-max-concurrent-streams",
                    ),
                },
                anonymous: Pools {
                    unary: Pool::new(
                        capacity.anonymous,
                        "calls without a credential",
                        "--max-anonymous-calls",
                    ),
                    streams: Pool::new(
                        capacity.anonymous,
                        "streams without a credential",
                        "--max-anonymous-calls",
                    ),
                },
                per_credential: PerCredential {
                    held: Arc::default(),
                    limits: [
                        capacity.credential_unary.max(1),
                        capacity.credential_streams.max(1),
                    ],
                },
                anonymous_stream: capacity.anonymous_stream,
                retry_after: capacity.retry_after,
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

impl<S, B> Service<http::Request<B>> for LoadShed<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let kind = self.shared.calls.kind(request.uri().path());
        let stream = match kind {
            CallKind::Health => return Box::pin(self.inner.call(request)),
            CallKind::Unary | CallKind::OwnDeadline => false,
            CallKind::Stream => true,
        };
        let caller = caller(request.extensions());
        let (pools, who) = match &caller {
            Caller::Agent(run) => (&self.shared.agents, Some(format!("run {run}"))),
            Caller::Key(id) => (&self.shared.keys, Some(format!("key {id}"))),
            Caller::Anonymous => (&self.shared.anonymous, None),
        };
        let pool = if stream { &pools.streams } else { &pools.unary };
        let Ok(place) = Arc::clone(&pool.places).try_acquire_owned() else {
            debug!(method = %request.uri().path(), limit = pool.limit, "call refused: at the limit");
            let refusal = self.shared.refusal(pool.limit, pool.what, pool.flag, "");
            return Box::pin(async move { Ok(refusal.into_http()) });
        };
        let own = match &who {
            Some(who) => match self.shared.per_credential.take(who, usize::from(stream)) {
                Some(own) => Some(own),
                None => {
                    let (limit, what, flag) = if stream {
                        (
                            self.shared.per_credential.limits[1],
                            "streams",
                            "--max-concurrent-streams-per-credential",
                        )
                    } else {
                        (
                            self.shared.per_credential.limits[0],
                            "calls",
                            "--max-concurrent-requests-per-credential",
                        )
                    };
                    debug!(method = %request.uri().path(), who = %who, limit, "call refused: the credential is at its limit");
                    let refusal = self
                        .shared
                        .refusal(limit, what, flag, &format!(" for {who}"));
                    return Box::pin(async move { Ok(refusal.into_http()) });
                }
            },
            None => None,
        };
        let lifetime = matches!(caller, Caller::Anonymous).then_some(self.shared.anonymous_stream);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(if stream {
                response.map(|body| {
                    Body::new(Held {
                        body,
                        places: (place, own),
                        ends: lifetime.map(|d| (Box::pin(tokio::time::sleep(d)), d)),
                        ended: false,
                    })
                })
            } else {
                // The answer is made: the places are free before the client has it.
                response
            })
        })
    }
}

impl Shared {
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

/// A response body that holds a stream's places until it ends or is dropped;
/// a stream of a caller without a credential ends when its time is up.
struct Held {
    body: Body,
    #[allow(dead_code, reason = "held for their drop")]
    places: (OwnedSemaphorePermit, Option<CredentialPlace>),
    ends: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
    ended: bool,
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
        if let Some((ends, lifetime)) = &mut self.ends
            && ends.as_mut().poll(cx).is_ready()
        {
            let lifetime = *lifetime;
            self.ended = true;
            let status = Status::deadline_exceeded(format!(
                "a stream without a credential lasts at most {} s (--anonymous-stream-secs); open a new one",
                lifetime.as_secs()
            ));
            let mut trailers = http::HeaderMap::new();
            for (name, value) in status.into_http::<Body>().headers() {
                if name.as_str().starts_with("grpc-") {
                    trailers.insert(name.clone(), value.clone());
                }
            }
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
