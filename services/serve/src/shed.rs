//! The concurrency limit, with load shedding: a server serves at most
//! `--max-concurrent-requests` unary calls and `--max-concurrent-streams`
//! streams at once, in two separate pools, so long streams (WatchTask,
//! Handoff) never starve unary calls. A call beyond its pool's limit is not
//! queued: it is answered at once RESOURCE_EXHAUSTED, with a message naming
//! the limit and its flag and a `grpc-retry-pushback-ms` hint. Nothing of such
//! a call has run, so retrying it is always safe. Health is never counted.
//!
//! A unary call holds its place until its answer is ready; a stream until it
//! ends (its response body is finished or dropped, e.g. when the client goes).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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

/// Metadata key of the retry hint (gRFC A6), in milliseconds.
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

/// How many calls a server serves at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Unary calls at once (`--max-concurrent-requests`).
    pub unary: usize,
    /// Streams at once (`--max-concurrent-streams`).
    pub streams: usize,
    /// How long a refused caller is told to wait before retrying.
    pub retry_after: Duration,
}

/// Refuses calls beyond [`Capacity`] at once.
#[derive(Debug, Clone)]
pub struct LoadShedLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    calls: Calls,
    unary: Pool,
    streams: Pool,
    retry_after: Duration,
    /// "the orchestrator", "tool-exec": who says it is busy.
    service: &'static str,
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

impl LoadShedLayer {
    /// `service` names the server in refusals ("the orchestrator").
    pub fn new(calls: Calls, capacity: Capacity, service: &'static str) -> Self {
        Self {
            shared: Arc::new(Shared {
                calls,
                unary: Pool::new(capacity.unary, "calls", "--max-concurrent-requests"),
                streams: Pool::new(capacity.streams, "streams", "--max-concurrent-streams"),
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
        let pool = match kind {
            CallKind::Health => return Box::pin(self.inner.call(request)),
            CallKind::Unary | CallKind::OwnDeadline => &self.shared.unary,
            CallKind::Stream => &self.shared.streams,
        };
        let Ok(place) = Arc::clone(&pool.places).try_acquire_owned() else {
            debug!(method = %request.uri().path(), limit = pool.limit, "call refused: at the limit");
            let refusal = self.shared.refusal(pool);
            return Box::pin(async move { Ok(refusal.into_http()) });
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(match kind {
                CallKind::Stream => response.map(|body| Body::new(Held { body, place })),
                // The answer is made: the place is free before the client has it.
                _ => response,
            })
        })
    }
}

impl Shared {
    fn refusal(&self, pool: &Pool) -> Status {
        let ms = self.retry_after.as_millis();
        let mut metadata = MetadataMap::new();
        if let Ok(value) = ms.to_string().parse() {
            metadata.insert(RETRY_PUSHBACK, value);
        }
        Status::with_metadata(
            Code::ResourceExhausted,
            format!(
                "{} is serving its limit of {} {} at once ({}); nothing of this call was done: retry after {ms} ms",
                self.service, pool.limit, pool.what, pool.flag
            ),
            metadata,
        )
    }
}

/// A response body that holds a stream's place until it ends or is dropped.
struct Held {
    body: Body,
    #[allow(dead_code, reason = "held for its drop")]
    place: OwnedSemaphorePermit,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
