//! Tracing and metrics for every RPC, as tower layers: [`ServerLayer`] on the
//! servers (a span per call, continuing the caller's trace, ended with the
//! call's gRPC status when the response — a stream's last message included —
//! is done; the call's duration recorded), [`ClientLayer`] on channels (the
//! calling span's context sent along as `traceparent`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::Frame;
use opentelemetry::KeyValue;
use opentelemetry::trace::TraceContextExt as _;
use tonic::body::Body;
use tower::{Layer, Service};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::metrics::metrics;
use crate::propagation;

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

/// `package.Service` and `Method` of a gRPC path (`/package.Service/Method`).
fn rpc_names(path: &str) -> (&str, &str) {
    path.trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("unknown", "unknown"))
}

/// The gRPC status code in `headers` (a trailers-only response or trailers).
fn status_in(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Codes that mean the server failed (the others are the caller's doing), as
/// the RPC conventions mark server spans as errors.
fn server_fault(code: i32) -> bool {
    use tonic::Code;
    matches!(
        Code::from_i32(code),
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}

/// Adds a span and the `rpc.server.call.duration` metric to every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerLayer;

impl<S> Layer<S> for ServerLayer {
    type Service = ServerTelemetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerTelemetry { inner }
    }
}

#[derive(Debug, Clone)]
pub struct ServerTelemetry<S> {
    inner: S,
}

/// What is known of a call until it ends.
struct Call {
    span: tracing::Span,
    started: Instant,
    service: String,
    method: String,
    done: bool,
}

impl Call {
    /// Ends the call with `code` (once): the span's status and the metric.
    fn finish(&mut self, code: i32, message: Option<&str>) {
        if self.done {
            return;
        }
        self.done = true;
        self.span.record("rpc.grpc.status_code", code);
        if server_fault(code) {
            self.span.record("otel.status_code", "ERROR");
            if let Some(message) = message {
                self.span.record("otel.status_description", message);
            }
        }
        metrics().rpc_duration.record(
            self.started.elapsed().as_secs_f64(),
            &[
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", self.service.clone()),
                KeyValue::new("rpc.method", self.method.clone()),
                KeyValue::new("rpc.grpc.status_code", i64::from(code)),
            ],
        );
    }
}

impl Drop for Call {
    /// A response dropped before its end: the caller went away.
    fn drop(&mut self) {
        self.finish(tonic::Code::Cancelled as i32, None);
    }
}

fn message_in(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl<S> Service<http::Request<Body>> for ServerTelemetry<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Send,
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
        let path = request.uri().path();
        let (service, method) = rpc_names(path);
        let span = tracing::info_span!(
            "grpc",
            otel.name = %path.trim_start_matches('/'),
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            rpc.grpc.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let _ = span.set_parent(propagation::extract(request.headers()));
        let mut call = Call {
            span: span.clone(),
            started: Instant::now(),
            service: service.to_owned(),
            method: method.to_owned(),
            done: false,
        };
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(
            async move {
                let response = future.await?;
                let (parts, body) = response.into_parts();
                if let Some(code) = status_in(&parts.headers) {
                    // Trailers-only: the call is over.
                    call.finish(code, message_in(&parts.headers).as_deref());
                    return Ok(http::Response::from_parts(parts, body));
                }
                Ok(http::Response::from_parts(
                    parts,
                    Body::new(TracedBody { inner: body, call }),
                ))
            }
            .instrument(span),
        )
    }
}

pin_project_lite::pin_project! {
    /// A response body that ends its call when the trailers pass (or when it is
    /// dropped first).
    struct TracedBody {
        #[pin]
        inner: Body,
        call: Call,
    }
}

impl http_body::Body for TracedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(code) = status_in(trailers)
                {
                    this.call.finish(code, message_in(trailers).as_deref());
                }
            }
            Poll::Ready(Some(Err(status))) => {
                this.call
                    .finish(status.code() as i32, Some(status.message()));
            }
            Poll::Ready(None) => this.call.finish(tonic::Code::Ok as i32, None),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Sends the calling span's trace context with every request, in a client span
/// of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientLayer;

impl<S> Layer<S> for ClientLayer {
    type Service = ClientTelemetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientTelemetry { inner }
    }
}

#[derive(Debug, Clone)]
pub struct ClientTelemetry<S> {
    inner: S,
}

/// A channel that carries trace context.
pub type TracedChannel = ClientTelemetry<tonic::transport::Channel>;

/// `channel`, carrying trace context.
pub fn traced(channel: tonic::transport::Channel) -> TracedChannel {
    ClientLayer.layer(channel)
}

impl<S, B> Service<http::Request<B>> for ClientTelemetry<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let (service, method) = rpc_names(path);
        let span = tracing::info_span!(
            "grpc.client",
            otel.name = %path.trim_start_matches('/'),
            otel.kind = "client",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            rpc.grpc.status_code = tracing::field::Empty,
        );
        let context = span.context();
        match propagation::started_in() {
            // Without telemetry of its own a process passes on the context it
            // was started in (chorus-tools run by an agent).
            Some(started_in) if !context.span().span_context().is_valid() => {
                propagation::inject(started_in, request.headers_mut());
            }
            _ => propagation::inject(&context, request.headers_mut()),
        }
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(
            async move {
                let response = future.await?;
                // The status is known here only when the answer is trailers-only.
                if let Some(code) = status_in(response.headers()) {
                    tracing::Span::current().record("rpc.grpc.status_code", code);
                }
                Ok(response)
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_service_and_method() {
        assert_eq!(
            rpc_names("/chorus.tools.v1.ToolExec/ExecuteTool"),
            ("chorus.tools.v1.ToolExec", "ExecuteTool")
        );
        assert_eq!(rpc_names("/odd"), ("unknown", "unknown"));
    }

    #[test]
    fn only_server_failures_mark_a_server_span_as_an_error() {
        assert!(server_fault(tonic::Code::Internal as i32));
        assert!(server_fault(tonic::Code::Unavailable as i32));
        assert!(!server_fault(tonic::Code::InvalidArgument as i32));
        assert!(!server_fault(tonic::Code::PermissionDenied as i32));
        assert!(!server_fault(tonic::Code::Ok as i32));
    }
}
