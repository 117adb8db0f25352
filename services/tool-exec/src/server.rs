//! The service entry point: `run(listener, config, shutdown)`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chorus_auth::AuthLayer;
use chorus_run_token::RunTokenVerifier;

use chorus_proto::tools::v1::tool_exec_server::ToolExecServer;
use chorus_serve::Health;
use chorus_serve::grpc::{Port, PortSpec};
use chorus_serve::health::watch_dependency;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tracing::warn;

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
    let mut serve = config.serve.clone();
    let cancel = CancellationToken::new();
    let runner = ToolRunner::new(config.limits, config.processes.clone(), cancel.clone());
    let message_bytes = config.limits.message_bytes();
    serve.capacity.request_bytes = message_bytes;
    let port = Port::open(
        &serve,
        PortSpec {
            name: "tool-exec",
            log: "tool-exec",
            services: &[SERVICE],
            own_deadline: &OWN_DEADLINE,
            message_bytes,
            message_hint: config.limits.message_hint(),
        },
    )
    .await?;
    let tool_calls = ToolCalls::new(runner, config.verifier.clone(), config.gate.clone());
    let service = ToolExecServer::new(
        ToolExecService::over(tool_calls.clone()).with_limits(port.limits(&serve)),
    )
    .max_decoding_message_size(message_bytes);

    let stop = CancellationToken::new();
    if let Some(gate) = config.gate.clone() {
        watch_gate(&port.health, gate, &config, serve.health_check, &stop).await;
    }
    let auth = AuthLayer::with_peers(
        Arc::new(ToolExecAuthenticator::new(
            config.verifier.clone(),
            config.gate.clone(),
        )),
        crate::auth::access,
        "agents pass their run token (CHORUS_RUN_TOKEN); operators an API key of role viewer or more",
        config.peers.clone(),
    );
    let mut serving = port.serve(
        &serve,
        listener,
        config.tls.as_ref(),
        auth,
        Routes::new(service),
        stop.clone(),
    )?;
    // The MCP endpoint ends with the gRPC port's calls (`stop`).
    let mcp = config.mcp.clone().map(|face| {
        tokio::spawn(crate::mcp::serve(
            face,
            tool_calls,
            config.gate.clone(),
            config.verifier.clone(),
            config.tls.clone(),
            stop.clone(),
        ))
    });
    if !serving.drain_after(shutdown, || {}).await? {
        return Ok(());
    }
    stop.cancel();
    cancel.cancel();
    serving.finish().await?;
    if let Some(mcp) = mcp {
        match mcp.await {
            Ok(Err(e)) => warn!(error = %e, "the MCP endpoint failed"),
            Err(e) => warn!(error = %e, "the MCP endpoint's task failed"),
            Ok(Ok(())) => {}
        }
    }
    Ok(())
}

/// Health follows the gate's orchestrator (unchecked until the first
/// answer), and the run-token keys are fetched from it, until `stop`.
async fn watch_gate(
    health: &Health,
    gate: Arc<dyn RunGate>,
    config: &ToolExecConfig,
    every: Duration,
    stop: &CancellationToken,
) {
    health.unchecked("the orchestrator").await;
    tokio::spawn(refresh_keys(
        gate.clone(),
        config.verifier.clone(),
        stop.clone(),
    ));
    tokio::spawn(watch_dependency(
        health.clone(),
        "the orchestrator",
        every,
        Arc::new(Notify::new()),
        stop.clone(),
        move || {
            let gate = Arc::clone(&gate);
            async move { gate.ready().await }
        },
    ));
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
