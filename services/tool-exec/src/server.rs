//! The service entry point: `run(listener, config, shutdown)`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chorus_auth::AuthLayer;
use chorus_run_token::RunTokenVerifier;

use chorus_proto::limits::MessageLimitLayer;
use chorus_proto::tools::v1::tool_exec_server::ToolExecServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tracing::{info, warn};

use crate::auth::ToolExecAuthenticator;
use crate::config::ToolExecConfig;
use crate::gate::RunGate;
use crate::grpc::ToolExecService;
use crate::runner::ToolRunner;

/// Serves `chorus.tools.v1.ToolExec`, gRPC health and reflection (v1 and v1alpha)
/// on `listener` until `shutdown` resolves.
///
/// Shutdown order: health goes NOT_SERVING, the server stops accepting, the
/// cancellation token fires (running bash and git processes are killed with their
/// process groups, file tools stop at their next check and answer UNAVAILABLE),
/// and calls in flight get `shutdown_grace` to finish. Blocking threads still
/// busy after that are the binary's to cut off (`Runtime::shutdown_timeout`).
pub async fn run(
    listener: TcpListener,
    config: ToolExecConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let cancel = CancellationToken::new();
    let runner = ToolRunner::new(config.limits, config.processes.clone(), cancel.clone());
    let message_bytes = config.limits.message_bytes();
    let service = ToolExecServer::new(ToolExecService::new(
        runner,
        config.verifier.clone(),
        config.gate.clone(),
    ))
    .max_decoding_message_size(message_bytes);

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<ToolExecServer<ToolExecService>>()
        .await;
    // Reflection lists what this port serves, nothing else.
    let (reflection_v1, reflection_v1alpha) =
        chorus_proto::reflection::services(&["chorus.tools.v1.ToolExec"])?;

    let stop = CancellationToken::new();
    if let Some(gate) = config.gate.clone() {
        tokio::spawn(refresh_keys(gate, config.verifier.clone(), stop.clone()));
    }
    let authenticator = Arc::new(ToolExecAuthenticator::new(
        config.verifier.clone(),
        config.gate.clone(),
    ));
    let auth = AuthLayer::with_peers(
        authenticator,
        crate::auth::access,
        "agents pass their run token (CHORUS_RUN_TOKEN); operators an API key of role viewer or more",
        config.peers.clone(),
    );
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &config.tls {
        builder = builder.tls_config(tls.config()?)?;
    }
    let serve_stop = stop.clone();
    let server = builder
        // Outermost: every call is traced and measured, refused ones too.
        .layer(chorus_telemetry::grpc::ServerLayer)
        .layer(MessageLimitLayer::new(
            message_bytes,
            config.limits.message_hint(),
        ))
        .layer(auth)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move { serve_stop.cancelled().await },
        );
    let mut server = std::pin::pin!(server);

    info!(%addr, "tool-exec serving");
    tokio::select! {
        result = &mut server => return result.map_err(Into::into),
        () = shutdown => {}
    }

    info!("tool-exec shutting down");
    health
        .set_not_serving::<ToolExecServer<ToolExecService>>()
        .await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    stop.cancel();
    cancel.cancel();
    match tokio::time::timeout(config.shutdown_grace, &mut server).await {
        Ok(result) => result?,
        Err(_) => {
            warn!(grace = ?config.shutdown_grace, "calls still running after the grace period; stopping anyway")
        }
    }
    info!("tool-exec stopped");
    Ok(())
}

/// How often tool-exec asks its orchestrator for the run-token keys (a token
/// naming an unknown key asks at once).
const KEY_REFRESH: Duration = Duration::from_secs(60);

/// Keeps `verifier`'s keys current through `gate` until `stop` fires.
async fn refresh_keys(gate: Arc<dyn RunGate>, verifier: RunTokenVerifier, stop: CancellationToken) {
    loop {
        if let Err(e) = gate.refresh_keys(&verifier).await {
            warn!(error = %e, "cannot fetch the run-token keys from the orchestrator; retrying");
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(KEY_REFRESH) => {}
        }
    }
}
