//! The serving settings both services take: limits and timeouts of calls,
//! keepalive of connections, health checks, the drain and the grace of a
//! shutdown.

use std::time::Duration;

use tonic::transport::server::TcpIncoming;

use crate::calls::Calls;
use crate::deadline::DeadlineLayer;
use crate::shed::{Capacity, LoadShedLayer};

/// The serving flags (flatten into a service's settings).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Seconds a unary call may run before it is stopped and answered
    /// DEADLINE_EXCEEDED (streams are never cut; a client's shorter
    /// grpc-timeout wins).
    #[arg(long, env = "CHORUS_REQUEST_TIMEOUT_SECS", default_value_t = ServeConfig::default().request_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_secs: u64,
    /// Unary calls served at once; one more is refused at once with
    /// RESOURCE_EXHAUSTED and a retry hint.
    #[arg(long, env = "CHORUS_MAX_CONCURRENT_REQUESTS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
    /// Streams (WatchTask, Handoff, reflection) open at once, counted apart
    /// from unary calls; one more is refused at once with RESOURCE_EXHAUSTED.
    #[arg(long, env = "CHORUS_MAX_CONCURRENT_STREAMS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,
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
                unary: usize::try_from(self.max_concurrent_requests).unwrap_or(usize::MAX),
                streams: usize::try_from(self.max_concurrent_streams).unwrap_or(usize::MAX),
                ..ServeConfig::default().capacity
            },
            keepalive: (self.keepalive_secs > 0).then(|| Duration::from_secs(self.keepalive_secs)),
            keepalive_timeout: Duration::from_secs(self.keepalive_timeout_secs.max(1)),
            health_check: Duration::from_secs(self.health_check_secs.max(1)),
            drain: Duration::from_secs(self.drain_secs),
            shutdown_grace: Duration::from_secs(self.shutdown_grace_secs),
        }
    }
}

/// How a server treats calls, connections and its own stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeConfig {
    /// Longest a unary call may run.
    pub request_timeout: Duration,
    /// Calls and streams at once.
    pub capacity: Capacity,
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
            capacity: Capacity {
                unary: 256,
                streams: 1024,
                retry_after: Duration::from_secs(1),
            },
            keepalive: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            health_check: Duration::from_secs(5),
            drain: Duration::ZERO,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ServeConfig {
    /// A tonic server builder with HTTP/2 keepalive.
    pub fn server(&self) -> tonic::transport::Server {
        tonic::transport::Server::builder()
            .http2_keepalive_interval(self.keepalive)
            .http2_keepalive_timeout(Some(self.keepalive_timeout))
    }

    /// The connections of `listener`, with TCP keepalive and no Nagle delay.
    pub fn incoming(&self, listener: tokio::net::TcpListener) -> TcpIncoming {
        TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(self.keepalive)
    }

    /// The concurrency limit (outermost: a refused call costs nothing more).
    pub fn load_shed(&self, calls: &Calls, service: &'static str) -> LoadShedLayer {
        LoadShedLayer::new(calls.clone(), self.capacity, service)
    }

    /// The request timeout of unary calls.
    pub fn deadline(&self, calls: &Calls) -> DeadlineLayer {
        DeadlineLayer::new(calls.clone(), self.request_timeout)
    }
}
