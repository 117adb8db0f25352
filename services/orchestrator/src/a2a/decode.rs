//! A request the A2A service cannot read (garbage bytes, a string that is
//! not UTF-8): tonic answers it INTERNAL with no detail, as if the server
//! failed. A2A clients are owed INVALID_PARAMS saying what was wrong, in
//! A2A's `ErrorInfo`: this wrapper of the service's HTTP answers says so.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::server::NamedService;

use super::errors::{Reason, a2a};

/// How prost's decode errors begin (`prost::DecodeError`'s display).
const DECODE_ERROR: &str = "failed to decode Protobuf message";

/// The A2A service `S`, whose answers to requests it could not decode are
/// INVALID_PARAMS.
#[derive(Debug, Clone)]
pub struct ExplainDecodeErrors<S>(pub S);

impl<S: NamedService> NamedService for ExplainDecodeErrors<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, R> tower::Service<http::Request<B>> for ExplainDecodeErrors<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answer = self.0.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            explain(response.headers_mut());
            Ok(response)
        })
    }
}

/// Rewrites a trailers-only INTERNAL answer of a decode error as A2A's
/// INVALID_PARAMS, with what prost said.
fn explain(headers: &mut http::HeaderMap) {
    if headers.get("grpc-status").map(http::HeaderValue::as_bytes) != Some(b"13") {
        return;
    }
    let said = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    if !said.starts_with(DECODE_ERROR) {
        return;
    }
    let status = a2a(
        Reason::InvalidParams,
        format!("the request is not a message of A2A 1.0's contract: {said}"),
    );
    let explained = status.into_http::<()>();
    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
        headers.remove(name);
        if let Some(value) = explained.headers().get(name) {
            headers.insert(name, value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::StatusExt as _;

    #[test]
    fn a_request_that_cannot_be_read_is_invalid_params_saying_why() {
        let mut headers = tonic::Status::internal(format!(
            "{DECODE_ERROR}: invalid string value: data is not UTF-8 encoded"
        ))
        .into_http::<()>()
        .headers()
        .clone();
        explain(&mut headers);
        let status = tonic::Status::from_header_map(&headers).expect("a status");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("not UTF-8"),
            "{}",
            status.message()
        );
        assert_eq!(
            status
                .get_error_details()
                .error_info()
                .map(|i| i.reason.as_str()),
            Some("INVALID_PARAMS")
        );
        // Any other INTERNAL is left as it is.
        let mut other = tonic::Status::internal("the database")
            .into_http::<()>()
            .headers()
            .clone();
        explain(&mut other);
        let status = tonic::Status::from_header_map(&other).expect("a status");
        assert_eq!(status.code(), tonic::Code::Internal);
    }
}
