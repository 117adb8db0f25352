//! MCP over Streamable HTTP with raw requests: what an attacker sends, and
//! the thinnest client for measuring the endpoint (no SDK in the way).

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// What the endpoint answered.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The JSON-RPC message of the answer (plain JSON, or the last `data:`
    /// of an event stream).
    pub fn message(&self) -> Value {
        let json = self
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|data| !data.is_empty())
            .unwrap_or(self.body.trim());
        serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("no JSON-RPC message ({e}): {}", self.body))
    }

    pub fn session(&self) -> String {
        self.headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no session id: {} {}", self.status, self.body))
            .to_owned()
    }
}

/// Sends `body` to `url` with `headers` (the MCP content headers added).
pub async fn send(method: Method, url: &str, headers: &[(&str, &str)], body: String) -> Answer {
    request_with(&client(), method, url, headers, body).await
}

/// An HTTP client that keeps its connections for the next requests.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>()
}

/// [`send`] over `client`.
pub async fn request_with(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: String,
) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(Bytes::from(body))).expect("request"))
        .await
        .expect("the MCP endpoint answers");
    answer_of(response).await
}

/// Sends a body too large to be read: the server answers 413 without
/// reading it and closes the connection, which the client may see first, as
/// a broken pipe while it still writes. The status, or None when the
/// server closed the connection before the client read its answer.
pub async fn send_unread(url: &str, headers: &[(&str, &str)], body: String) -> Option<StatusCode> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    match client()
        .request(request.body(Full::new(Bytes::from(body))).expect("request"))
        .await
    {
        Ok(response) => Some(response.status()),
        Err(e) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            let mut closed = false;
            while let Some(c) = cause {
                closed |= c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                    matches!(
                        io.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    )
                });
                cause = c.source();
            }
            assert!(
                closed,
                "the MCP endpoint neither answered nor closed: {e:?}"
            );
            None
        }
    }
}

async fn answer_of(response: http::Response<hyper::body::Incoming>) -> Answer {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("the body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }})
    .to_string()
}

pub fn list_tools() -> String {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string()
}

/// Opens a session with `token`; its id.
pub async fn open(url: &str, token: &str) -> String {
    let bearer = format!("Bearer {token}");
    let answer = send(
        Method::POST,
        url,
        &[("authorization", &bearer)],
        initialize(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let session = answer.session();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let answer = send(
        Method::POST,
        url,
        &[("authorization", &bearer), ("mcp-session-id", &session)],
        initialized,
    )
    .await;
    assert!(answer.status.is_success(), "{}", answer.body);
    session
}

/// An open MCP session of one run, for calls one after another.
pub struct Session {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
    bearer: String,
    id: String,
    next: u64,
}

impl Session {
    /// Opens a session at `url` with the run token `token`.
    pub async fn open(url: &str, token: &str) -> Self {
        Self {
            client: client(),
            url: url.to_owned(),
            bearer: format!("Bearer {token}"),
            id: open(url, token).await,
            next: 10,
        }
    }

    /// Calls `tool` with `arguments`; the JSON-RPC answer.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.next, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}})
        .to_string();
        let headers = [
            ("authorization", self.bearer.as_str()),
            ("mcp-session-id", self.id.as_str()),
        ];
        request_with(&self.client, Method::POST, &self.url, &headers, body)
            .await
            .message()
    }
}
