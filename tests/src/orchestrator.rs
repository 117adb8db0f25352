//! The orchestrator with its embedded tool-exec, started in-process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use chorus_orchestrator::server::{EmbeddedToolExec, OrchestratorConfig};
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_run_token::RunTokenSigner;
use chorus_tool_exec::Limits;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::agents::Client;
use crate::credentials::Bearer;
use crate::{TOOL_EXEC_SERVICE, wait_serving_over};
use chorus_auth::tls::ClientTls;

/// gRPC service name the orchestrator reports health for.
pub const AGENT_TOOLS_SERVICE: &str = "chorus.orchestrator.v1.AgentTools";

/// A running orchestrator (all-in-one: with tool-exec) on 127.0.0.1 ports.
pub struct Orchestrator {
    pub addr: SocketAddr,
    pub tool_exec_addr: SocketAddr,
    /// An admin key its clients present.
    pub admin_key: String,
    /// How clients reach it (TLS when it serves TLS).
    pub client_tls: ClientTls,
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
            mcp: None,
        });
        let runs = tempfile::tempdir().expect("runs dir");
        let mut config = OrchestratorConfig {
            embedded_tool_exec,
            ..OrchestratorConfig::new(database_url, signer, runs.path())
        };
        config.runner.chorus_tools = crate::chorus_tools_bin();
        config.runner.runs_dir = runs.path().join("runs");
        config.sandbox.launcher = Some(chorus_sandbox::testing::built_launcher());
        // Every address is a temporary directory; the harness's own lives apart.
        config.workspace_roots = chorus_orchestrator::domain::RootPolicy::new(
            &[std::env::temp_dir()],
            &[runs.path().to_owned()],
        );
        configure(&mut config);
        let client_tls = ClientTls {
            ca: config.tls.as_ref().and(config.runner.tls_ca.clone()),
            ..ClientTls::default()
        };
        let admin_key = crate::credentials::admin_key(&config.database_url).await;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            chorus_orchestrator::server::run(listener, config, async move {
                let _ = stopped.await;
            })
            .await
            .expect("orchestrator ran");
        });
        wait_serving_over(addr, AGENT_TOOLS_SERVICE, &client_tls).await;
        if embed_tool_exec {
            wait_serving_over(tool_exec_addr, TOOL_EXEC_SERVICE, &client_tls).await;
        }
        Self {
            addr,
            tool_exec_addr,
            admin_key,
            client_tls,
            runs,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Starts on an SQLite file in `data_dir` (the key pair there too) with
    /// `claude` and `opencode` as the CLIs it runs (the real ones, or
    /// [`crate::agents::fake_cli`]).
    pub async fn with_clis(data_dir: &Path, claude: PathBuf, opencode: PathBuf) -> Self {
        let signer = chorus_run_token::load_or_create_signer(data_dir).expect("key pair");
        Self::start_configured(
            &data_dir.join("chorus.db").display().to_string(),
            signer,
            true,
            |config| {
                config.runner.claude_bin = claude;
                config.runner.opencode_bin = opencode;
            },
        )
        .await
    }

    /// Starts on `database_url` (the key pair in `data_dir`) with the fake CLI
    /// as Claude Code and OpenCode, a 300 ms kill grace, and `configure`'s
    /// changes.
    pub async fn with_fake_cli(
        data_dir: &Path,
        database_url: &str,
        configure: impl FnOnce(&mut OrchestratorConfig),
    ) -> Self {
        let signer = chorus_run_token::load_or_create_signer(data_dir).expect("key pair");
        Self::start_configured(database_url, signer, true, |config| {
            config.runner.claude_bin = crate::agents::fake_cli();
            config.runner.opencode_bin = crate::agents::fake_cli();
            config.runner.kill_grace = std::time::Duration::from_millis(300);
            configure(config);
        })
        .await
    }

    /// Started on an SQLite file in `data_dir` (its key set there too), with
    /// model retries 10 ms apart (for API agents against a fake model server).
    pub async fn for_api_agents(data_dir: &Path) -> Self {
        let signer = chorus_run_token::load_or_create_signer(data_dir).expect("key set");
        Self::start_configured(
            &data_dir.join("chorus.db").display().to_string(),
            signer,
            true,
            |config| config.runner.api.backoff = std::time::Duration::from_millis(10),
        )
        .await
    }

    /// [`Self::with_fake_cli`] on an SQLite file in `data_dir`.
    pub async fn with_fake_cli_on_sqlite(
        data_dir: &Path,
        configure: impl FnOnce(&mut OrchestratorConfig),
    ) -> Self {
        let database = data_dir.join("chorus.db").display().to_string();
        Self::with_fake_cli(data_dir, &database, configure).await
    }

    /// A client of the management API with the admin key.
    pub async fn client(&self) -> Client {
        self.client_with(&self.admin_key).await
    }

    /// A client of the management API presenting `credential`.
    pub async fn client_with(&self, credential: &str) -> Client {
        let channel = self
            .client_tls
            .endpoint(&self.addr.to_string())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        OrchestratorClient::with_interceptor(channel, Bearer::new(credential))
    }

    /// A file a fake CLI wrote in its HOME (with the run directories kept):
    /// `name` in the one run directory that has it.
    pub fn run_file(&self, name: &str) -> std::path::PathBuf {
        run_file(&self.runs.path().join("runs"), name)
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

/// How the binary is started beside its arguments.
#[derive(Debug, Clone, Copy, Default)]
struct How {
    /// As this user (its group the same number).
    uid: Option<u32>,
    /// With this limit of open files.
    open_files: Option<u64>,
}

/// The `chorus-orchestrator` binary run as a process of its own, for tests that
/// kill it. Both its ports are picked by the system; they are read from its log.
pub struct OrchestratorProcess {
    child: tokio::process::Child,
    pub addr: SocketAddr,
    pub tool_exec_addr: SocketAddr,
    /// Its web console's address, when it serves one.
    pub console_addr: Option<SocketAddr>,
    /// An admin key its clients present.
    pub admin_key: String,
    /// Lines it has logged since it served.
    log_lines: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl OrchestratorProcess {
    /// How many lines it has logged since it served.
    pub fn log_lines(&self) -> u64 {
        self.log_lines.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts the binary on `database_url` with its key pair in `data_dir`,
    /// chorus-tools from this build and `extra` arguments, and waits until it
    /// serves.
    pub async fn spawn(data_dir: &Path, database_url: &str, extra: &[&str]) -> Self {
        Self::spawn_with_env(data_dir, database_url, extra, &[]).await
    }

    /// [`Self::spawn`] with `env` added to the orchestrator's environment.
    pub async fn spawn_with_env(
        data_dir: &Path,
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let admin_key = crate::credentials::admin_key(database_url).await;
        Self::spawn_keyed(
            data_dir,
            database_url,
            extra,
            env,
            Some(admin_key),
            How::default(),
        )
        .await
    }

    /// [`Self::spawn`] with at most `open_files` file descriptors (soft and
    /// hard limit), as on a host whose limit is low.
    pub async fn spawn_with_open_files(
        data_dir: &Path,
        database_url: &str,
        extra: &[&str],
        open_files: u64,
    ) -> Self {
        let admin_key = crate::credentials::admin_key(database_url).await;
        let how = How {
            open_files: Some(open_files),
            ..How::default()
        };
        Self::spawn_keyed(data_dir, database_url, extra, &[], Some(admin_key), how).await
    }

    /// Starts the binary as the user `uid` (its group the same number), as a
    /// new user does: it writes its first admin key to `admin_key_file` (which
    /// `extra` must name with --admin-key-file), and this client presents it.
    pub async fn spawn_as_user(
        data_dir: &Path,
        database_url: &str,
        extra: &[&str],
        uid: u32,
        admin_key_file: &Path,
    ) -> Self {
        let mut child = Self::spawn_keyed(
            data_dir,
            database_url,
            extra,
            &[],
            None,
            How {
                uid: Some(uid),
                ..How::default()
            },
        )
        .await;
        child.admin_key = std::fs::read_to_string(admin_key_file)
            .expect("the admin key the binary wrote")
            .trim()
            .to_owned();
        child
    }

    /// Starts the binary as a new user does: no key made beforehand, so the
    /// binary writes its first admin key to `<data_dir>/admin.key` (or finds
    /// one from an earlier start), which this client then presents.
    pub async fn spawn_as_installed(data_dir: &Path, database_url: &str, extra: &[&str]) -> Self {
        Self::spawn_keyed(data_dir, database_url, extra, &[], None, How::default()).await
    }

    async fn spawn_keyed(
        data_dir: &Path,
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        admin_key: Option<String>,
        how: How,
    ) -> Self {
        use tokio::io::{AsyncBufReadExt, BufReader};

        let mut child = Self::command(data_dir, database_url, extra, env, how);
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (mut addr, mut tool_exec_addr, mut console_addr) = (None, None, None);
        let mut seen = Vec::new();
        while addr.is_none() {
            let Some(line) = lines.next_line().await.expect("read the log") else {
                panic!(
                    "chorus-orchestrator exited before serving; its log:\n{}",
                    seen.join("\n")
                );
            };
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let fields = &entry["fields"];
            let parsed = fields["addr"].as_str().and_then(|a| a.parse().ok());
            match fields["message"].as_str() {
                Some("embedded tool-exec") => tool_exec_addr = parsed,
                Some("web console") => console_addr = parsed,
                Some("orchestrator serving") => addr = parsed,
                _ => {}
            }
            seen.push(line);
        }
        // Keep reading the log so the process never blocks on a full pipe;
        // with CHORUS_TEST_LOG_DIR set, it is kept there (<pid>.log).
        let keep = std::env::var_os("CHORUS_TEST_LOG_DIR").map(|dir| {
            std::path::Path::new(&dir).join(format!("{}.log", child.id().unwrap_or_default()))
        });
        let log_lines = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = std::sync::Arc::clone(&log_lines);
        tokio::spawn(async move {
            let mut file = keep.and_then(|path| std::fs::File::create(path).ok());
            for line in &seen {
                if let Some(file) = file.as_mut() {
                    let _ = std::io::Write::write_all(file, format!("{line}\n").as_bytes());
                }
            }
            while let Ok(Some(line)) = lines.next_line().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Some(file) = file.as_mut() {
                    let _ = std::io::Write::write_all(file, format!("{line}\n").as_bytes());
                }
            }
        });
        let addr = addr.expect("serving address");
        crate::wait_serving(addr, AGENT_TOOLS_SERVICE).await;
        // Without an embedded one, the separate tool-exec it was given.
        let separate = extra
            .windows(2)
            .find(|w| w[0] == "--tool-exec-addr")
            .and_then(|w| w[1].parse().ok());
        let admin_key = match (admin_key, how.uid) {
            (Some(key), _) => key,
            // The caller reads the key from where it was placed.
            (None, Some(_)) => String::new(),
            (None, None) => std::fs::read_to_string(data_dir.join("admin.key"))
                .expect("the admin key the binary wrote")
                .trim()
                .to_owned(),
        };
        Self {
            child,
            addr,
            console_addr,
            tool_exec_addr: tool_exec_addr
                .or(separate)
                .expect("the embedded tool-exec's address, or --tool-exec-addr"),
            admin_key,
            log_lines,
        }
    }

    /// Starts the binary as [`Self::spawn`] does and kills it with SIGKILL as
    /// soon as it logs `message` (e.g. "store open": during start-up recovery).
    pub async fn kill_when_it_logs(
        data_dir: &Path,
        database_url: &str,
        extra: &[&str],
        message: &str,
    ) {
        use tokio::io::{AsyncBufReadExt, BufReader};

        let mut child = Self::command(data_dir, database_url, extra, &[], How::default());
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        loop {
            let Some(line) = lines.next_line().await.expect("read the log") else {
                panic!("chorus-orchestrator exited before logging '{message}'");
            };
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if entry["fields"]["message"] == message {
                break;
            }
        }
        child.start_kill().expect("SIGKILL");
        child.wait().await.expect("reap");
    }

    fn command(
        data_dir: &Path,
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        how: How,
    ) -> tokio::process::Child {
        let binary = crate::built_bin("chorus-orchestrator", "chorus-orchestrator");
        let mut command = match how.open_files {
            // The shell sets both limits, then becomes the orchestrator.
            Some(n) => {
                let mut shell = tokio::process::Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(binary);
                shell
            }
            None => tokio::process::Command::new(binary),
        };
        // `extra` may name its own port and workspace roots.
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        if !extra.contains(&"--workspace-roots") {
            command.arg("--workspace-roots").arg(std::env::temp_dir());
        }
        // Processes of several tests run at once: each its own console port.
        if !extra.contains(&"--console-listen") && !extra.contains(&"--no-console") {
            command.args(["--console-listen", "127.0.0.1:0"]);
        }
        command
            .args(["--tool-exec-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--database-url", database_url, "--log-format", "json"])
            .arg("--chorus-tools")
            .arg(crate::chorus_tools_bin())
            .args(extra)
            .envs(env.iter().copied());
        if let Some(uid) = how.uid {
            command.uid(uid).gid(uid);
        }
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start chorus-orchestrator")
    }

    pub fn pid(&self) -> i32 {
        self.child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .expect("running")
    }

    /// A client of the management API with the admin key.
    pub async fn client(&self) -> Client {
        client_at(self.addr, &self.admin_key).await
    }

    /// Kills it with SIGKILL (no shutdown of any kind) and reaps it.
    pub async fn kill(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("SIGKILL");
        self.child.wait().await.expect("reap");
    }

    /// Stops it with SIGTERM (a graceful shutdown) and waits for it.
    pub async fn stop(self) -> std::process::ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait().await
    }

    /// Sends it `signal`.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).expect("signal");
    }

    /// Waits for it to exit.
    pub async fn wait(mut self) -> std::process::ExitStatus {
        self.child.wait().await.expect("wait")
    }
}

/// `runs/<run id>/home/<name>` for the one run under `runs` that has it.
pub fn run_file(runs: &Path, name: &str) -> std::path::PathBuf {
    let found: Vec<std::path::PathBuf> = std::fs::read_dir(runs)
        .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
        .filter_map(Result::ok)
        .map(|run| run.path().join("home").join(name))
        .filter(|path| path.exists())
        .collect();
    assert_eq!(found.len(), 1, "{name} in the run directories: {found:?}");
    found.into_iter().next().expect("one")
}

/// A client of the management API at `addr` presenting `credential`.
pub async fn client_at(addr: SocketAddr, credential: &str) -> Client {
    OrchestratorClient::with_interceptor(channel_to(addr).await, Bearer::new(credential))
}

/// A channel to `addr`.
pub async fn channel_to(addr: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}
