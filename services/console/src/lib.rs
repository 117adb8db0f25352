//! The web console: a few static files (HTML, one ES module, CSS; no build
//! step, no framework) and the JSON gateway they call (see [`gateway`]),
//! served on a port of their own. The page holds the API key the person
//! typed in (session storage) and sends it as the bearer of every call; the
//! gateway passes it to the API, whose roles decide.

mod a2a;
pub mod gateway;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use chorus_serve::grpc::LocalService;
use chorus_serve::http::Standing;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Frame, Incoming};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use gateway::{Gateway, PublicCard};

/// Where A2A clients look for an agent card, under a workspace's base URL
/// (`/a2a/<workspace>`).
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// The request header the console names the host a client reached it by
/// with, when it asks the orchestrator for a card.
pub const SEEN_HOST_HEADER: &str = "chorus-card-host";

/// The largest request body the gateway reads.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// What the page may load and where it may connect: itself only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The files of the page, compiled in.
const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../assets/index.html"),
    ),
    (
        "/app.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/app.js"),
    ),
    (
        "/change.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/change.js"),
    ),
    (
        "/approvals.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/approvals.js"),
    ),
    (
        "/style.css",
        "text/css; charset=utf-8",
        include_str!("../assets/style.css"),
    ),
];

/// Serves the console on `listener` (TLS with `tls`) until `stop` fires; a
/// stream's line left unread for `unread` ends the stream and its connection.
pub async fn serve(
    listener: TcpListener,
    local: LocalService,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
    unread: std::time::Duration,
    cards: Option<PublicCard>,
    stop: CancellationToken,
) -> Result<(), String> {
    let gateway = Arc::new(Gateway::new(local, unread)?);
    let service = tower::service_fn(move |request: Request<Incoming>| {
        let gateway = Arc::clone(&gateway);
        let cards = cards.clone();
        async move { Ok::<_, Infallible>(handle(&gateway, request, cards.as_ref()).await) }
    });
    chorus_serve::http::serve(listener, service, tls, max_connections, "console", stop).await;
    Ok(())
}

/// Answers one request.
pub async fn handle(
    gateway: &Gateway,
    request: Request<Incoming>,
    cards: Option<&PublicCard>,
) -> Response<Body> {
    let path = request.uri().path().to_owned();
    if let Some(under) = path.strip_prefix("/a2a/") {
        return a2a_request(gateway, under, request, cards).await;
    }
    if request.method() == Method::GET && path == AGENT_CARD_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            "each workspace has its agent card: GET /a2a/<workspace>/.well-known/agent-card.json",
        );
    }
    if request.method() == Method::GET {
        let page = if path == "/index.html" {
            "/"
        } else {
            path.as_str()
        };
        return match FILES.iter().find(|(p, _, _)| *p == page) {
            Some((_, kind, text)) => {
                with_headers(Response::builder().header(header::CONTENT_TYPE, *kind))
                    .body(full(Bytes::from_static(text.as_bytes())))
                    .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, ""))
            }
            None => plain(StatusCode::NOT_FOUND, "not found"),
        };
    }
    if request.method() != Method::POST {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET a page or POST /api/<Method>",
        );
    }
    let (stream, name) = match (
        path.strip_prefix("/api/stream/"),
        path.strip_prefix("/api/"),
    ) {
        (Some(name), _) => (true, name.to_owned()),
        (None, Some(name)) => (false, name.to_owned()),
        _ => return plain(StatusCode::NOT_FOUND, "not found"),
    };
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request is larger than 4 MiB",
            );
        }
    };
    let standing = parts.extensions.get::<Standing>().cloned();
    let (answer, accepted) = gateway
        .call(&name, stream, &parts.headers, &body, standing.clone())
        .await;
    if accepted && let Some(standing) = standing {
        standing.prove();
    }
    answer_response(answer)
}

/// A request under `/a2a/`: a workspace's card, or its A2A interface
/// (JSON-RPC and HTTP+JSON). Empty segments (`a2a/ws//x`, as a base URL
/// with a trailing slash gives) count for nothing.
async fn a2a_request(
    gateway: &Gateway,
    under: &str,
    request: Request<Incoming>,
    cards: Option<&PublicCard>,
) -> Response<Body> {
    let segments: Vec<&str> = under.split('/').filter(|s| !s.is_empty()).collect();
    let Some((workspace, rest)) = segments.split_first() else {
        return plain(
            StatusCode::NOT_FOUND,
            "a workspace's A2A interface is /a2a/<workspace>",
        );
    };
    let rest = rest.join("/");
    if workspace.starts_with('.') {
        // `/a2a/.well-known/agent-card.json`: a base URL of
        // `/a2a/<workspace>` without its trailing slash, resolved as a URL.
        return plain(
            StatusCode::NOT_FOUND,
            "no workspace named here: a workspace's A2A base URL is /a2a/<workspace>/ (with the trailing slash when a client resolves .well-known/agent-card.json against it)",
        );
    }
    let Ok(workspace) = percent_encoding::percent_decode_str(workspace).decode_utf8() else {
        return plain(StatusCode::BAD_REQUEST, "the workspace's name is not UTF-8");
    };
    if format!("/{rest}") == AGENT_CARD_PATH {
        if request.method() != Method::GET {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "GET the agent card");
        }
        let seen_host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().authority().map(http::uri::Authority::as_str))
            .map(str::to_owned);
        let answer = gateway
            .agent_card(&workspace, request.headers(), seen_host, cards)
            .await;
        return answer_response(answer);
    }
    a2a::handle(gateway, &workspace, &format!("/{rest}"), request).await
}

fn answer_response(answer: gateway::Answer) -> Response<Body> {
    match answer {
        gateway::Answer::Json(status, json) => with_headers(
            Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, "application/json"),
        )
        .body(full(Bytes::from(json.to_string())))
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "")),
        gateway::Answer::Lines(lines) => {
            let frames = Pieces(lines);
            with_headers(
                Response::builder()
                    .header(header::CONTENT_TYPE, "application/x-ndjson")
                    // No proxy may hold the lines back.
                    .header("x-accel-buffering", "no"),
            )
            .body(UnsyncBoxBody::new(frames))
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, ""))
        }
    }
}

/// Most bytes of a streamed answer's waiting pieces written together.
const PIECE_BYTES: usize = 64 * 1024;

/// A streamed answer (JSON lines, server-sent events): the pieces waiting
/// when the connection can take more go out together, in one write — as
/// HTTP/2 sends a gRPC stream's messages. What waits is bounded by the
/// channel the pieces come through, piece by piece, as before.
pub(crate) struct Pieces(pub tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let first = match self.0.poll_recv(cx) {
            std::task::Poll::Ready(Some(first)) => first,
            std::task::Poll::Ready(None) => return std::task::Poll::Ready(None),
            std::task::Poll::Pending => return std::task::Poll::Pending,
        };
        let Ok(next) = self.0.try_recv() else {
            return std::task::Poll::Ready(Some(Ok(Frame::data(first))));
        };
        let mut piece = bytes::BytesMut::with_capacity(first.len() + next.len());
        piece.extend_from_slice(&first);
        piece.extend_from_slice(&next);
        while piece.len() < PIECE_BYTES {
            match self.0.try_recv() {
                Ok(more) => piece.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        std::task::Poll::Ready(Some(Ok(Frame::data(piece.freeze()))))
    }
}

pub(crate) fn with_headers(builder: http::response::Builder) -> http::response::Builder {
    builder
        .header(header::CONTENT_SECURITY_POLICY, CSP)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer")
        .header(header::X_FRAME_OPTIONS, "DENY")
        .header(header::CACHE_CONTROL, "no-store")
}

pub(crate) fn full(bytes: Bytes) -> Body {
    UnsyncBoxBody::new(Full::new(bytes))
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}
