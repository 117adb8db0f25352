//! The serving settings both services take: limits and timeouts of calls,
//! keepalive of connections, health checks, the drain and the grace of a
//! shutdown.

use std::time::Duration;

use chorus_proto::serving::v1::Limit;

use crate::calls::Calls;
use crate::connections::{Conn, ConnectionLimits, Connections};
use crate::deadline::DeadlineLayer;
use crate::shed::{Capacity, LoadShedLayer, Quota};

/// The serving flags (flatten into a service's settings).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Seconds a unary call may run before it is stopped and answered
    /// DEADLINE_EXCEEDED (streams are never cut; a client's shorter
    /// grpc-timeout wins).
    #[arg(long, env = "CHORUS_REQUEST_TIMEOUT_SECS", default_value_t = ServeConfig::default().request_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_secs: u64,
    /// Unary calls of API keys served at once; one more is refused at once
    /// with RESOURCE_EXHAUSTED and a retry hint. Agents have their own.
    #[arg(long, env = "CHORUS_MAX_CONCURRENT_REQUESTS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
    /// Streams of API keys (WatchTask) open at once, counted apart from unary
    /// calls; one more is refused at once with RESOURCE_EXHAUSTED.
    #[arg(long, env = "CHORUS_MAX_CONCURRENT_STREAMS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,
    /// Unary calls of agents (run tokens: tool calls, orchestration tools)
    /// served at once: places no API key can take.
    #[arg(long, env = "CHORUS_AGENT_MAX_CONCURRENT_REQUESTS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub agent_max_concurrent_requests: u32,
    /// Streams of agents (Handoff) open at once: places no API key can take.
    #[arg(long, env = "CHORUS_AGENT_MAX_CONCURRENT_STREAMS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub agent_max_concurrent_streams: u32,
    /// Unary calls one API key, or one run, holds at once.
    #[arg(long, env = "CHORUS_MAX_CONCURRENT_REQUESTS_PER_CREDENTIAL", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests_per_credential: u32,
    /// Streams one API key, or one run, holds open at once.
    #[arg(long, env = "CHORUS_MAX_CONCURRENT_STREAMS_PER_CREDENTIAL", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams_per_credential: u32,
    /// Unary calls / streams one credential may hold at once, for a role, one
    /// API key or agents, over the per-credential defaults: `viewer=16/64`,
    /// `key:<id>=128/512`, `agents=32/8`. Repeatable (comma-separated in the
    /// environment).
    #[arg(long = "quota", env = "CHORUS_QUOTAS", value_name = "WHO=CALLS/STREAMS", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub quotas: Vec<Quota>,
    /// Calls, and streams, without a credential (server reflection) at once.
    #[arg(long, env = "CHORUS_MAX_ANONYMOUS_CALLS", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_anonymous_calls: u32,
    /// Seconds a stream without a credential (server reflection) may last.
    #[arg(long, env = "CHORUS_ANONYMOUS_STREAM_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub anonymous_stream_secs: u64,
    /// Seconds the message of a call may take to arrive once its headers have
    /// (calls whose client sends one message); past it the call is answered
    /// DEADLINE_EXCEEDED having held no place.
    #[arg(long, env = "CHORUS_REQUEST_BODY_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_body_secs: u64,
    /// Bytes of answers of API keys sent and not yet read by their clients;
    /// an answer past it is ended RESOURCE_EXHAUSTED.
    #[arg(long, env = "CHORUS_MAX_UNREAD_ANSWER_BYTES", default_value_t = 128 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unread_answer_bytes: u64,
    /// Bytes of answers of agents sent and not yet read.
    #[arg(long, env = "CHORUS_AGENT_MAX_UNREAD_ANSWER_BYTES", default_value_t = 256 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub agent_max_unread_answer_bytes: u64,
    /// Bytes of answers of one key or one run sent and not yet read.
    #[arg(long, env = "CHORUS_MAX_UNREAD_ANSWER_BYTES_PER_CREDENTIAL", default_value_t = 32 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unread_answer_bytes_per_credential: u64,
    /// Connections held at once (0: three quarters of the open-file limit,
    /// which is raised to its hard limit at start); one more closes the
    /// oldest that has carried no call with a credential.
    #[arg(long, env = "CHORUS_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: u64,
    /// Connections one peer address holds that have carried no call with a
    /// credential yet; one more closes the oldest of them.
    #[arg(long, env = "CHORUS_MAX_UNPROVEN_CONNECTIONS_PER_PEER", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_unproven_connections_per_peer: u32,
    /// Connections of all peer addresses together that have carried no call
    /// with a credential yet; one more closes the oldest of them.
    #[arg(long, env = "CHORUS_MAX_UNPROVEN_CONNECTIONS", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_unproven_connections: u32,
    /// Connections that carried a call with one API key or one run; one more
    /// closes that credential's oldest idle connection. Keys other than
    /// admins' hold at most seven eighths of --max-connections together.
    #[arg(long, env = "CHORUS_MAX_CONNECTIONS_PER_CREDENTIAL", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_credential: u32,
    /// Streams one connection may open at once (HTTP/2
    /// MAX_CONCURRENT_STREAMS, advertised to clients).
    #[arg(long, env = "CHORUS_MAX_STREAMS_PER_CONNECTION", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_connection: u32,
    /// Seconds a new connection may take to send the HTTP/2 preface (or
    /// begin TLS) before it is closed.
    #[arg(long, env = "CHORUS_HANDSHAKE_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_secs: u64,
    /// Seconds a connection may carry no call before it is closed.
    #[arg(long, env = "CHORUS_CONNECTION_IDLE_SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub connection_idle_secs: u64,
    /// Seconds an answer may wait for its client to read it before the
    /// connection is closed with everything buffered for it.
    #[arg(long, env = "CHORUS_ANSWER_SEND_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub answer_send_secs: u64,
    /// Seconds between HTTP/2 keepalive pings on an idle connection (also the
    /// TCP keepalive time); 0 turns keepalive off.
    #[arg(long, env = "CHORUS_KEEPALIVE_SECS", default_value_t = 30)]
    pub keepalive_secs: u64,
    /// Seconds a keepalive ping may go unanswered before the connection is
    /// closed.
    #[arg(long, env = "CHORUS_KEEPALIVE_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub keepalive_timeout_secs: u64,
    /// Seconds between checks of what the service depends on (the
    /// orchestrator: its database; a separate tool-exec: its orchestrator);
    /// health is NOT_SERVING while a check fails.
    #[arg(long, env = "CHORUS_HEALTH_CHECK_SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub health_check_secs: u64,
    /// Seconds between the stop signal and the end of accepting calls: health
    /// says NOT_SERVING at once, calls are still served, so load balancers
    /// move away first. A second signal exits at once.
    #[arg(long, env = "CHORUS_DRAIN_SECS", default_value_t = 0)]
    pub drain_secs: u64,
    /// Seconds calls in flight get to finish once the server stops accepting.
    #[arg(long, env = "CHORUS_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
}

impl ServeArgs {
    pub fn config(&self) -> ServeConfig {
        ServeConfig {
            request_timeout: Duration::from_secs(self.request_timeout_secs.max(1)),
            capacity: Capacity {
                unary: places(self.max_concurrent_requests),
                streams: places(self.max_concurrent_streams),
                agent_unary: places(self.agent_max_concurrent_requests),
                agent_streams: places(self.agent_max_concurrent_streams),
                credential_unary: places(self.max_concurrent_requests_per_credential),
                credential_streams: places(self.max_concurrent_streams_per_credential),
                anonymous: places(self.max_anonymous_calls),
                anonymous_stream: Duration::from_secs(self.anonymous_stream_secs.max(1)),
                request_body: Duration::from_secs(self.request_body_secs.max(1)),
                answer_bytes: bytes(self.max_unread_answer_bytes),
                agent_answer_bytes: bytes(self.agent_max_unread_answer_bytes),
                credential_answer_bytes: bytes(self.max_unread_answer_bytes_per_credential),
                ..ServeConfig::default().capacity
            },
            connections: ConnectionLimits {
                max: (self.max_connections > 0).then(|| bytes(self.max_connections)),
                per_peer: places(self.max_unproven_connections_per_peer),
                unproven: places(self.max_unproven_connections),
                per_credential: places(self.max_connections_per_credential),
                handshake: Duration::from_secs(self.handshake_timeout_secs.max(1)),
                idle: Duration::from_secs(self.connection_idle_secs.max(1)),
                answer_send: Duration::from_secs(self.answer_send_secs.max(1)),
            },
            streams_per_connection: self.max_streams_per_connection.max(1),
            quotas: self.quotas.clone(),
            keepalive: (self.keepalive_secs > 0).then(|| Duration::from_secs(self.keepalive_secs)),
            keepalive_timeout: Duration::from_secs(self.keepalive_timeout_secs.max(1)),
            health_check: Duration::from_secs(self.health_check_secs.max(1)),
            drain: Duration::from_secs(self.drain_secs),
            shutdown_grace: Duration::from_secs(self.shutdown_grace_secs),
        }
    }
}

fn places(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn bytes(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// How a server treats calls, connections and its own stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// Longest a unary call may run.
    pub request_timeout: Duration,
    /// Calls and streams at once.
    pub capacity: Capacity,
    /// Connections at once, and how long each may wait.
    pub connections: ConnectionLimits,
    /// HTTP/2 MAX_CONCURRENT_STREAMS.
    pub streams_per_connection: u32,
    /// Per-credential quotas of roles, keys and agents.
    pub quotas: Vec<Quota>,
    /// HTTP/2 ping interval and TCP keepalive time; None: off.
    pub keepalive: Option<Duration>,
    /// How long a ping may go unanswered.
    pub keepalive_timeout: Duration,
    /// How often dependencies are checked for health.
    pub health_check: Duration,
    /// NOT_SERVING but still serving, after the stop signal.
    pub drain: Duration,
    /// How long calls in flight get once accepting has stopped.
    pub shutdown_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            capacity: Capacity::default(),
            connections: ConnectionLimits::default(),
            streams_per_connection: 1024,
            quotas: Vec::new(),
            keepalive: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            health_check: Duration::from_secs(5),
            drain: Duration::ZERO,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ServeConfig {
    /// A tonic server builder with HTTP/2 keepalive and the streams a
    /// connection may open.
    pub fn server(&self) -> tonic::transport::Server {
        tonic::transport::Server::builder()
            .http2_keepalive_interval(self.keepalive)
            .http2_keepalive_timeout(Some(self.keepalive_timeout))
            .max_concurrent_streams(self.streams_per_connection)
    }

    /// The bounds of the connections of a server; `fd_limit` is the
    /// open-file limit ([`crate::connections::raise_fd_limit`]).
    pub fn connections(&self, fd_limit: u64, service: &'static str) -> Connections {
        Connections::new(self.connections, fd_limit, service)
    }

    /// The connections of `listener`, within `connections`' bounds, with TCP
    /// keepalive and no Nagle delay; `tls`: the server speaks TLS on them.
    pub fn incoming(
        &self,
        listener: tokio::net::TcpListener,
        connections: &Connections,
        tls: bool,
    ) -> impl futures_util::Stream<Item = std::io::Result<Conn>> + Send + 'static {
        connections.incoming(listener, self.keepalive, tls)
    }

    /// The concurrency limit, per kind of caller: inside the auth layer (no
    /// call holds a place before its credential is checked).
    pub fn load_shed(
        &self,
        calls: &Calls,
        connections: &Connections,
        service: &'static str,
    ) -> LoadShedLayer {
        LoadShedLayer::new(
            calls.clone(),
            self.capacity,
            self.quotas.clone(),
            Some(connections.clone()),
            service,
        )
    }

    /// The request timeout of unary calls.
    pub fn deadline(&self, calls: &Calls) -> DeadlineLayer {
        DeadlineLayer::new(calls.clone(), self.request_timeout)
    }
}

impl ServeConfig {
    /// Every limit of a port served with these settings and `connections`,
    /// with its value in force, as GetStatus shows them.
    pub fn limits(&self, connections: &Connections) -> Vec<Limit> {
        let mut limits = self.connection_limits(connections);
        limits.extend(self.call_limits());
        limits
    }

    /// The bounds of connections: how many, and for how long.
    fn connection_limits(&self, connections: &Connections) -> Vec<Limit> {
        let l = &self.connections;
        vec![
            limit(
                "--max-connections",
                connections.max().to_string(),
                "connections at once; a newer one closes the oldest that carried no call with a credential",
            ),
            limit(
                "--max-unproven-connections-per-peer",
                l.per_peer.to_string(),
                "connections of one address that carried no call with a credential",
            ),
            limit(
                "--max-unproven-connections",
                l.unproven.to_string(),
                "connections of all addresses together that carried no call with a credential",
            ),
            limit(
                "--max-connections-per-credential",
                l.per_credential.to_string(),
                "connections that carried a call with one key or run; keys other than admins' hold at most seven eighths of --max-connections",
            ),
            limit(
                "--max-streams-per-connection",
                self.streams_per_connection.to_string(),
                "streams one connection opens at once (HTTP/2 MAX_CONCURRENT_STREAMS)",
            ),
            limit(
                "--handshake-timeout-secs",
                secs(l.handshake),
                "time a new connection has to begin HTTP/2 or TLS",
            ),
            limit(
                "--connection-idle-secs",
                secs(l.idle),
                "time a connection may carry no call",
            ),
            limit(
                "--answer-send-secs",
                secs(l.answer_send),
                "time an answer may wait for its client to read it",
            ),
        ]
    }

    /// The bounds of calls: their time, their places by kind of caller, and
    /// their answers' unread bytes.
    fn call_limits(&self) -> Vec<Limit> {
        let c = &self.capacity;
        vec![
            limit(
                "--request-body-secs",
                secs(c.request_body),
                "time a call's message may take after its headers",
            ),
            limit(
                "--request-timeout-secs",
                secs(self.request_timeout),
                "running time of a unary call",
            ),
            limit(
                "--max-concurrent-requests",
                c.unary.to_string(),
                "unary calls of API keys at once",
            ),
            limit(
                "--max-concurrent-streams",
                c.streams.to_string(),
                "streams of API keys at once",
            ),
            limit(
                "--agent-max-concurrent-requests",
                c.agent_unary.to_string(),
                "unary calls of agents at once",
            ),
            limit(
                "--agent-max-concurrent-streams",
                c.agent_streams.to_string(),
                "streams of agents at once",
            ),
            limit(
                "--max-concurrent-requests-per-credential",
                c.credential_unary.to_string(),
                "unary calls of one key or one run at once",
            ),
            limit(
                "--max-concurrent-streams-per-credential",
                c.credential_streams.to_string(),
                "streams of one key or one run at once",
            ),
            limit(
                "--quota",
                if self.quotas.is_empty() {
                    "none".to_owned()
                } else {
                    let quotas: Vec<String> = self.quotas.iter().map(Quota::to_string).collect();
                    quotas.join(",")
                },
                "unary calls / streams of one credential by role, key or agents, over the two defaults above",
            ),
            limit(
                "--max-anonymous-calls",
                c.anonymous.to_string(),
                "calls, and streams, without a credential at once",
            ),
            limit(
                "--anonymous-stream-secs",
                secs(c.anonymous_stream),
                "time a stream without a credential lasts",
            ),
            limit(
                "--max-unread-answer-bytes",
                mib(c.answer_bytes),
                "bytes of API keys' answers sent and not yet read",
            ),
            limit(
                "--agent-max-unread-answer-bytes",
                mib(c.agent_answer_bytes),
                "bytes of agents' answers sent and not yet read",
            ),
            limit(
                "--max-unread-answer-bytes-per-credential",
                mib(c.credential_answer_bytes),
                "bytes of one key's or one run's answers sent and not yet read",
            ),
        ]
    }
}

/// One limit as GetStatus shows it.
fn limit(flag: &str, value: String, bounds: &str) -> Limit {
    Limit {
        flag: flag.to_owned(),
        value,
        bounds: bounds.to_owned(),
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

fn mib(n: usize) -> String {
    format!("{} MiB", n / (1024 * 1024))
}
