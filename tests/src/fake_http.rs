//! Shared pieces of the fake model servers: an axum server on 127.0.0.1:0 that
//! stops when dropped, request recording, and JSON / SSE responses.

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// An axum server on 127.0.0.1:0; the server task is aborted on drop.
pub struct HttpServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Binds 127.0.0.1:0 and serves `router`. The listener is bound before this
    /// returns, so requests may be sent at once.
    pub async fn start(router: Router) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        Self::start_on(listener, router)
    }

    /// Serves `router` on a listener bound elsewhere (a fake in a container
    /// listens on all of its addresses).
    pub fn start_on(listener: TcpListener, router: Router) -> Self {
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.expect("fake server");
        });
        Self { addr, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Locks `mutex`, ignoring poisoning (a panicking test must not hide the log).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Parses a request body; a body that is not JSON is kept as a JSON string.
pub fn parse_body(bytes: &[u8]) -> Result<Value, Value> {
    serde_json::from_slice(bytes).map_err(|_| Value::String(String::from_utf8_lossy(bytes).into()))
}

/// A JSON response with `status`.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A complete `text/event-stream` response whose body is `events`.
pub fn sse_response(events: String) -> Response {
    let mut response = Response::new(Body::from(events));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
