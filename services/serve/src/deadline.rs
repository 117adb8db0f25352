//! The request timeout of unary calls: a unary call still running after
//! `--request-timeout-secs` (or after its client's shorter `grpc-timeout`) is
//! stopped and answered DEADLINE_EXCEEDED, naming the limit. Streams, health
//! and calls with a deadline of their own pass untouched ([`CallKind`]).
//!
//! tonic itself bounds a call by its client's `grpc-timeout`, but answers
//! CANCELLED "Timeout expired". This layer's timer is made when the call
//! reaches it, which is before tonic's (tonic calls the service before it
//! starts its own timer), so it fires first and the client is told
//! DEADLINE_EXCEEDED with the deadline it set.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;
use tonic::Status;
use tonic::body::Body;
use tower::{Layer, Service};

use crate::calls::{CallKind, Calls};

/// Bounds every unary call by `timeout` (or its client's shorter deadline).
#[derive(Debug, Clone)]
pub struct DeadlineLayer {
    calls: Calls,
    timeout: Duration,
}

impl DeadlineLayer {
    pub fn new(calls: Calls, timeout: Duration) -> Self {
        Self { calls, timeout }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            calls: self.calls.clone(),
            timeout: self.timeout,
        }
    }
}

/// [`DeadlineLayer`]'s service.
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    calls: Calls,
    timeout: Duration,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<http::Request<B>> for Deadline<S>
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
        if self.calls.kind(request.uri().path()) != CallKind::Unary {
            return Box::pin(self.inner.call(request));
        }
        let (limit, message) = match grpc_timeout(request.headers()) {
            Some(client) if client < self.timeout => (client, client_message(client)),
            _ => (self.timeout, server_message(self.timeout)),
        };
        // Made now: see the module's documentation.
        let expired = tokio::time::sleep(limit);
        let answer = self.inner.call(request);
        Box::pin(async move {
            tokio::select! {
                biased;
                response = answer => response,
                () = expired => Ok(Status::deadline_exceeded(message).into_http()),
            }
        })
    }
}

const MAY_HAVE_CHANGED: &str =
    "a change it was making may have been made anyway: look before you retry";

fn server_message(limit: Duration) -> String {
    format!(
        "the call ran past this service's limit of {} per call (--request-timeout-secs) and was stopped; {MAY_HAVE_CHANGED}",
        human(limit)
    )
}

fn client_message(limit: Duration) -> String {
    format!(
        "the call ran past the deadline its client set ({} in grpc-timeout) and was stopped; {MAY_HAVE_CHANGED}",
        human(limit)
    )
}

/// "30 s", "1500 ms".
fn human(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The client's deadline from `grpc-timeout` (up to 8 digits and a unit: H,
/// M, S, m, u, n); None when absent or malformed.
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.checked_mul(3600)?),
        "M" => Duration::from_secs(amount.checked_mul(60)?),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(timeout: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", timeout.parse().expect("ascii"));
        headers
    }

    #[test]
    fn grpc_timeouts_parse_as_the_protocol_spells_them() {
        assert_eq!(
            grpc_timeout(&headers("1H")),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(grpc_timeout(&headers("2M")), Some(Duration::from_secs(120)));
        assert_eq!(grpc_timeout(&headers("3S")), Some(Duration::from_secs(3)));
        assert_eq!(
            grpc_timeout(&headers("500m")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(grpc_timeout(&headers("7u")), Some(Duration::from_micros(7)));
        assert_eq!(grpc_timeout(&headers("9n")), Some(Duration::from_nanos(9)));
        for bad in ["", "S", "10", "123456789S", "5x", "-1S"] {
            assert_eq!(grpc_timeout(&headers(bad)), None, "{bad}");
        }
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }

    type Request = http::Request<Body>;

    /// A service whose calls never end, behind a 30 s deadline.
    fn stuck() -> Deadline<
        impl Service<
            Request,
            Response = http::Response<Body>,
            Error = std::convert::Infallible,
            Future = impl Send,
        >,
    > {
        let inner = tower::service_fn(|_: Request| std::future::pending());
        DeadlineLayer::new(crate::calls::demo(), Duration::from_secs(30)).layer(inner)
    }

    fn request(path: &str, timeout: Option<&str>) -> Request {
        let mut builder = http::Request::builder().uri(path);
        if let Some(timeout) = timeout {
            builder = builder.header("grpc-timeout", timeout);
        }
        builder.body(Body::empty()).expect("request")
    }

    #[tokio::test(start_paused = true)]
    async fn a_unary_call_past_its_deadline_is_answered_deadline_exceeded() {
        let mut service = stuck();
        let answer = service
            .call(request("/demo.v1.Demo/Get", None))
            .await
            .expect("answered");
        let status = Status::from_header_map(answer.headers()).expect("a status");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(status.message(), server_message(Duration::from_secs(30)));

        let answer = service
            .call(request("/demo.v1.Demo/Get", Some("250m")))
            .await
            .expect("answered");
        let status = Status::from_header_map(answer.headers()).expect("a status");
        assert_eq!(status.message(), client_message(Duration::from_millis(250)));
    }

    #[tokio::test(start_paused = true)]
    async fn streams_and_calls_with_their_own_deadline_are_never_cut() {
        let mut service = stuck();
        for path in [
            "/demo.v1.Demo/Watch",
            "/demo.v1.Demo/Run",
            "/grpc.health.v1.Health/Watch",
        ] {
            let call = service.call(request(path, None));
            tokio::select! {
                _ = call => panic!("{path} was cut"),
                () = tokio::time::sleep(Duration::from_secs(3600)) => {}
            }
        }
    }

    #[test]
    fn messages_name_the_limit_and_the_flag() {
        assert_eq!(
            server_message(Duration::from_secs(30)),
            "the call ran past this service's limit of 30 s per call (--request-timeout-secs) and was stopped; a change it was making may have been made anyway: look before you retry"
        );
        assert!(client_message(Duration::from_millis(1500)).contains("1500 ms in grpc-timeout"));
    }
}
