//! The service entry point: `run(listener, config, shutdown)`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::orchestrator::v1::agent_tools_server::AgentToolsServer;
use chorus_proto::orchestrator::v1::orchestrator_server::OrchestratorServer;
use chorus_run_token::RunTokenSigner;
use chorus_tool_exec::gate::{OrchestratorGate, RunGate};
use chorus_tool_exec::{Limits, ToolExecConfig};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tracing::{info, info_span, warn};

use crate::grpc::agent_tools::AgentToolsService;
use crate::grpc::orchestrator::OrchestratorService;
use crate::runner::RunnerConfig;
use crate::state::AppState;
use crate::store::Store;

/// A tool-exec served by the orchestrator's own process (the all-in-one shape).
#[derive(Debug)]
pub struct EmbeddedToolExec {
    pub listener: TcpListener,
    pub limits: Limits,
}

/// Everything the orchestrator needs to run.
#[derive(Debug)]
pub struct OrchestratorConfig {
    /// `postgres://...`, or a SQLite file path.
    pub database_url: String,
    /// Mints run tokens (the private key).
    pub signer: RunTokenSigner,
    /// Serve tool-exec in this process too.
    pub embedded_tool_exec: Option<EmbeddedToolExec>,
    /// Address of a tool-exec run separately (when none is embedded), handed to agents.
    pub tool_exec_addr: Option<String>,
    /// How long shutdown waits for calls and streams in flight.
    pub shutdown_grace: Duration,
    /// How agents are run.
    pub runner: RunnerConfig,
    /// How the processes agents cause are confined (CLI agents here, bash and
    /// git in the embedded tool-exec).
    pub sandbox: chorus_sandbox::SandboxConfig,
}

impl OrchestratorConfig {
    /// Defaults, with run directories under `data_dir`.
    pub fn new(
        database_url: impl Into<String>,
        signer: RunTokenSigner,
        data_dir: &std::path::Path,
    ) -> Self {
        Self {
            runner: RunnerConfig::new(data_dir),
            database_url: database_url.into(),
            signer,
            embedded_tool_exec: None,
            tool_exec_addr: None,
            shutdown_grace: Duration::from_secs(10),
            sandbox: chorus_sandbox::SandboxConfig::default(),
        }
    }
}

/// Serves `chorus.orchestrator.v1` (Orchestrator and AgentTools), gRPC health and
/// reflection (v1 and v1alpha) on `listener`, and the embedded tool-exec when
/// configured, until `shutdown` resolves.
///
/// Shutdown order: health goes NOT_SERVING, the shared cancellation token fires
/// (WatchTask streams end, agent runs stop, the embedded tool-exec kills running
/// commands), every run's processes are killed and its interruption recorded,
/// the servers stop accepting and calls in flight get `shutdown_grace` to finish.
pub async fn run(
    listener: TcpListener,
    config: OrchestratorConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let store = Store::open(&config.database_url).await?;
    info!(backend = ?store.backend(), "store open");
    let processes = chorus_sandbox::Sandbox::start(config.sandbox).await;
    let mut state = AppState::new(store, config.signer, config.runner, processes.clone());
    state.addresses = crate::state::Addresses {
        orchestrator: addr.to_string(),
        tool_exec: match &config.embedded_tool_exec {
            Some(embedded) => embedded.listener.local_addr()?.to_string(),
            None => config.tool_exec_addr.clone().unwrap_or_default(),
        },
        embedded_tool_exec: config.embedded_tool_exec.is_some(),
    };

    // Runs a previous orchestrator left unfinished are over: record it before
    // anyone can ask.
    crate::runner::recover::recover(&state).await?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<AgentToolsServer<AgentToolsService>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(chorus_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(chorus_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let stop = state.shutdown.clone();
    let serve_stop = stop.clone();
    let server = tonic::transport::Server::builder()
        .trace_fn(|request| info_span!("grpc", method = %request.uri().path()))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(OrchestratorServer::new(OrchestratorService::new(
            state.clone(),
        )))
        .add_service(AgentToolsServer::new(AgentToolsService::new(state.clone())))
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                serve_stop.cancelled().await;
            },
        );
    let mut server = std::pin::pin!(server);

    // The embedded tool-exec checks runs with this orchestrator over loopback, as a
    // separate tool-exec would.
    let tool_exec = match config.embedded_tool_exec {
        Some(embedded) => {
            let gate: Arc<dyn RunGate> = Arc::new(OrchestratorGate::new(&addr.to_string())?);
            let tool_exec_config = ToolExecConfig {
                limits: embedded.limits,
                gate: Some(gate),
                ..ToolExecConfig::new(state.verifier.clone(), processes.clone())
            };
            let tool_exec_stop = stop.clone();
            info!(addr = %embedded.listener.local_addr()?, "embedded tool-exec");
            Some(tokio::spawn(chorus_tool_exec::run(
                embedded.listener,
                tool_exec_config,
                async move {
                    tool_exec_stop.cancelled().await;
                },
            )))
        }
        None => None,
    };

    info!(%addr, "orchestrator serving");
    tokio::select! {
        result = &mut server => return result.map_err(Into::into),
        () = shutdown => {}
    }

    info!("orchestrator shutting down");
    health
        .set_not_serving::<AgentToolsServer<AgentToolsService>>()
        .await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    stop.cancel();
    // Every run's processes are killed and its end recorded before the store goes.
    state.runner.shutdown().await;
    match tokio::time::timeout(config.shutdown_grace, &mut server).await {
        Ok(result) => result?,
        Err(_) => {
            warn!(grace = ?config.shutdown_grace, "calls still running after the grace period; stopping anyway")
        }
    }
    if let Some(tool_exec) = tool_exec {
        match tool_exec.await {
            Ok(result) => result?,
            Err(e) => warn!(error = %e, "embedded tool-exec task failed"),
        }
    }
    info!("orchestrator stopped");
    Ok(())
}
