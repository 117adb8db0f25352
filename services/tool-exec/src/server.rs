//! The service entry point: `run(listener, config, shutdown)`.

use std::future::Future;

use chorus_proto::tools::v1::tool_exec_server::ToolExecServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tracing::{info, info_span, warn};

use crate::config::ToolExecConfig;
use crate::grpc::ToolExecService;
use crate::runner::ToolRunner;

/// Serves `chorus.tools.v1.ToolExec`, gRPC health and reflection (v1 and v1alpha)
/// on `listener` until `shutdown` resolves.
///
/// Shutdown order: health goes NOT_SERVING, the server stops accepting, the
/// cancellation token fires (running bash and git processes are killed with their
/// process groups), and calls in flight get `shutdown_grace` to finish.
pub async fn run(
    listener: TcpListener,
    config: ToolExecConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let cancel = CancellationToken::new();
    let runner = ToolRunner::new(config.limits, config.processes.clone(), cancel.clone());
    let service = ToolExecServer::new(ToolExecService::new(
        runner,
        config.verifier.clone(),
        config.gate.clone(),
    ));

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<ToolExecServer<ToolExecService>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(chorus_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(chorus_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let stop = CancellationToken::new();
    let serve_stop = stop.clone();
    let server = tonic::transport::Server::builder()
        .trace_fn(|request| info_span!("grpc", method = %request.uri().path()))
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
