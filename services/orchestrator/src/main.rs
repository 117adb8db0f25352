//! `chorus-orchestrator`: Chorus's state and its gRPC API, with an embedded
//! tool-exec by default, so one command runs the whole system.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use chorus_orchestrator::secrets::{KeySource, SECRETS_KEY_VAR};
use chorus_orchestrator::server::{EmbeddedToolExec, OrchestratorConfig};
use chorus_run_token::{KEY_SET_FILE, load_or_create_signer};
use chorus_telemetry::{LogFormat, shutdown_signal};
use chorus_tool_exec::Limits;
use clap::Parser;
use tracing::{info, warn};

/// Chorus orchestrator: workspaces, agents, providers, tasks, history and runs,
/// over gRPC. Starts an embedded tool-exec unless told not to.
#[derive(Debug, Parser)]
#[command(name = "chorus-orchestrator", version)]
struct Cli {
    /// Address to serve gRPC on.
    #[arg(long, env = "CHORUS_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Directory (owner-only) for the SQLite database, the run-token key pair and the secrets key.
    #[arg(long, env = "CHORUS_DATA_DIR", default_value = ".chorus")]
    data_dir: PathBuf,
    /// Database: `postgres://user@host/db`, or a SQLite file (default: <data-dir>/chorus.db).
    #[arg(long, env = "CHORUS_DATABASE_URL")]
    database_url: Option<String>,
    /// Do not start the embedded tool-exec (run chorus-tool-exec separately).
    #[arg(long, env = "CHORUS_NO_EMBEDDED_TOOL_EXEC")]
    no_embedded_tool_exec: bool,
    /// Address of the embedded tool-exec.
    #[arg(
        long,
        env = "CHORUS_TOOL_EXEC_LISTEN",
        default_value = "127.0.0.1:50052"
    )]
    tool_exec_listen: SocketAddr,
    /// Address (host:port) of a separately run tool-exec, handed to agents; implies
    /// --no-embedded-tool-exec.
    #[arg(long, env = "CHORUS_TOOL_EXEC_ADDR")]
    tool_exec_addr: Option<String>,
    /// Log format.
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// The chorus-tools binary agents call (default: next to this executable).
    #[arg(long, env = "CHORUS_TOOLS_BIN")]
    chorus_tools: Option<PathBuf>,
    /// The Claude Code CLI.
    #[arg(long, env = "CHORUS_CLAUDE_BIN", default_value = "claude")]
    claude_bin: PathBuf,
    /// The OpenCode CLI.
    #[arg(long, env = "CHORUS_OPENCODE_BIN", default_value = "opencode")]
    opencode_bin: PathBuf,
    /// Seconds an agent run may take unless StartTask says otherwise.
    #[arg(long, env = "CHORUS_RUN_TIMEOUT_SECS", default_value_t = 600)]
    run_timeout_secs: u64,
    /// Seconds a handoff may take unless its caller says otherwise.
    #[arg(long, env = "CHORUS_HANDOFF_TIMEOUT_SECS", default_value_t = 600)]
    handoff_timeout_secs: u64,
    /// More environment variables to pass on to agent processes (comma-separated
    /// names; locale, proxy and model-credential variables are passed already).
    #[arg(long, env = "CHORUS_AGENT_PASS_ENV", value_delimiter = ',')]
    agent_pass_env: Vec<String>,
    /// Keep each run's directory (its HOME, generated config) after it ends.
    #[arg(long, env = "CHORUS_KEEP_RUN_DIRS")]
    keep_run_dirs: bool,
    /// More paths CLI agents may read in their sandbox (comma-separated; for a
    /// runtime the CLI needs outside the system directories and its own install).
    #[arg(long, env = "CHORUS_AGENT_READ_ONLY_PATHS", value_delimiter = ',')]
    agent_read_only_path: Vec<PathBuf>,
    /// Directories workspace roots may lie under (comma-separated; default: the
    /// directory the orchestrator is started in). `/`, the data directory and
    /// the directories that hold it are always refused.
    #[arg(long, env = "CHORUS_WORKSPACE_ROOTS", value_delimiter = ',')]
    workspace_roots: Vec<PathBuf>,
    /// Where the first admin key is written when the database has no admin key
    /// (default: <data-dir>/admin.key).
    #[arg(long, env = "CHORUS_ADMIN_KEY_FILE")]
    admin_key_file: Option<PathBuf>,
    /// File with the API key a separate tool-exec presents (its
    /// --orchestrator-key-file): stored with role tool-exec at start when the
    /// database does not hold it. The file is only read.
    #[arg(long, env = "CHORUS_TOOL_EXEC_KEY_FILE")]
    tool_exec_key_file: Option<PathBuf>,
    /// File of the key that encrypts provider API keys in the database (32 random
    /// bytes in base64; must exist). Without it: the key itself from
    /// CHORUS_SECRETS_KEY, else <data-dir>/secrets.key, made when missing.
    #[arg(long, env = "CHORUS_SECRETS_KEY_FILE")]
    secrets_key_file: Option<PathBuf>,
    #[command(flatten)]
    sandbox: chorus_sandbox::cli::SandboxArgs,
    #[command(flatten)]
    tls: chorus_auth::cli::TlsArgs,
}

/// The secrets key: --secrets-key-file (or CHORUS_SECRETS_KEY_FILE), else the
/// key itself in CHORUS_SECRETS_KEY; None: the default file in the data directory.
fn secrets_key(cli: &Cli) -> Option<KeySource> {
    let value = std::env::var(SECRETS_KEY_VAR)
        .ok()
        .filter(|v| !v.trim().is_empty());
    if let Some(path) = &cli.secrets_key_file {
        if value.is_some() {
            warn!("{SECRETS_KEY_VAR} is ignored: --secrets-key-file names the key file");
        }
        return Some(KeySource::File {
            path: path.clone(),
            create: false,
        });
    }
    value.map(|base64| KeySource::Value {
        base64,
        var: SECRETS_KEY_VAR,
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Telemetry's OTLP client lives on the runtime.
    let telemetry = {
        let _entered = runtime.enter();
        chorus_telemetry::init("chorus-orchestrator", cli.log_format)
    };
    chorus_orchestrator::owner_only::secure_data_dir(&cli.data_dir)
        .with_context(|| format!("creating the data directory {}", cli.data_dir.display()))?;
    let signer = load_or_create_signer(&cli.data_dir).with_context(|| {
        format!(
            "loading the run-token key pair from {}",
            cli.data_dir.display()
        )
    })?;
    info!(keys = %cli.data_dir.join(KEY_SET_FILE).display(), "run tokens are signed with the key set in the data directory; a separate tool-exec fetches the public keys with its service key");
    let database_url = cli
        .database_url
        .clone()
        .unwrap_or_else(|| cli.data_dir.join("chorus.db").display().to_string());

    let served = runtime.block_on(async move {
        // Bind every listener before serving anything.
        let listener = tokio::net::TcpListener::bind(cli.listen).await.with_context(|| format!("binding {}", cli.listen))?;
        let embedded_tool_exec = if cli.no_embedded_tool_exec || cli.tool_exec_addr.is_some() {
            warn!("no embedded tool-exec: start chorus-tool-exec with --orchestrator-addr {} and --orchestrator-key-file (an API key of role tool-exec, made with CreateApiKey)", cli.listen);
            None
        } else {
            let listener = tokio::net::TcpListener::bind(cli.tool_exec_listen)
                .await
                .with_context(|| format!("binding the embedded tool-exec on {} (use --tool-exec-listen or --no-embedded-tool-exec)", cli.tool_exec_listen))?;
            Some(EmbeddedToolExec { listener, limits: Limits::default() })
        };
        let mut config = OrchestratorConfig { embedded_tool_exec, tool_exec_addr: cli.tool_exec_addr.clone(), sandbox: cli.sandbox.config(), ..OrchestratorConfig::new(database_url, signer, &cli.data_dir) };
        let allowed = if cli.workspace_roots.is_empty() {
            vec![std::env::current_dir().context("reading the current directory (the default --workspace-roots)")?]
        } else {
            cli.workspace_roots.clone()
        };
        config.workspace_roots = chorus_orchestrator::domain::RootPolicy::new(&allowed, std::slice::from_ref(&cli.data_dir));
        info!(allowed = ?config.workspace_roots.allowed, "workspace roots may lie under these directories (--workspace-roots)");
        if let Some(file) = &cli.admin_key_file {
            config.admin_key_file = Some(file.clone());
        }
        config.tool_exec_key_file.clone_from(&cli.tool_exec_key_file);
        if let Some(source) = secrets_key(&cli) {
            config.secrets_key = source;
        }
        config.tls = cli.tls.server();
        config.peers = cli.tls.peers().map_err(anyhow::Error::msg)?;
        config.runner.tls_ca = cli.tls.tls_ca.as_ref().map(std::path::absolute).transpose().context("resolving --tls-ca")?;
        let runner = &mut config.runner;
        if let Some(path) = &cli.chorus_tools {
            runner.chorus_tools = std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))?;
        }
        runner.claude_bin.clone_from(&cli.claude_bin);
        runner.opencode_bin.clone_from(&cli.opencode_bin);
        runner.run_timeout = std::time::Duration::from_secs(cli.run_timeout_secs.max(1));
        runner.handoff_timeout = std::time::Duration::from_secs(cli.handoff_timeout_secs.max(1));
        runner.pass_env.extend(cli.agent_pass_env.iter().filter(|n| !n.is_empty()).cloned());
        runner.keep_run_dirs = cli.keep_run_dirs;
        runner.cli_read_only.clone_from(&cli.agent_read_only_path);
        runner.runs_dir = std::path::absolute(&runner.runs_dir).with_context(|| format!("resolving {}", runner.runs_dir.display()))?;
        if let Err(problem) = runner.validate() {
            warn!("{problem}; agents cannot be started until this is fixed");
        }
        chorus_orchestrator::server::run(listener, config, shutdown_signal()).await
    });
    // Calls had their grace period in `run`; a tool thread of the embedded
    // tool-exec stuck in the kernel must not keep the process alive. Spans and
    // metrics are flushed first, while the runtime still runs.
    drop(telemetry);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}
