//! The orchestrator with its embedded tool-exec, started in-process.

use std::net::SocketAddr;
use std::path::Path;

use chorus_orchestrator::server::{EmbeddedToolExec, OrchestratorConfig};
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_run_token::RunTokenSigner;
use chorus_tool_exec::Limits;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::{TOOL_EXEC_SERVICE, wait_serving};

/// gRPC service name the orchestrator reports health for.
pub const AGENT_TOOLS_SERVICE: &str = "chorus.orchestrator.v1.AgentTools";

/// A running orchestrator (all-in-one: with tool-exec) on 127.0.0.1 ports.
pub struct Orchestrator {
    pub addr: SocketAddr,
    pub tool_exec_addr: SocketAddr,
    /// Holds the run directories (`runs/<run id>`).
    pub runs: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Orchestrator {
    /// Starts on `database_url` with the key pair of `data_dir` (created if
    /// missing) and waits until both services are SERVING.
    pub async fn start(database_url: &str, data_dir: &Path) -> Self {
        let signer = chorus_run_token::load_or_create_signer(data_dir).expect("key pair");
        Self::start_with_signer(database_url, signer).await
    }

    pub async fn start_with_signer(database_url: &str, signer: RunTokenSigner) -> Self {
        Self::start_with(database_url, signer, true).await
    }

    /// Starts with or without the embedded tool-exec (without it, `tool_exec_addr`
    /// names a port nothing serves).
    pub async fn start_with(
        database_url: &str,
        signer: RunTokenSigner,
        embed_tool_exec: bool,
    ) -> Self {
        Self::start_configured(database_url, signer, embed_tool_exec, |_| {}).await
    }

    /// Starts with agents run by `runner` settings adjusted by `configure`
    /// (defaults: the workspace's chorus-tools binary, run directories in a
    /// temporary directory that lives as long as this value).
    pub async fn start_configured(
        database_url: &str,
        signer: RunTokenSigner,
        embed_tool_exec: bool,
        configure: impl FnOnce(&mut OrchestratorConfig),
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let tool_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (addr, tool_exec_addr) = (
            listener.local_addr().expect("addr"),
            tool_listener.local_addr().expect("addr"),
        );
        let embedded_tool_exec = embed_tool_exec.then(|| EmbeddedToolExec {
            listener: tool_listener,
            limits: Limits::default(),
        });
        let runs = tempfile::tempdir().expect("runs dir");
        let mut config = OrchestratorConfig {
            embedded_tool_exec,
            ..OrchestratorConfig::new(database_url, signer, runs.path())
        };
        config.runner.chorus_tools = crate::chorus_tools_bin();
        config.runner.runs_dir = runs.path().join("runs");
        configure(&mut config);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            chorus_orchestrator::server::run(listener, config, async move {
                let _ = stopped.await;
            })
            .await
            .expect("orchestrator ran");
        });
        wait_serving(addr, AGENT_TOOLS_SERVICE).await;
        if embed_tool_exec {
            wait_serving(tool_exec_addr, TOOL_EXEC_SERVICE).await;
        }
        Self {
            addr,
            tool_exec_addr,
            runs,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A client of the management API.
    pub async fn client(&self) -> OrchestratorClient<Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        OrchestratorClient::new(channel)
    }

    /// Stops the orchestrator and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("orchestrator task");
        }
    }
}

impl Drop for Orchestrator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
