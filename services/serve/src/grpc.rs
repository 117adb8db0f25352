//! One gRPC port as both services serve it: the layers every call passes
//! (telemetry, the request deadline, the message limit, authentication, load
//! shedding, in that order), health and reflection for the served names,
//! bounded connections, TLS, and the shutdown sequence — health
//! NOT_SERVING, calls still served for the drain, then the stop (the
//! caller's token: the server stops accepting), and a grace for the calls in
//! flight.
//!
//! ```text
//! let port = Port::open(&serve, spec)?;        // health, calls, connections
//! // ... the services, built with port.health / port.limits(&serve)
//! let mut serving = port.serve(&serve, listener, tls, auth, routes, stop.clone())?;
//! if serving.drain_after(shutdown, || ...).await? { stop.cancel(); ...; serving.finish().await?; }
//! ```

use std::future::Future;
use std::time::Duration;

use chorus_auth::AuthLayer;
use chorus_auth::tls::ServerTls;
use chorus_proto::limits::MessageLimitLayer;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tracing::{info, warn};

use crate::connections::Connections;
use crate::shed::LoadShedLayer;
use crate::{Calls, Health, ServeConfig};

/// A port's services with its layers, called in-process (see [`Port::local`]).
pub type LocalService = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    std::convert::Infallible,
>;

/// What a port serves.
#[derive(Debug, Clone)]
pub struct PortSpec {
    /// The service as refusals name it (`the orchestrator`, `tool-exec`).
    pub name: &'static str,
    /// The service as the log's lines begin (`orchestrator serving`).
    pub log: &'static str,
    /// The gRPC services served (health and reflection name these).
    pub services: &'static [&'static str],
    /// Methods that bound their own time: the request deadline leaves them.
    pub own_deadline: &'static [&'static str],
    /// The largest message taken.
    pub message_bytes: usize,
    /// What a caller over it is told to do.
    pub message_hint: String,
}

/// A port opened: its health, its calls and its connection bounds, for the
/// services to be built with; then [`Port::serve`].
#[derive(Debug)]
pub struct Port {
    pub spec: PortSpec,
    pub health: Health,
    pub calls: Calls,
    pub connections: Connections,
    /// The port's load shedding: one set of places for its calls over the
    /// network and those made in this process, so a key's share is one.
    shed: LoadShedLayer,
}

impl Port {
    /// Opens a port of `spec` with `serve`'s settings (raising the process's
    /// open-file limit: connections are bounded by `--max-connections`).
    pub async fn open(serve: &ServeConfig, spec: PortSpec) -> anyhow::Result<Self> {
        let connections = serve.connections(crate::connections::raise_fd_limit(), spec.name);
        let health = Health::new(spec.services).await;
        let calls = Calls::from_descriptors(
            chorus_proto::FILE_DESCRIPTOR_SET,
            spec.services,
            spec.own_deadline,
        )?;
        let shed = serve.load_shed(&calls, &connections, spec.name);
        Ok(Self {
            spec,
            health,
            calls,
            connections,
            shed,
        })
    }

    /// The limits of this port, for GetStatus.
    pub fn limits(&self, serve: &ServeConfig) -> Vec<chorus_proto::serving::v1::Limit> {
        serve.limits(&self.connections)
    }

    /// The port's layers — telemetry, the deadline, the message limit,
    /// authentication, load shedding — around `routes`, as one service for
    /// calls made in this process (the console's JSON gateway): every rule a
    /// call meets over the network, without a connection.
    pub fn local(&self, serve: &ServeConfig, auth: AuthLayer, routes: Routes) -> LocalService {
        let service = tower::ServiceBuilder::new()
            .layer(chorus_telemetry::grpc::ServerLayer)
            .layer(serve.deadline(&self.calls))
            .layer(MessageLimitLayer::new(
                self.spec.message_bytes,
                self.spec.message_hint.clone(),
            ))
            .layer(auth)
            .layer(self.shed.clone())
            .service(routes);
        tower::util::BoxCloneSyncService::new(service)
    }

    /// Serves `routes` (with health and reflection) on `listener` in a task
    /// of its own, every call through the layers, until `stop` fires.
    pub fn serve(
        self,
        serve: &ServeConfig,
        listener: TcpListener,
        tls: Option<&ServerTls>,
        auth: AuthLayer,
        routes: Routes,
        stop: CancellationToken,
    ) -> anyhow::Result<Serving> {
        let addr = listener.local_addr()?;
        // Reflection lists what this port serves, nothing else.
        let (reflection_v1, reflection_v1alpha) =
            chorus_proto::reflection::services(self.spec.services)?;
        let routes = routes
            .add_service(self.health.service())
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha);
        let mut builder = serve.server();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls.config()?)?;
        }
        let incoming = serve.incoming(listener, &self.connections, tls.is_some());
        let server = builder
            // Outermost: every call is traced and measured, refused and shed ones too.
            .layer(chorus_telemetry::grpc::ServerLayer)
            .layer(serve.deadline(&self.calls))
            .layer(MessageLimitLayer::new(
                self.spec.message_bytes,
                self.spec.message_hint.clone(),
            ))
            .layer(auth)
            // Inside the auth layer: no call holds a place before its
            // credential is checked, and each kind of caller has places of its own.
            .layer(self.shed.clone())
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async move { stop.cancelled().await });
        info!(%addr, "{} serving", self.spec.log);
        Ok(Serving {
            task: tokio::spawn(server),
            health: self.health,
            name: self.spec.log,
            drain: serve.drain,
            grace: serve.shutdown_grace,
        })
    }
}

/// A port being served.
#[derive(Debug)]
pub struct Serving {
    task: JoinHandle<Result<(), tonic::transport::Error>>,
    health: Health,
    name: &'static str,
    drain: Duration,
    grace: Duration,
}

impl Serving {
    /// Waits for `shutdown`, then drains: health goes NOT_SERVING,
    /// `on_drain` runs, and calls are still served for the drain period.
    /// True when drained (the caller then stops: its stop token, then
    /// [`Serving::finish`]); false when the server ended by itself first
    /// (its error, if it failed).
    pub async fn drain_after(
        &mut self,
        shutdown: impl Future<Output = ()> + Send,
        on_drain: impl FnOnce(),
    ) -> anyhow::Result<bool> {
        tokio::select! {
            ended = &mut self.task => return ended_early(ended),
            () = shutdown => {}
        }
        self.health.drain().await;
        on_drain();
        if !self.drain.is_zero() {
            info!(drain = ?self.drain, "{} draining: health NOT_SERVING, calls still served", self.name);
            tokio::select! {
                ended = &mut self.task => return ended_early(ended),
                () = tokio::time::sleep(self.drain) => {}
            }
        }
        info!("{} shutting down", self.name);
        Ok(true)
    }

    /// Once the caller's stop token fired: gives the calls in flight the
    /// shutdown grace, then stops anyway.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        match tokio::time::timeout(self.grace, &mut self.task).await {
            Ok(ended) => ended??,
            Err(_) => {
                warn!(grace = ?self.grace, "calls still running after the grace period; stopping anyway");
                self.task.abort();
            }
        }
        info!("{} stopped", self.name);
        Ok(())
    }
}

/// The server's end before the shutdown asked for it.
fn ended_early(
    ended: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>,
) -> anyhow::Result<bool> {
    ended??;
    Ok(false)
}
