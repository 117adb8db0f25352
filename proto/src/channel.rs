//! How Chorus's clients call its services (chorus-tools, tool-exec's gate,
//! the orchestrator's calls for API agents): a bounded connect, keepalive
//! pings that find a dead peer on a long call or an idle channel, and a
//! deadline on every unary call that should be short.
//!
//! Calls that bound themselves have no client deadline: ExecuteTool (its
//! deadline is tool-exec's `--tool-timeout-secs` and the bash timeout, and it
//! answers with partial output when it passes) and the Handoff stream (the
//! handoff's own timeout).

use std::time::Duration;

use tonic::transport::Endpoint;

/// Longest wait for a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval of HTTP/2 keepalive pings (also the TCP keepalive time).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is given up.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of the short unary calls between the services (the gate's
/// AuthorizeToolCall, RecordToolCall, AuthenticateKey, GetRunTokenKeys; an
/// agent's CallTool), sent as `grpc-timeout` so the server stops too.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline of a call that may wait for a person's answer to an approval
/// rule: the longest an `ask` waits (a day), and a minute more.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60 + 60);

/// `endpoint` with the connect timeout and keepalive of every Chorus client.
pub fn tune(endpoint: Endpoint) -> Endpoint {
    endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .tcp_keepalive(Some(KEEPALIVE_INTERVAL))
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
}

/// `request` with [`CALL_TIMEOUT`] as its deadline.
pub fn short<T>(mut request: tonic::Request<T>) -> tonic::Request<T> {
    request.set_timeout(CALL_TIMEOUT);
    request
}
