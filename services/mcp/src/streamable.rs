//! The MCP face over Streamable HTTP: one endpoint, [`PATH`], for MCP
//! clients Chorus did not start (an agent given a run token from OpenRun).
//!
//! Every request carries its run token as its bearer (`Authorization: Bearer
//! <token>`): a request without one, or with one that does not verify, is
//! answered 401 before anything of MCP runs, and each call is checked again
//! by the services as on stdio (the run active, the tool granted). The
//! protocol is rmcp's Streamable HTTP server. A session belongs to the run
//! whose token opened it: a request with another run's token is refused
//! (403). Around it this face bounds what
//! a caller can make the server hold: the sessions open at once
//! ([`Limits::max_sessions`], then 503 with `Retry-After`), how long an idle
//! session is kept, the size of a request body (413), and which `Host` and
//! `Origin` headers are accepted (DNS rebinding, browsers).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::{RunTools, RunToolsServer};

/// The one path the face answers on.
pub const PATH: &str = "/mcp";

/// What one server holds at most, and whom it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Sessions open at once (each holds a task and a channel until it ends
    /// or idles out).
    pub max_sessions: usize,
    /// A session no request has used for this long is closed.
    pub idle: Duration,
    /// Largest request body.
    pub max_request_bytes: usize,
    /// `Host` values accepted (host or host:port); loopback names when empty.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted (scheme://host:port); a request with an
    /// `Origin` header that is not listed is refused (403). Requests without
    /// one (every non-browser client) are not affected.
    pub allowed_origins: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: 1024,
            idle: Duration::from_secs(300),
            max_request_bytes: 4 * 1024 * 1024,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// Whether a bearer token may reach the server at all (its signature and
/// expiry, checked without I/O): whose it is (the run), or why not.
pub type Admits = Arc<dyn Fn(&str) -> Result<String, String> + Send + Sync>;

/// Whose each session is: the owner of the token that opened it.
type Owners = Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>;

/// The HTTP service of the face: a tower service for any HTTP server.
pub struct McpHttp<T: RunTools> {
    inner: StreamableHttpService<RunToolsServer<T>, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    admits: Admits,
    owners: Owners,
    max_sessions: usize,
}

impl<T: RunTools> Clone for McpHttp<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            sessions: Arc::clone(&self.sessions),
            admits: Arc::clone(&self.admits),
            owners: Arc::clone(&self.owners),
            max_sessions: self.max_sessions,
        }
    }
}

impl<T: RunTools> std::fmt::Debug for McpHttp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttp")
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

impl<T: RunTools> McpHttp<T> {
    /// A face whose sessions each get a `RunTools` from `new_tools`, whose
    /// requests pass `admits`, bounded by `limits`, until `stop` fires (then
    /// every session ends).
    pub fn new(
        new_tools: impl Fn() -> T + Send + Sync + 'static,
        admits: Admits,
        limits: &Limits,
        stop: CancellationToken,
    ) -> Self {
        let mut session = SessionConfig::default();
        session.keep_alive = Some(limits.idle);
        let mut manager = LocalSessionManager::default();
        manager.session_config = session;
        let sessions = Arc::new(manager);
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(stop)
            .with_max_request_body_bytes(limits.max_request_bytes)
            .with_allowed_origins(limits.allowed_origins.clone())
            .enforce_origin_validation();
        if !limits.allowed_hosts.is_empty() {
            config = config.with_allowed_hosts(limits.allowed_hosts.clone());
        }
        let inner = StreamableHttpService::new(
            move || Ok(RunToolsServer::new(new_tools())),
            Arc::clone(&sessions),
            config,
        );
        Self {
            inner,
            sessions,
            admits,
            owners: Owners::default(),
            max_sessions: limits.max_sessions,
        }
    }

    /// Sessions open now.
    pub async fn open_sessions(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }

    async fn handle<B>(self, request: Request<B>) -> Response<BoxBody<Bytes, Infallible>>
    where
        B: Body + Send + 'static,
        B::Error: std::fmt::Display,
        B::Data: Send + 'static,
    {
        if request.uri().path() != PATH {
            return refusal(
                StatusCode::NOT_FOUND,
                &format!("the MCP endpoint is {PATH}"),
            );
        }
        let Some(token) = crate::bearer(request.headers()) else {
            return unauthorized(
                "no run token: send the run's token (OpenRun's token, CHORUS_RUN_TOKEN) as \
                 Authorization: Bearer <token>",
            );
        };
        let owner = match (self.admits)(&token) {
            Ok(owner) => owner,
            Err(why) => return unauthorized(&format!("the run token is refused: {why}")),
        };
        let session = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // A session is its opener's: another run's token cannot use it.
        if let Some(session) = &session
            && let Some(opener) = self.owner_of(session)
            && opener != owner
        {
            return refusal(
                StatusCode::FORBIDDEN,
                &format!(
                    "this MCP session is {opener}'s; {owner} opens a session of its own \
                     (initialize without Mcp-Session-Id)"
                ),
            );
        }
        let opens_session = request.method() == http::Method::POST && session.is_none();
        if opens_session && self.open_sessions().await >= self.max_sessions {
            let mut response = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "{} MCP sessions are open, the most this server keeps: close one (DELETE \
                     with its Mcp-Session-Id) or retry later",
                    self.max_sessions
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
            return response;
        }
        let response = self.inner.handle(request).await;
        if opens_session
            && let Some(opened) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
        {
            self.own(opened, owner).await;
        }
        response
    }

    /// Who opened `session`, if it is known.
    fn owner_of(&self, session: &str) -> Option<String> {
        let owners = self
            .owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners.get(session).cloned()
    }

    /// Notes that `owner` opened `session`; forgets sessions that ended.
    async fn own(&self, session: &str, owner: String) {
        let open: Option<std::collections::HashSet<String>> =
            if self.owners_len() >= self.max_sessions.saturating_mul(2) {
                let sessions = self.sessions.sessions.read().await;
                Some(sessions.keys().map(ToString::to_string).collect())
            } else {
                None
            };
        let mut owners = self
            .owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = open {
            owners.retain(|id, _| open.contains(id));
        }
        owners.insert(session.to_owned(), owner);
    }

    fn owners_len(&self) -> usize {
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// A refusal with a message a person can act on, as JSON.
fn refusal(status: StatusCode, message: &str) -> Response<BoxBody<Bytes, Infallible>> {
    let body = serde_json::json!({"error": message}).to_string();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn unauthorized(message: &str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = refusal(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer realm=\"chorus\""),
    );
    response
}

impl<T, B> tower::Service<Request<B>> for McpHttp<T>
where
    T: RunTools,
    B: Body + Send + 'static,
    B::Error: std::fmt::Display,
    B::Data: Send + 'static,
{
    type Response = Response<BoxBody<Bytes, Infallible>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let face = self.clone();
        Box::pin(async move { Ok(face.handle(request).await) })
    }
}
