//! The service entry point: `run(listener, config, shutdown)`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chorus_auth::AuthLayer;
use chorus_run_token::RunTokenVerifier;

use chorus_proto::limits::MessageLimitLayer;
use chorus_proto::tools::v1::tool_exec_server::ToolExecServer;
use chorus_serve::health::watch_dependency;
use chorus_serve::{Calls, Health};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::auth::ToolExecAuthenticator;
use crate::calls::ToolCalls;
use crate::config::ToolExecConfig;
use crate::gate::RunGate;
use crate::grpc::ToolExecService;
use crate::runner::ToolRunner;

/// The service this server serves, as health and reflection name it.
pub const SERVICE: &str = "chorus.tools.v1.ToolExec";

/// ExecuteTool bounds itself (`--tool-timeout-secs`, the bash timeout) and
/// answers with partial output when that passes: the request timeout leaves
/// it alone.
const OWN_DEADLINE: [&str; 1] = ["/chorus.tools.v1.ToolExec/ExecuteTool"];

/// Serves `chorus.tools.v1.ToolExec`, gRPC health and reflection (v1 and v1alpha)
/// on `listener` until `shutdown` resolves.
///
/// Every call passes the load-shedding layer (`--max-concurrent-requests`),
/// the request timeout (not ExecuteTool, which has its own), the message
/// limit and authentication, in that order. Health (`""` and
/// `chorus.tools.v1.ToolExec`) is NOT_SERVING while the gate's orchestrator
/// cannot be reached.
///
/// Shutdown order: health goes NOT_SERVING, calls are still served for the
/// drain period, then the server stops accepting, the cancellation token
/// fires (running bash and git processes are killed with their process
/// groups, file tools stop at their next check and answer UNAVAILABLE), and
/// calls in flight get the shutdown grace to finish. Blocking threads still
/// busy after that are the binary's to cut off (`Runtime::shutdown_timeout`).
pub async fn run(
    listener: TcpListener,
    config: ToolExecConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let mut serve = config.serve;
    let cancel = CancellationToken::new();
    let runner = ToolRunner::new(config.limits, config.processes.clone(), cancel.clone());
    let message_bytes = config.limits.message_bytes();
    serve.capacity.request_bytes = message_bytes;
    // Connections are bounded by --max-connections, not a low default limit.
    let connections = serve.connections(chorus_serve::connections::raise_fd_limit(), "tool-exec");
    let tool_calls = ToolCalls::new(runner, config.verifier.clone(), config.gate.clone());
    let service = ToolExecServer::new(
        ToolExecService::over(tool_calls.clone()).with_limits(serve.limits(&connections)),
    )
    .max_decoding_message_size(message_bytes);

    let health = Health::new(&[SERVICE]).await;
    let calls =
        Calls::from_descriptors(chorus_proto::FILE_DESCRIPTOR_SET, &[SERVICE], &OWN_DEADLINE)?;
    // Reflection lists what this port serves, nothing else.
    let (reflection_v1, reflection_v1alpha) = chorus_proto::reflection::services(&[SERVICE])?;

    let stop = CancellationToken::new();
    if let Some(gate) = config.gate.clone() {
        health.unchecked("the orchestrator").await;
        tokio::spawn(refresh_keys(
            gate.clone(),
            config.verifier.clone(),
            stop.clone(),
        ));
        tokio::spawn(watch_dependency(
            health.clone(),
            "the orchestrator",
            serve.health_check,
            Arc::new(Notify::new()),
            stop.clone(),
            move || {
                let gate = Arc::clone(&gate);
                async move { gate.ready().await }
            },
        ));
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
    let mut builder = serve.server();
    if let Some(tls) = &config.tls {
        builder = builder.tls_config(tls.config()?)?;
    }
    let serve_stop = stop.clone();
    let server = builder
        // Outermost: every call is traced and measured, refused and shed ones too.
        .layer(chorus_telemetry::grpc::ServerLayer)
        .layer(serve.deadline(&calls))
        .layer(MessageLimitLayer::new(
            message_bytes,
            config.limits.message_hint(),
        ))
        .layer(auth)
        // Inside the auth layer: no call holds a place before its credential
        // is checked, and each kind of caller has places of its own.
        .layer(serve.load_shed(&calls, &connections, "tool-exec"))
        .add_service(health.service())
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service)
        .serve_with_incoming_shutdown(
            serve.incoming(listener, &connections, config.tls.is_some()),
            async move { serve_stop.cancelled().await },
        );
    let mut server = std::pin::pin!(server);
    // The MCP endpoint ends with the gRPC port's calls (`stop`).
    let mcp = match config.mcp.clone() {
        Some(face) => Some(tokio::spawn(crate::mcp::serve(
            face,
            tool_calls,
            config.gate.clone(),
            config.verifier.clone(),
            config.tls.clone(),
            stop.clone(),
        ))),
        None => None,
    };

    info!(%addr, "tool-exec serving");
    tokio::select! {
        result = &mut server => return result.map_err(Into::into),
        () = shutdown => {}
    }

    health.drain().await;
    if !serve.drain.is_zero() {
        info!(drain = ?serve.drain, "tool-exec draining: health NOT_SERVING, calls still served");
        tokio::select! {
            result = &mut server => return result.map_err(Into::into),
            () = tokio::time::sleep(serve.drain) => {}
        }
    }
    info!("tool-exec shutting down");
    stop.cancel();
    cancel.cancel();
    match tokio::time::timeout(serve.shutdown_grace, &mut server).await {
        Ok(result) => result?,
        Err(_) => {
            warn!(grace = ?serve.shutdown_grace, "calls still running after the grace period; stopping anyway")
        }
    }
    if let Some(mcp) = mcp {
        match mcp.await {
            Ok(Err(e)) => warn!(error = %e, "the MCP endpoint failed"),
            Err(e) => warn!(error = %e, "the MCP endpoint's task failed"),
            Ok(Ok(())) => {}
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
