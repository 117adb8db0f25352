//! `chorus-orchestrator`: Chorus's state and its gRPC API, with an embedded
//! tool-exec by default, so one command runs the whole system.

use anyhow::Context;
use chorus_orchestrator::secrets::SECRETS_KEY_VAR;
use chorus_orchestrator::server::EmbeddedToolExec;
use chorus_orchestrator::settings::OrchestratorSettings;
use chorus_run_token::load_or_create_signer_file;
use chorus_telemetry::Shutdown;
use clap::{CommandFactory, FromArgMatches};
use tracing::{info, warn};

fn main() -> anyhow::Result<()> {
    chorus_serve::memory::give_back_freed_memory()
        .context("starting the thread that gives freed memory back")?;
    let command = OrchestratorSettings::command();
    let loaded = chorus_serve::config::load_or_exit(&command);
    let settings =
        OrchestratorSettings::from_arg_matches(&loaded.matches).unwrap_or_else(|e| e.exit());
    settings.validate().map_err(anyhow::Error::msg)?;
    let env_key = std::env::var(SECRETS_KEY_VAR).ok();
    let cwd = std::env::current_dir()
        .context("reading the current directory (the default --workspace-roots)")?;
    if settings.config.print_config {
        let has_env_key = env_key.as_ref().is_some_and(|k| !k.trim().is_empty());
        print!(
            "{}",
            loaded.render(&command, &settings.render(&cwd, has_env_key))
        );
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Telemetry's OTLP client lives on the runtime.
    let telemetry = {
        let _entered = runtime.enter();
        let replica = settings.replica_id().map_err(anyhow::Error::msg)?;
        chorus_telemetry::init_instance("chorus-orchestrator", settings.log_format, Some(&replica))
    };
    if settings.secrets_key_file.is_some() && env_key.is_some() {
        warn!("{SECRETS_KEY_VAR} is ignored: --secrets-key-file names the key file");
    }
    let secrets_key = settings.secrets_key(env_key);

    // A data directory this user may not use (a volume of another uid) is
    // named with its owner and mode, and what to do.
    if let Some(why) = chorus_orchestrator::owner_only::denied(&settings.data_dir) {
        anyhow::bail!("cannot use the data directory: {why}");
    }
    // Made (owner-only) when something is kept there; tightened when it exists.
    if settings.data_dir.exists() || settings.keeps_in_data_dir(&secrets_key) {
        chorus_orchestrator::owner_only::secure_data_dir(&settings.data_dir).with_context(
            || {
                format!(
                    "creating the data directory {}",
                    settings.data_dir.display()
                )
            },
        )?;
    }
    let keys = settings.run_token_keys();
    let signer = load_or_create_signer_file(&keys).with_context(|| {
        let why = chorus_orchestrator::owner_only::denied(&keys)
            .map(|why| format!(": {why}"))
            .unwrap_or_default();
        format!("loading the run-token key set {}{why}", keys.display())
    })?;
    info!(keys = %keys.display(), "run tokens are signed with this key set (--run-token-keys); a separate tool-exec fetches the public keys with its service key");

    let served = runtime.block_on(async move {
        let signals = Shutdown::install();
        signals.exit_on_second_signal();
        // Bind every listener before serving anything.
        let listener = chorus_serve::connections::listen(settings.listen)
            .with_context(|| format!("binding {}", settings.listen))?;
        let embedded_tool_exec = embedded_tool_exec(&settings)?;
        let console = if settings.no_console {
            None
        } else {
            Some(std::net::TcpListener::bind(settings.console_listen).with_context(|| {
                format!("binding the web console on {} (use --console-listen or --no-console)", settings.console_listen)
            })?)
        };
        let mut config = settings.config(signer, embedded_tool_exec, secrets_key, &cwd)?;
        config.console = console;
        info!(allowed = ?config.workspace_roots.allowed, "workspace roots may lie under these directories (--workspace-roots)");
        if let Err(problem) = config.runner.validate() {
            warn!("{problem}; agents cannot be started until this is fixed");
        }
        chorus_orchestrator::server::run(listener, config, signals.requested()).await
    });
    // Calls had their grace period in `run`; a tool thread of the embedded
    // tool-exec stuck in the kernel must not keep the process alive. Spans and
    // metrics are flushed first, while the runtime still runs.
    drop(telemetry);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

/// The embedded tool-exec's listeners, bound (none with
/// --no-embedded-tool-exec or --tool-exec-addr: then the log says how to
/// run one separately).
fn embedded_tool_exec(settings: &OrchestratorSettings) -> anyhow::Result<Option<EmbeddedToolExec>> {
    if !settings.embeds_tool_exec() {
        match &settings.tool_exec_key_file {
            Some(file) => info!(
                key_file = %file.display(),
                "no embedded tool-exec: a separate chorus-tool-exec presents the key in this file (its --orchestrator-key-file)"
            ),
            None => warn!(
                "no embedded tool-exec: start chorus-tool-exec with --orchestrator-addr {} and --orchestrator-key-file: an API key of role tool-exec, made by an admin with CreateApiKey or given to this orchestrator with --tool-exec-key-file",
                settings.listen
            ),
        }
        return Ok(None);
    }
    let listener = chorus_serve::connections::listen(settings.tool_exec_listen)
        .with_context(|| format!("binding the embedded tool-exec on {} (use --tool-exec-listen or --no-embedded-tool-exec)", settings.tool_exec_listen))?;
    let limits = settings.tool_exec_limits();
    let mcp = settings.mcp.bind(limits.message_bytes()).with_context(|| {
        format!(
            "binding the embedded tool-exec's MCP endpoint on {:?} (--mcp-listen)",
            settings.mcp.mcp_listen
        )
    })?;
    Ok(Some(EmbeddedToolExec {
        listener,
        limits,
        mcp,
    }))
}
