//! `chorus-tool-exec`: the tool execution service, plus development helpers to
//! create a key pair and mint run tokens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use chorus_run_token::{
    KEY_SET_FILE, PUBLIC_KEY_FILE, RunGrant, RunTokenVerifier, load_or_create_signer, load_verifier,
};
use chorus_telemetry::{LogFormat, shutdown_signal};
use chorus_tool_exec::gate::{OrchestratorGate, RunGate};
use chorus_tool_exec::{Limits, ToolExecConfig};
use clap::{Args, Parser, Subcommand};
use tracing::{info, warn};

/// Chorus tool-exec: runs file, search, bash and git tools for agent runs, inside
/// each run's workspace, checked against its signed run token.
#[derive(Debug, Parser)]
#[command(
    name = "chorus-tool-exec",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Development helpers: key pairs and run tokens for local use and tests.
    #[command(subcommand)]
    Dev(DevCommand),
}

#[derive(Debug, Subcommand)]
enum DevCommand {
    /// Create the run-token key pair in the data directory (kept if it exists) and print the public key path.
    Keygen {
        #[arg(long, env = "CHORUS_DATA_DIR", default_value = ".chorus")]
        data_dir: PathBuf,
    },
    /// Mint a run token signed with the data directory's private key and print it.
    MintToken(MintArgs),
}

#[derive(Debug, Args)]
struct MintArgs {
    #[arg(long, env = "CHORUS_DATA_DIR", default_value = ".chorus")]
    data_dir: PathBuf,
    /// Workspace root the token confines tools to (made absolute).
    #[arg(long)]
    root: PathBuf,
    /// Allowed tools: names and @profile references, comma separated (e.g. "@developer,file.read").
    #[arg(long, value_delimiter = ',', default_value = "@developer")]
    tools: Vec<String>,
    #[arg(long, default_value = "dev-run")]
    run_id: String,
    #[arg(long, default_value = "dev-task")]
    task_id: String,
    #[arg(long, default_value = "dev-agent")]
    agent: String,
    /// Lifetime of the token in seconds.
    #[arg(long, default_value_t = 3600)]
    ttl_secs: u64,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to serve gRPC on.
    #[arg(
        long,
        env = "CHORUS_TOOL_EXEC_LISTEN",
        default_value = "127.0.0.1:50052"
    )]
    listen: SocketAddr,
    /// With --standalone: directory holding the run-token public keys when
    /// --public-key is not given. If it has no key set yet, a development set is
    /// created there.
    #[arg(long, env = "CHORUS_DATA_DIR", default_value = ".chorus")]
    data_dir: PathBuf,
    /// With --standalone: PEM file with the run-token public key(s) (Ed25519,
    /// SPKI). With an orchestrator the keys are fetched from it.
    #[arg(long, env = "CHORUS_RUN_TOKEN_PUBLIC_KEY")]
    public_key: Option<PathBuf>,
    /// Largest file (bytes) tools will read.
    #[arg(long, env = "CHORUS_MAX_FILE_BYTES", default_value_t = Limits::default().max_file_bytes)]
    max_file_bytes: u64,
    /// Largest content (bytes) tools will write.
    #[arg(long, env = "CHORUS_MAX_WRITE_BYTES", default_value_t = Limits::default().max_write_bytes)]
    max_write_bytes: u64,
    /// Largest tool output (bytes): read content, each bash stream, diff text.
    #[arg(long, env = "CHORUS_MAX_OUTPUT_BYTES", default_value_t = Limits::default().max_output_bytes)]
    max_output_bytes: usize,
    /// Default bash timeout in seconds.
    #[arg(long, env = "CHORUS_BASH_TIMEOUT_SECS", default_value_t = Limits::default().bash_default_timeout.as_secs())]
    bash_timeout_secs: u64,
    /// Largest bash timeout a call may ask for, in seconds.
    #[arg(long, env = "CHORUS_BASH_MAX_TIMEOUT_SECS", default_value_t = Limits::default().bash_max_timeout.as_secs())]
    bash_max_timeout_secs: u64,
    /// Deadline of every tool call, in seconds (bash and git calls get their own
    /// timeouts plus 10 s when that is longer).
    #[arg(long, env = "CHORUS_TOOL_TIMEOUT_SECS", default_value_t = Limits::default().tool_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    tool_timeout_secs: u64,
    /// Orchestrator address (host:port): runs are checked with it before every tool
    /// call, every call is recorded in the task's history, and the run-token keys
    /// are fetched from it. Needs --orchestrator-key-file.
    #[arg(long, env = "CHORUS_ORCHESTRATOR_ADDR")]
    orchestrator_addr: Option<String>,
    /// File holding tool-exec's own API key (role tool-exec; an admin makes one
    /// with CreateApiKey), its credential with the orchestrator.
    #[arg(long, env = "CHORUS_ORCHESTRATOR_KEY_FILE")]
    orchestrator_key_file: Option<PathBuf>,
    /// Run without an orchestrator (development): run tokens alone decide, nothing
    /// is recorded, and an ended run's token keeps working until it expires.
    #[arg(long, env = "CHORUS_STANDALONE", conflicts_with = "orchestrator_addr")]
    standalone: bool,
    /// Log format.
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(flatten)]
    sandbox: chorus_sandbox::cli::SandboxArgs,
    #[command(flatten)]
    tls: chorus_auth::cli::TlsArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Dev(DevCommand::Keygen { data_dir })) => {
            load_or_create_signer(&data_dir)
                .with_context(|| format!("creating a key pair in {}", data_dir.display()))?;
            println!("{}", data_dir.join(PUBLIC_KEY_FILE).display());
            Ok(())
        }
        Some(Command::Dev(DevCommand::MintToken(args))) => mint(args),
        None => serve(cli.serve),
    }
}

fn mint(args: MintArgs) -> anyhow::Result<()> {
    let tools = chorus_catalog::expand_allow_list(&args.tools)?;
    let root = std::path::absolute(&args.root)
        .with_context(|| format!("resolving {}", args.root.display()))?;
    if !root.is_dir() {
        bail!("workspace root {} is not a directory", root.display());
    }
    let signer = load_or_create_signer(&args.data_dir)?;
    let grant = RunGrant {
        run_id: args.run_id,
        task_id: args.task_id,
        agent: args.agent,
        tools: tools.into_iter().map(str::to_owned).collect(),
        root,
    };
    println!(
        "{}",
        signer.mint(&grant, Duration::from_secs(args.ttl_secs))
    );
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Telemetry's OTLP client lives on the runtime.
    let telemetry = {
        let _entered = runtime.enter();
        chorus_telemetry::init("chorus-tool-exec", args.log_format)
    };
    let (verifier, gate) = match (&args.orchestrator_addr, args.standalone) {
        (Some(addr), _) => {
            // Its credential: an API key of role tool-exec, or a client certificate
            // the orchestrator maps to that role.
            let key = match (&args.orchestrator_key_file, &args.tls.tls_client_cert) {
                (Some(file), _) => Some(
                    std::fs::read_to_string(file)
                        .with_context(|| format!("reading the service key {}", file.display()))?,
                ),
                (None, Some(_)) => None,
                (None, None) => bail!(
                    "--orchestrator-addr needs --orchestrator-key-file: a file with tool-exec's API key (role tool-exec), made by an admin with CreateApiKey (or a client certificate: --tls-client-cert)"
                ),
            };
            // The keys are fetched from the orchestrator once serving.
            (
                RunTokenVerifier::from_keys(Vec::new()),
                Some((addr.clone(), key)),
            )
        }
        (None, true) => {
            warn!("standalone: no orchestrator checks runs or records calls; for development only");
            let verifier = match &args.public_key {
                Some(path) => load_verifier(path)?,
                None => dev_verifier(&args.data_dir)?,
            };
            (verifier, None)
        }
        (None, false) => bail!(
            "tool-exec needs an orchestrator to check runs and record their tool calls: pass --orchestrator-addr and --orchestrator-key-file (or --standalone for development)"
        ),
    };
    let limits = Limits {
        max_file_bytes: args.max_file_bytes,
        max_write_bytes: args.max_write_bytes,
        max_output_bytes: args.max_output_bytes,
        bash_default_timeout: Duration::from_secs(args.bash_timeout_secs),
        bash_max_timeout: Duration::from_secs(args.bash_max_timeout_secs),
        tool_timeout: Duration::from_secs(args.tool_timeout_secs),
        ..Limits::default()
    };
    if limits.bash_default_timeout > limits.bash_max_timeout {
        bail!(
            "--bash-timeout-secs ({}) is larger than --bash-max-timeout-secs ({})",
            args.bash_timeout_secs,
            args.bash_max_timeout_secs
        );
    }
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let processes = chorus_sandbox::Sandbox::start(args.sandbox.config()).await;
        // The gate's channel connects lazily, within the runtime.
        let client_tls = args.tls.client();
        let gate = match gate {
            Some((addr, key)) => Some(Arc::new(OrchestratorGate::new(
                &addr,
                key.as_deref(),
                &client_tls,
            )?) as Arc<dyn RunGate>),
            None => None,
        };
        let config = ToolExecConfig {
            limits,
            gate,
            tls: args.tls.server(),
            peers: args.tls.peers().map_err(anyhow::Error::msg)?,
            ..ToolExecConfig::new(verifier, processes)
        };
        chorus_tool_exec::run(listener, config, shutdown_signal()).await
    });
    // Spans and metrics are flushed while the runtime still runs.
    drop(telemetry);
    // Calls had their grace period in `run`; a tool thread still stuck in the
    // kernel must not keep the process alive (dropping the runtime would wait).
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// The public key from the data directory, creating a development key pair there
/// on first use so that one command starts a working service.
fn dev_verifier(data_dir: &Path) -> anyhow::Result<chorus_run_token::RunTokenVerifier> {
    let public = data_dir.join(PUBLIC_KEY_FILE);
    if !public.exists() {
        warn!(dir = %data_dir.display(), "no run-token key pair found; creating a development pair (use --public-key in production)");
        load_or_create_signer(data_dir)?;
        info!(key_set = %data_dir.join(KEY_SET_FILE).display(), "mint tokens with `chorus-tool-exec dev mint-token --root <dir>`");
    }
    Ok(load_verifier(&public)?)
}
