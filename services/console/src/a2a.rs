//! The A2A face's JSON-RPC 2.0 and HTTP+JSON bindings, on the console's
//! port, beside the gRPC binding on the orchestrator's: a workspace's
//! interface is `/a2a/<workspace>` — JSON-RPC requests are POSTed to it,
//! the HTTP+JSON binding's resources are under it (`/message:send`,
//! `/tasks/{id}` ...), and its card is at
//! `/a2a/<workspace>/.well-known/agent-card.json`.
//!
//! Each request is made into the gRPC method's message and called through
//! the orchestrator port's own layers in this process, as the console's
//! API is: the keys, roles, limits, deadlines and every rule of a task are
//! the gRPC face's, and an HTTP binding only converts (decision 0035).

mod call;
mod errors;
mod jsonrpc;
mod rest;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::gateway::Gateway;
use crate::{Body, full, with_headers};
use chorus_serve::http::Standing;
use errors::Failure;

/// The largest request body an A2A binding reads: above the port's message
/// limit (16 MiB by default), so that the face's own limit, the same on
/// every binding, answers a message too large.
const MAX_BODY: usize = 20 * 1024 * 1024;

/// Answers a request for the A2A interface of `workspace`; `rest` is the
/// path after `/a2a/<workspace>` (empty, `/`, or a resource).
pub async fn handle(
    gateway: &Gateway,
    workspace: &str,
    rest: &str,
    request: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let standing = parts.extensions.get::<Standing>().cloned();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            let failure = Failure::a2a(
                "INVALID_REQUEST",
                format!("the request is larger than {} MiB", MAX_BODY >> 20),
            );
            let mut answer = rest::failed(&failure);
            *answer.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            return answer;
        }
    };
    let call = Call {
        gateway,
        workspace,
        headers: &parts.headers,
        standing: standing.as_ref(),
    };
    if matches!(rest, "" | "/") {
        if parts.method != http::Method::POST {
            return rest::failed(&Failure::a2a(
                "METHOD_NOT_FOUND",
                format!(
                    "POST JSON-RPC 2.0 requests to /a2a/{workspace}; its card is at /a2a/{workspace}/.well-known/agent-card.json"
                ),
            ));
        }
        return jsonrpc::handle(&call, &body).await;
    }
    rest::handle(&call, &parts.method, rest, parts.uri.query(), &body).await
}

/// What a binding needs to make a call: the face, the workspace of the URL,
/// the caller's headers and connection.
struct Call<'a> {
    gateway: &'a Gateway,
    workspace: &'a str,
    headers: &'a http::HeaderMap,
    standing: Option<&'a Standing>,
}

impl Call<'_> {
    /// Calls the A2A method `name` with the JSON `params`.
    async fn make(&self, name: &str, params: Value) -> Result<call::Reply, Failure> {
        let Some(method) = call::method(self.gateway, name) else {
            return Err(Failure::a2a(
                "METHOD_NOT_FOUND",
                format!("A2A 1.0 has no method {name}"),
            ));
        };
        let message = call::message(&method, params, self.workspace)?;
        call::call(self.gateway, &method, &message, self.headers, self.standing).await
    }
}

/// A JSON answer with `status`, carrying `extra` headers.
fn json_response(
    status: StatusCode,
    json: &Value,
    extra: &[(&'static str, Bytes)],
) -> Response<Body> {
    let mut builder = with_headers(
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json"),
    );
    for (name, value) in extra {
        if let Ok(value) = HeaderValue::from_maybe_shared(value.clone()) {
            builder = builder.header(*name, value);
        }
    }
    builder
        .body(full(Bytes::from(json.to_string())))
        .unwrap_or_else(|_| Response::new(full(Bytes::new())))
}

/// A failure's answer headers: when to come back, and which credential.
fn failure_headers(failure: &Failure) -> Vec<(&'static str, Bytes)> {
    let mut headers = Vec::new();
    if let Some(ms) = failure.retry_after_ms {
        headers.push((
            "retry-after",
            Bytes::from(ms.div_ceil(1000).max(1).to_string()),
        ));
    }
    if failure.http == StatusCode::UNAUTHORIZED {
        headers.push(("www-authenticate", Bytes::from_static(b"Bearer")));
    }
    headers
}

/// A stream of server-sent events, each frame made already.
fn sse_response(frames: mpsc::Receiver<Bytes>, extra: &[(&'static str, Bytes)]) -> Response<Body> {
    let mut builder = with_headers(
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            // No proxy may hold the events back.
            .header("x-accel-buffering", "no"),
    );
    for (name, value) in extra {
        if let Ok(value) = HeaderValue::from_maybe_shared(value.clone()) {
            builder = builder.header(*name, value);
        }
    }
    builder
        .body(UnsyncBoxBody::new(crate::Pieces(frames)))
        .unwrap_or_else(|_| Response::new(full(Bytes::new())))
}

/// One server-sent event: `event` names it (none: a message), `data` is its
/// JSON on one line.
fn sse_frame(event: Option<&str>, data: &Value) -> Bytes {
    let mut frame = String::new();
    if let Some(event) = event {
        frame.push_str("event: ");
        frame.push_str(event);
        frame.push('\n');
    }
    frame.push_str("data: ");
    frame.push_str(&data.to_string());
    frame.push_str("\n\n");
    Bytes::from(frame)
}
