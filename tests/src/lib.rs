//! Test harness: tool-exec started in-process on 127.0.0.1:0, run tokens, the real
//! `chorus-tools` binary as a child process.
//!
//! Readiness is a signal, never a sleep: [`ToolExec::start`] returns once the
//! service's gRPC health says SERVING.
#![forbid(unsafe_code)]

pub mod a2a;
pub mod agents;
pub mod approvals;
pub mod attacked;
pub mod attacker;
pub mod balancer;
pub mod cluster;
pub mod confined;
pub mod containers;
pub mod credentials;
pub mod db;
pub mod db_proxy;
pub mod fake_anthropic;
pub mod fake_http;
pub mod fake_openai;
pub mod faults;
pub mod flows;
pub mod git;
pub mod mcp;
pub mod mcp_http;
pub mod orchestrator;
pub mod otlp;
pub mod overload;
pub mod pki;
pub mod raw;
pub mod stats;
pub mod tool_exec_process;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chorus_run_token::{RunGrant, RunTokenSigner};
use chorus_tool_exec::gate::RunGate;
use chorus_tool_exec::{Limits, ToolExecConfig};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The gRPC service name tool-exec reports health for.
pub const TOOL_EXEC_SERVICE: &str = "chorus.tools.v1.ToolExec";

/// A tool-exec service running in this process.
pub struct ToolExec {
    pub addr: SocketAddr,
    signer: RunTokenSigner,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ToolExec {
    /// Starts tool-exec with default limits and waits until it is SERVING.
    pub async fn start() -> Self {
        Self::start_with(Limits::default()).await
    }

    /// Starts tool-exec with the given limits and waits until it is SERVING.
    pub async fn start_with(limits: Limits) -> Self {
        Self::start_with_gate(limits, RunTokenSigner::generate(), None).await
    }

    /// Starts tool-exec verifying tokens of `signer` and checking runs with `gate`.
    pub async fn start_with_gate(
        limits: Limits,
        signer: RunTokenSigner,
        gate: Option<Arc<dyn RunGate>>,
    ) -> Self {
        Self::start_configured(
            |config| {
                config.limits = limits;
                config.gate = gate;
            },
            signer,
        )
        .await
    }

    /// Starts tool-exec with the defaults changed by `configure`, verifying
    /// tokens of `signer`, and waits until it is SERVING.
    pub async fn start_configured(
        configure: impl FnOnce(&mut ToolExecConfig),
        signer: RunTokenSigner,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let processes =
            chorus_sandbox::testing::enforced(chorus_sandbox::SandboxConfig::default()).await;
        let mut config = ToolExecConfig::new(signer.verifier(), processes);
        configure(&mut config);
        let (stop, stopped) = oneshot::channel::<()>();
        let gated = config.gate.is_some();
        let task = tokio::spawn(async move {
            chorus_tool_exec::run(listener, config, async move {
                let _ = stopped.await;
            })
            .await
            .expect("tool-exec ran");
        });
        // With a gate it is SERVING only while its orchestrator answers health,
        // which a test's stand-in (or an absent one) may not: it serves once
        // its health answers at all.
        if gated {
            wait_answering(addr, TOOL_EXEC_SERVICE).await;
        } else {
            wait_serving(addr, TOOL_EXEC_SERVICE).await;
        }
        Self {
            addr,
            signer,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A run token for `root` granting `tools` (names or @profiles), valid for an hour.
    pub fn token(&self, root: &Path, tools: &[&str]) -> String {
        self.signer
            .mint(&grant(root, tools), Duration::from_secs(3600))
    }

    /// A run token whose egress list is `egress`.
    pub fn token_with_egress(&self, root: &Path, tools: &[&str], egress: &[String]) -> String {
        let grant = RunGrant {
            egress: egress.to_vec(),
            ..grant(root, tools)
        };
        self.signer.mint(&grant, Duration::from_secs(3600))
    }

    /// A run token for run `run_id`.
    pub fn token_for_run(&self, root: &Path, tools: &[&str], run_id: &str) -> String {
        let grant = RunGrant {
            run_id: run_id.to_owned(),
            ..grant(root, tools)
        };
        self.signer.mint(&grant, Duration::from_secs(3600))
    }

    /// A run token that expired a minute ago.
    pub fn expired_token(&self, root: &Path, tools: &[&str]) -> String {
        self.signer.mint_until(
            &grant(root, tools),
            SystemTime::now() - Duration::from_secs(60),
        )
    }

    /// Stops the service and waits for it to finish.
    pub async fn stop(mut self) {
        self.shutdown().await;
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("tool-exec task");
        }
    }
}

impl Drop for ToolExec {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A grant for a test run.
pub fn grant(root: &Path, tools: &[&str]) -> RunGrant {
    let tools = chorus_catalog::expand_allow_list(tools).expect("known tools");
    RunGrant {
        run_id: "run-test".to_owned(),
        task_id: "task-test".to_owned(),
        agent: "tester".to_owned(),
        tools: tools.into_iter().map(str::to_owned).collect(),
        root: root.to_owned(),
        egress: Vec::new(),
        epoch: 0,
    }
}

/// Waits on the health Watch stream until `service` is SERVING.
pub async fn wait_serving(addr: SocketAddr, service: &str) {
    wait_serving_over(addr, service, &chorus_auth::tls::ClientTls::default()).await;
}

/// Waits on the health Watch stream until `service` reports `status`.
pub async fn wait_health(addr: SocketAddr, service: &str, status: ServingStatus) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect health");
    let mut updates = HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .expect("health watch")
        .into_inner();
    while let Some(update) = updates.next().await {
        if update.expect("health update").status == status as i32 {
            return;
        }
    }
    panic!("health stream of {service} ended before {status:?}");
}

/// Waits until the health service of `addr` answers for `service`, whatever
/// its status: the server is serving calls.
pub async fn wait_answering(addr: SocketAddr, service: &str) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect health");
    HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .expect("health watch")
        .into_inner()
        .next()
        .await
        .expect("a first status")
        .expect("health update");
}

/// What health Check answers for `service` now.
pub async fn health_status(
    addr: SocketAddr,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect health");
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await?
        .into_inner();
    Ok(ServingStatus::try_from(answer.status).unwrap_or(ServingStatus::Unknown))
}

/// [`wait_serving`] over TLS when `tls` says so.
pub async fn wait_serving_over(addr: SocketAddr, service: &str, tls: &chorus_auth::tls::ClientTls) {
    let channel = tls
        .endpoint(&addr.to_string())
        .expect("endpoint")
        .connect()
        .await
        .expect("connect health");
    let mut client = HealthClient::new(channel);
    let mut updates = client
        .watch(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .expect("health watch")
        .into_inner();
    while let Some(update) = updates.next().await {
        if update.expect("health update").status == ServingStatus::Serving as i32 {
            return;
        }
    }
    panic!("health stream of {service} ended before SERVING");
}

/// Path of the `chorus-tools` binary built by this cargo invocation.
pub fn chorus_tools_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CHORUS_TOOLS_BIN") {
        return PathBuf::from(path);
    }
    built_bin("chorus-tools", "chorus-tools")
}

/// Path of a binary of the workspace built next to this test executable.
pub fn built_bin(name: &str, package: &str) -> PathBuf {
    // Test executables live in target/<profile>/deps; binaries one level up.
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let bin = profile_dir.join(name);
    assert!(
        bin.exists(),
        "{} does not exist: build it with `cargo build -p {package}` (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

/// What one chorus-tools run printed and how it exited.
#[derive(Debug)]
pub struct ToolsRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl ToolsRun {
    /// stdout parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// The tool's output field.
    pub fn output(&self) -> Value {
        assert_eq!(self.code, 0, "chorus-tools failed: {self:?}");
        self.json()["output"].clone()
    }

    /// stderr parsed as the JSON error `{code, message}`.
    pub fn error(&self) -> Value {
        serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|e| panic!("stderr is not JSON ({e}): {self:?}"))
    }

    /// Asserts a failure with exit code `exit` and error code `code`; returns the message.
    pub fn expect_failure(&self, exit: i32, code: &str) -> String {
        assert_eq!(self.code, exit, "unexpected exit code: {self:?}");
        let error = self.error();
        assert_eq!(error["code"], code, "unexpected error code: {self:?}");
        error["message"].as_str().expect("message").to_owned()
    }
}

/// Environment for a chorus-tools child process.
#[derive(Debug, Clone, Default)]
pub struct ToolsEnv {
    pub token: Option<String>,
    pub tools_addr: Option<String>,
    pub orchestrator_addr: Option<String>,
}

/// Runs the real chorus-tools binary with `args` and the given environment only.
pub async fn chorus_tools(env: &ToolsEnv, args: &[&str]) -> ToolsRun {
    let output = tools_command(env, args)
        .output()
        .await
        .expect("run chorus-tools");
    ToolsRun::of(output)
}

/// Runs chorus-tools as [`chorus_tools`] does, with `stdin` written to its
/// standard input (`chorus-tools -`).
pub async fn chorus_tools_with_stdin(env: &ToolsEnv, args: &[&str], stdin: Vec<u8>) -> ToolsRun {
    use tokio::io::AsyncWriteExt;

    let mut child = tools_command(env, args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start chorus-tools");
    let mut pipe = child.stdin.take().expect("stdin");
    // Written while the output is read: a large input fills the pipe.
    let writer = tokio::spawn(async move {
        // A child that stops reading early (a usage error) closes the pipe.
        let _ = pipe.write_all(&stdin).await;
    });
    let output = child.wait_with_output().await.expect("run chorus-tools");
    writer.await.expect("stdin writer");
    ToolsRun::of(output)
}

fn tools_command(env: &ToolsEnv, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(chorus_tools_bin());
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        // A service that cannot be reached is retried for a second, not a minute.
        .env("CHORUS_TOOLS_RETRY_SECS", "1");
    if let Some(token) = &env.token {
        command.env("CHORUS_RUN_TOKEN", token);
    }
    if let Some(addr) = &env.tools_addr {
        command.env("CHORUS_TOOLS_ADDR", addr);
    }
    if let Some(addr) = &env.orchestrator_addr {
        command.env("CHORUS_ORCHESTRATOR_ADDR", addr);
    }
    command
}

impl ToolsRun {
    fn of(output: Output) -> Self {
        let Output {
            status,
            stdout,
            stderr,
        } = output;
        Self {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}
