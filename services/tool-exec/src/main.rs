//! `chorus-tool-exec`: the tool execution service, plus development helpers to
//! create a key pair and mint run tokens.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use chorus_run_token::{
    KEY_SET_FILE, PUBLIC_KEY_FILE, RunGrant, RunTokenVerifier, load_or_create_signer, load_verifier,
};
use chorus_telemetry::Shutdown;
use chorus_tool_exec::ToolExecConfig;
use chorus_tool_exec::gate::{OrchestratorGate, RunGate};
use chorus_tool_exec::settings::{GateSettings, ToolExecSettings};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
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
    serve: ToolExecSettings,
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
    /// Egress rules (`host:port`, comma-separated) for bash and git of a run
    /// with the network grant.
    #[arg(long, value_delimiter = ',')]
    egress: Vec<String>,
    /// Lifetime of the token in seconds.
    #[arg(long, default_value_t = 3600)]
    ttl_secs: u64,
}

fn main() -> anyhow::Result<()> {
    chorus_serve::memory::give_back_freed_memory()
        .context("starting the thread that gives freed memory back")?;
    let command = Cli::command();
    let loaded = chorus_serve::config::load_or_exit(&command);
    let cli = Cli::from_arg_matches(&loaded.matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Some(Command::Dev(DevCommand::Keygen { data_dir })) => {
            load_or_create_signer(&data_dir)
                .with_context(|| format!("creating a key pair in {}", data_dir.display()))?;
            println!("{}", data_dir.join(PUBLIC_KEY_FILE).display());
            Ok(())
        }
        Some(Command::Dev(DevCommand::MintToken(args))) => mint(args),
        None => {
            let gate = cli.serve.validate().map_err(anyhow::Error::msg)?;
            if cli.serve.config.print_config {
                print!("{}", loaded.render(&command, &cli.serve.render()));
                return Ok(());
            }
            serve(cli.serve, gate)
        }
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
        egress: args
            .egress
            .iter()
            .map(|rule| chorus_sandbox::EgressRule::parse(rule).map(|r| r.to_string()))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?,
        epoch: 0,
    };
    println!(
        "{}",
        signer.mint(&grant, Duration::from_secs(args.ttl_secs))
    );
    Ok(())
}

fn serve(args: ToolExecSettings, gate: GateSettings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Telemetry's OTLP client lives on the runtime.
    let telemetry = {
        let _entered = runtime.enter();
        chorus_telemetry::init("chorus-tool-exec", args.log_format)
    };
    let (verifier, gate) = match gate {
        GateSettings::Orchestrator { addr, key_file } => {
            // Its credential: an API key of role tool-exec, or a client
            // certificate the orchestrator maps to that role.
            let key = key_file
                .map(|file| {
                    std::fs::read_to_string(&file)
                        .with_context(|| format!("reading the service key {}", file.display()))
                })
                .transpose()?;
            // The keys are fetched from the orchestrator once serving.
            (RunTokenVerifier::from_keys(Vec::new()), Some((addr, key)))
        }
        GateSettings::Standalone => {
            warn!("standalone: no orchestrator checks runs or records calls; for development only");
            let verifier = match &args.public_key {
                Some(path) => load_verifier(path)?,
                None => dev_verifier(&args.data_dir)?,
            };
            (verifier, None)
        }
    };
    let limits = args.limits();
    let shutdown_runtime = std::time::Duration::from_secs(1);
    let served = runtime.block_on(async move {
        let signals = Shutdown::install();
        signals.exit_on_second_signal();
        let listener = chorus_serve::connections::listen(args.listen)
            .with_context(|| format!("binding {}", args.listen))?;
        let processes = chorus_sandbox::Sandbox::start(args.sandbox.config()).await;
        let _sandbox_gauge =
            chorus_telemetry::metrics().sandbox(processes.status().state, processes.status().tier);
        // The gate's connections are made lazily, within the runtime.
        let client_tls = args.tls.client();
        let gate = match gate {
            Some((addr, key)) => Some(Arc::new(OrchestratorGate::new(
                &addr,
                key.as_deref(),
                &client_tls,
                args.orchestrator_connections,
            )?) as Arc<dyn RunGate>),
            None => None,
        };
        let mcp = args
            .mcp
            .bind(limits.message_bytes())
            .with_context(|| format!("binding the MCP endpoint {:?}", args.mcp.mcp_listen))?;
        let config = ToolExecConfig {
            limits,
            gate,
            mcp,
            serve: args.serve(),
            tls: args.tls.server(),
            peers: args.tls.peers().map_err(anyhow::Error::msg)?,
            ..ToolExecConfig::new(verifier, processes)
        };
        chorus_tool_exec::run(listener, config, signals.requested()).await
    });
    // Calls had their grace period in `run`; a tool thread still stuck in the
    // kernel must not keep the process alive (dropping the runtime would wait).
    // Spans and metrics are flushed first, while the runtime still runs.
    drop(telemetry);
    runtime.shutdown_timeout(shutdown_runtime);
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
