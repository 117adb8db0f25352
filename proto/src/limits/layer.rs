//! The tower layer that answers a request over its server's message limit
//! RESOURCE_EXHAUSTED, naming the limit. tonic refuses such a request itself,
//! before any handler runs, with OUT_OF_RANGE and a message that names no
//! remedy; this layer rewrites that one answer and passes every other through.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::{Code, Status};
use tower::{Layer, Service};

/// How tonic's answer to a request over the limit begins.
const TONIC_TOO_LARGE: &str = "Error, decoded message length too large";

/// Answers requests over `bytes` RESOURCE_EXHAUSTED with the limit and a hint.
#[derive(Debug, Clone)]
pub struct MessageLimitLayer {
    limit: Arc<Limit>,
}

#[derive(Debug)]
struct Limit {
    bytes: usize,
    hint: String,
}

impl MessageLimitLayer {
    /// For a server whose services decode messages of at most `bytes`
    /// (`max_decoding_message_size`); `hint` ends the answer, saying how to
    /// stay under it.
    pub fn new(bytes: usize, hint: impl Into<String>) -> Self {
        Self {
            limit: Arc::new(Limit {
                bytes,
                hint: hint.into(),
            }),
        }
    }
}

impl<S> Layer<S> for MessageLimitLayer {
    type Service = MessageLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageLimit {
            inner,
            limit: Arc::clone(&self.limit),
        }
    }
}

/// [`MessageLimitLayer`]'s service.
#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
    limit: Arc<Limit>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<http::Request<B>> for MessageLimit<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answer = self.inner.call(request);
        let limit = Arc::clone(&self.limit);
        Box::pin(async move {
            let response = answer.await?;
            Ok(limit.rewrite(response))
        })
    }
}

impl Limit {
    /// `response`, or RESOURCE_EXHAUSTED when it is tonic's refusal of a
    /// request over the limit (a trailers-only answer: the status is in its
    /// headers).
    fn rewrite(&self, response: http::Response<Body>) -> http::Response<Body> {
        let out_of_range = response
            .headers()
            .get(Status::GRPC_STATUS)
            .is_some_and(|code| Code::from_bytes(code.as_bytes()) == Code::OutOfRange);
        if !out_of_range {
            return response;
        }
        let Some(status) = Status::from_header_map(response.headers()) else {
            return response;
        };
        if !status.message().starts_with(TONIC_TOO_LARGE) {
            return response;
        }
        Status::resource_exhausted(self.message(found_bytes(status.message()))).into_http()
    }

    fn message(&self, found: Option<u64>) -> String {
        let size = match found {
            Some(bytes) => format!("the request is {bytes} bytes"),
            None => "the request is too large".to_owned(),
        };
        format!(
            "{size}, over this service's limit of {} bytes ({} MiB) per message; {}",
            self.bytes,
            self.bytes / (1024 * 1024),
            self.hint
        )
    }
}

/// The size in tonic's "... found N bytes, the limit is: M bytes".
fn found_bytes(message: &str) -> Option<u64> {
    let (_, rest) = message.split_once("found ")?;
    rest.split_once(' ')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer() -> Limit {
        Limit {
            bytes: 16 * 1024 * 1024,
            hint: "send less".to_owned(),
        }
    }

    fn answer(status: Status) -> http::Response<Body> {
        layer().rewrite(status.into_http())
    }

    fn status_of(response: &http::Response<Body>) -> Status {
        Status::from_header_map(response.headers()).expect("a status")
    }

    #[test]
    fn tonics_refusal_of_a_large_request_becomes_resource_exhausted_naming_the_limit() {
        let tonic = Status::out_of_range(
            "Error, decoded message length too large: found 17825792 bytes, the limit is: 16777216 bytes",
        );
        let status = status_of(&answer(tonic));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "the request is 17825792 bytes, over this service's limit of 16777216 bytes (16 MiB) per message; send less"
        );
    }

    #[test]
    fn every_other_answer_passes_unchanged() {
        for status in [
            Status::out_of_range("offset 12 is past the end of the file"),
            Status::invalid_argument("Error, decoded message length too large"),
            Status::ok(""),
        ] {
            let before = (status.code(), status.message().to_owned());
            let after = status_of(&answer(status));
            assert_eq!((after.code(), after.message().to_owned()), before);
        }
    }
}
