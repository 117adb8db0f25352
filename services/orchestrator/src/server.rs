//! The service entry point: `run(listener, config, shutdown)`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use chorus_auth::AuthLayer;
use chorus_auth::tls::{PeerRoles, ServerTls};
use chorus_proto::orchestrator::v1::agent_tools_server::AgentToolsServer;
use chorus_proto::orchestrator::v1::orchestrator_server::OrchestratorServer;
use chorus_run_token::RunTokenSigner;
use chorus_serve::ServeConfig;
use chorus_serve::grpc::{Port, PortSpec};
use chorus_serve::health::watch_dependency;
use chorus_tool_exec::gate::RunGate;
use chorus_tool_exec::{Limits, ToolExecConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tracing::{info, warn};

use crate::domain::{KeyReferenceRules, RootPolicy};
use crate::embedded::InProcessGate;
use crate::execution::RunnerConfig;
use crate::grpc::agent_tools::AgentToolsService;
use crate::grpc::orchestrator::OrchestratorService;
use crate::history::relay::Relay;
use crate::secrets::KeySource;
use crate::state::AppState;
use crate::store::{Backend, Store};

/// File of the first admin key in the data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";

/// A tool-exec served by the orchestrator's own process (the all-in-one shape).
#[derive(Debug)]
pub struct EmbeddedToolExec {
    pub listener: TcpListener,
    pub limits: Limits,
    /// Its MCP endpoint (Streamable HTTP); None: off.
    pub mcp: Option<chorus_tool_exec::mcp::McpFace>,
}

/// Everything the orchestrator needs to run.
#[derive(Debug)]
pub struct OrchestratorConfig {
    /// `postgres://...`, or a SQLite file path.
    pub database_url: String,
    /// Mints run tokens (the private key).
    pub signer: Arc<RunTokenSigner>,
    /// Serve tool-exec in this process too.
    pub embedded_tool_exec: Option<EmbeddedToolExec>,
    /// Address of a tool-exec run separately (when none is embedded), handed to agents.
    pub tool_exec_addr: Option<String>,
    /// The MCP endpoint of a tool-exec run separately, handed to OpenRun's
    /// callers.
    pub tool_exec_mcp_url: Option<String>,
    /// Limits and timeouts of calls, keepalive, health checks, the drain and
    /// the grace of a shutdown (the embedded tool-exec's too).
    pub serve: ServeConfig,
    /// How agents are run.
    pub runner: RunnerConfig,
    /// How the processes agents cause are confined (CLI agents here, bash and
    /// git in the embedded tool-exec).
    pub sandbox: chorus_sandbox::SandboxConfig,
    /// Where the first admin key is written when the store has none; None:
    /// no key is made (keys come from elsewhere).
    pub admin_key_file: Option<PathBuf>,
    /// A file with the API key a separate tool-exec presents: stored with role
    /// tool-exec at start when the store does not hold it (the file is only read).
    pub tool_exec_key_file: Option<PathBuf>,
    /// Where workspace roots may be (the data directory is always protected).
    pub workspace_roots: RootPolicy,
    /// Where provider key references may point (Chorus's own places, those
    /// of `workspace_roots`, are added at start).
    pub key_references: KeyReferenceRules,
    /// The price table (`--prices`).
    pub prices: crate::domain::Prices,
    /// Where A2A push notifications may go (`--a2a-push-allow-network`).
    pub push_networks: crate::domain::push::PushNetworks,
    /// The key that encrypts provider API keys in the database.
    pub secrets_key: KeySource,
    /// TLS on every listener (the embedded tool-exec's too); None: plaintext.
    /// Agents are then given `https://` addresses and `runner.tls_ca`.
    pub tls: Option<ServerTls>,
    /// Client certificates that act with a role (mTLS).
    pub peers: PeerRoles,
    /// The web console's listener, bound; None: no console.
    pub console: Option<std::net::TcpListener>,
    /// This replica's id; None: the host name with PostgreSQL, `local` with
    /// SQLite.
    pub replica_id: Option<String>,
    /// How long a lease on a run lasts without a heartbeat.
    pub lease: std::time::Duration,
    /// How long a start waits for a database that does not answer.
    pub database_wait: std::time::Duration,
    /// Where agents reach the orchestrator (a load balancer in front of the
    /// replicas); None: the listener's address.
    pub advertise_addr: Option<String>,
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
            signer: Arc::new(signer),
            embedded_tool_exec: None,
            tool_exec_addr: None,
            tool_exec_mcp_url: None,
            serve: ServeConfig::default(),
            sandbox: chorus_sandbox::SandboxConfig::default(),
            admin_key_file: Some(data_dir.join(ADMIN_KEY_FILE)),
            tool_exec_key_file: None,
            workspace_roots: RootPolicy::new(&[], &[data_dir.to_owned()]),
            key_references: KeyReferenceRules::default(),
            prices: crate::domain::Prices::default(),
            push_networks: crate::domain::push::PushNetworks::default(),
            secrets_key: KeySource::default_file(data_dir),
            tls: None,
            peers: PeerRoles::default(),
            console: None,
            replica_id: None,
            lease: std::time::Duration::from_secs(15),
            database_wait: std::time::Duration::ZERO,
            advertise_addr: None,
        }
    }

    /// The serving settings, requests bounded by `message_bytes`.
    fn serve_with(&self, message_bytes: usize) -> ServeConfig {
        let mut serve = self.serve.clone();
        serve.capacity.request_bytes = message_bytes;
        serve
    }

    /// The largest message the orchestrator takes: as large as its tool-exec's
    /// (the embedded one's limits, else the defaults).
    fn message_bytes(&self) -> usize {
        self.embedded_tool_exec
            .as_ref()
            .map_or_else(Limits::default, |embedded| embedded.limits)
            .message_bytes()
    }
}

/// The services this port serves, as health and reflection name them.
pub const SERVICES: [&str; 3] = [
    "chorus.orchestrator.v1.Orchestrator",
    "chorus.orchestrator.v1.AgentTools",
    "lf.a2a.v1.A2AService",
];

/// Serves `chorus.orchestrator.v1` (Orchestrator and AgentTools), gRPC health and
/// reflection (v1 and v1alpha) on `listener`, and the embedded tool-exec when
/// configured, until `shutdown` resolves.
///
/// Every call passes the load-shedding layer (`--max-concurrent-requests`,
/// `--max-concurrent-streams`), the request timeout of unary calls, the
/// message limit and authentication, in that order. Health (`""` and both
/// services) is NOT_SERVING while the database does not answer.
///
/// Shutdown order: health goes NOT_SERVING (the embedded tool-exec's too) and
/// calls are still served for the drain period; then the shared cancellation
/// token fires (the servers stop accepting, WatchTask streams end, agent runs
/// stop, the embedded tool-exec kills running commands), every run's
/// processes are killed and its interruption recorded, and calls in flight
/// get the shutdown grace to finish.
pub async fn run(
    listener: TcpListener,
    mut config: OrchestratorConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let message_bytes = config.message_bytes();
    // A shutdown asked for while the database is awaited ends the wait.
    let stop_asked = CancellationToken::new();
    let asked = stop_asked.clone();
    let shutdown = async move {
        shutdown.await;
        asked.cancel();
    };
    tokio::pin!(shutdown);
    let opening = crate::starting::Opening {
        database_url: &config.database_url,
        secrets_key: &config.secrets_key,
        replica_id: config.replica_id.as_deref(),
        lease: config.lease,
        wait: config.database_wait,
        tls: config.tls.as_ref(),
        services: &SERVICES,
    };
    let opening = crate::starting::open_when_it_answers(&opening, listener, &stop_asked);
    let (store, replica_lock, listener) = tokio::select! {
        opened = opening => match opened? {
            Some(opened) => opened,
            None => return Ok(()),
        },
        () = &mut shutdown => return Ok(()),
    };
    let key_hint = bootstrap_keys(&store, &config).await?;
    let _pool_gauge = pool_gauge(&store);
    share_signing_keys(&store, &config.signer).await?;
    let processes = chorus_sandbox::Sandbox::start(config.sandbox.clone()).await;
    reachable_runs_dir(&processes, &config.runner.runs_dir);
    let _sandbox_gauge =
        chorus_telemetry::metrics().sandbox(processes.status().state, processes.status().tier);
    let state = app_state(&mut config, store, processes.clone(), addr)?;

    let lost = CancellationToken::new();
    // The SQLite lock is held until `run` returns.
    let (relay, _sqlite_lock) = match replica_lock {
        crate::starting::ReplicaLock::Relay(relay) => {
            (Some(start_relay(*relay, &state, &lost)), None)
        }
        crate::starting::ReplicaLock::File(file) => (None, Some(file)),
    };
    let serve = config.serve_with(message_bytes);
    let port = Port::open(&serve, port_spec(message_bytes)).await?;
    // Set when the drain starts: a draining replica takes no more runs.
    let draining = CancellationToken::new();
    // Every task worktree accounted for before the service answers.
    crate::core::branches::sweep_logged(&state).await;
    let pushes = crate::a2a::push::spawn(state.clone());
    let starts = tokio::spawn(crate::core::tasks::keep_starting(
        state.clone(),
        config.lease / 3,
        state.shutdown.clone(),
        draining.clone(),
    ));
    // And again hourly (keep_unlanded_days).
    let sweeps = tokio::spawn(crate::core::branches::keep_sweeping(
        state.clone(),
        state.shutdown.clone(),
    ));
    let leases = tokio::spawn(
        crate::runner::lease::Leases::new(state.clone(), port.health.clone()).keep(
            state.shutdown.clone(),
            draining.clone(),
            lost.clone(),
        ),
    );
    let stop = state.shutdown.clone();
    let database_watch = watch_database(&state, &port.health, serve.health_check);
    let routes = routes(&state, port.limits(&serve), message_bytes);
    let auth = auth_layer(&state, key_hint, &config);
    // Logged before the orchestrator's own port: whoever reads the log for
    // the addresses has both once it serves.
    let tool_exec = config
        .embedded_tool_exec
        .take()
        .map(|embedded| serve_embedded(embedded, &state, &config, &serve, &processes, &draining))
        .transpose()?;
    if let Some(console) = config.console.take() {
        let local = port.local(&serve, auth.clone(), routes.clone());
        serve_console(
            console,
            local,
            &state,
            &config,
            serve.connections.answer_send,
            stop.clone(),
        )?;
    }
    let mut serving = port.serve(
        &serve,
        listener,
        config.tls.as_ref(),
        auth,
        routes,
        stop.clone(),
    )?;

    if !serving.drain_after(shutdown, || draining.cancel()).await? {
        return Ok(());
    }
    stop.cancel();
    stop_replica(
        &state,
        [
            Some(leases),
            relay,
            Some(pushes),
            Some(starts),
            Some(sweeps),
        ],
    )
    .await;
    serving.finish().await?;
    if let Some(tool_exec) = tool_exec {
        match tool_exec.await {
            Ok(result) => result?,
            Err(e) => warn!(error = %e, "embedded tool-exec task failed"),
        }
    }
    // Its last check holds a database connection: the store is closed only
    // once it is done.
    if let Err(e) = database_watch.await {
        warn!(error = %e, "the database health check failed");
    }
    Ok(())
}

/// Keys, run tokens and client certificates, checked against each method's rule.
fn auth_layer(state: &AppState, key_hint: String, config: &OrchestratorConfig) -> AuthLayer {
    AuthLayer::with_peers(
        state.auth.clone(),
        crate::auth::access::access,
        key_hint,
        config.peers.clone(),
    )
}

/// Most connections the console holds (a browser opens a few per page).
const CONSOLE_CONNECTIONS: usize = 256;

/// Serves the web console on `listener` until `stop`: its calls go through
/// `local`, the orchestrator port's own layers, in this process.
fn serve_console(
    listener: std::net::TcpListener,
    local: chorus_serve::grpc::LocalService,
    state: &AppState,
    config: &OrchestratorConfig,
    unread: std::time::Duration,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let state = state.clone();
    let cards: chorus_console::PublicCard = std::sync::Arc::new(move |workspace, seen_host| {
        let state = state.clone();
        Box::pin(async move {
            let card = crate::a2a::public_card(&state, &workspace, seen_host.as_deref()).await?;
            Ok(prost::Message::encode_to_vec(&card))
        })
    });
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let tls = config
        .tls
        .as_ref()
        .map(chorus_serve::http::rustls_config)
        .transpose()?;
    // Logged before the orchestrator's own port, as the embedded tool-exec is.
    info!(addr = %listener.local_addr()?, tls = tls.is_some(), "web console");
    tokio::spawn(async move {
        if let Err(e) = chorus_console::serve(
            listener,
            local,
            tls,
            CONSOLE_CONNECTIONS,
            unread,
            Some(cards),
            stop,
        )
        .await
        {
            warn!(error = %e, "the web console stopped");
        }
    });
    Ok(())
}

/// The orchestrator's port: its services, and the message limit (as large
/// as its tool-exec's).
fn port_spec(message_bytes: usize) -> PortSpec {
    PortSpec {
        name: "the orchestrator",
        log: "orchestrator",
        services: &SERVICES,
        // A first question about a call, and an orchestration tool, may wait
        // for a person's answer to an approval rule, up to its deadline.
        own_deadline: &[
            "/chorus.orchestrator.v1.AgentTools/AuthorizeToolCall",
            "/chorus.orchestrator.v1.AgentTools/CallTool",
        ],
        message_bytes,
        message_hint: "send less: orchestration calls carry text, never whole files".to_owned(),
    }
}

/// The services of the port, over `state`.
fn routes(
    state: &AppState,
    limits: Vec<chorus_proto::serving::v1::Limit>,
    message_bytes: usize,
) -> Routes {
    Routes::new(
        OrchestratorServer::new(OrchestratorService::new(state.clone()).with_limits(limits))
            .max_decoding_message_size(message_bytes),
    )
    .add_service(
        AgentToolsServer::new(AgentToolsService::new(state.clone()))
            .max_decoding_message_size(message_bytes),
    )
    .add_service(crate::a2a::ExplainDecodeErrors(
        tonic::service::interceptor::InterceptedService::new(
            chorus_proto::a2a::v1::a2a_service_server::A2aServiceServer::new(
                crate::a2a::A2aFace::new(state.clone()),
            )
            .max_decoding_message_size(message_bytes),
            crate::a2a::check_version,
        ),
    ))
}

/// Replicas sign with one key set, kept in the database (sealed); the first
/// replica's own set becomes it.
async fn share_signing_keys(store: &Store, signer: &RunTokenSigner) -> anyhow::Result<()> {
    if store.backend() == Backend::Postgres {
        let shared = store.shared_run_token_keys(signer.export()).await?;
        signer.adopt(shared)?;
        info!(
            "run tokens are signed with the key set the replicas share in the database (RotateRunTokenKey rotates it for all)"
        );
    }
    Ok(())
}

/// The first admin key (written to its file when the store has none) and a
/// separate tool-exec's key; what a caller without a key is told.
async fn bootstrap_keys(store: &Store, config: &OrchestratorConfig) -> anyhow::Result<String> {
    let key_hint = match &config.admin_key_file {
        Some(file) => {
            crate::auth::bootstrap::ensure_admin_key(store, file).await?;
            format!(
                "admins make keys with CreateApiKey; the first admin key is in {}",
                file.display()
            )
        }
        None => "admins make keys with CreateApiKey".to_owned(),
    };
    if let Some(file) = &config.tool_exec_key_file {
        crate::auth::bootstrap::accept_tool_exec_key(store, file).await?;
    }
    Ok(key_hint)
}

/// Database pool use, observed when metrics are collected (while it lives).
fn pool_gauge(store: &Store) -> opentelemetry::metrics::ObservableGauge<i64> {
    let pool_store = store.clone();
    chorus_telemetry::metrics()
        .meter()
        .i64_observable_gauge("chorus.db.pool.connections")
        .with_description("Database connections of the pool, by state (used or idle)")
        .with_callback(move |observer| {
            let (open, idle) = pool_store.pool_use();
            observer.observe(
                i64::from(open.saturating_sub(idle)),
                &[opentelemetry::KeyValue::new("state", "used")],
            );
            observer.observe(
                i64::from(idle),
                &[opentelemetry::KeyValue::new("state", "idle")],
            );
        })
        .build()
}

/// The state every face and the runner share: the store, the signer, the
/// runner, where workspaces and key references may point, and the addresses
/// agents are given.
fn app_state(
    config: &mut OrchestratorConfig,
    store: Store,
    processes: chorus_sandbox::Sandbox,
    addr: std::net::SocketAddr,
) -> anyhow::Result<AppState> {
    // This process's own fence directory (see `execution::fence`).
    config.runner.fence_dir = Some(crate::execution::fence::dir_for(&store.replica().instance));
    let mut state = AppState::new(
        store,
        Arc::clone(&config.signer),
        config.runner.clone(),
        processes,
    );
    state.roots = config.workspace_roots.clone();
    // Neither a workspace nor a key reference may reach the secrets key.
    if let Some(file) = config.secrets_key.file() {
        state.roots.protect(file);
    }
    // Its own directories say they are Chorus data: no deployment accepts
    // them as workspaces.
    for own in state.roots.protected.iter().filter(|p| p.is_dir()) {
        if let Err(e) = chorus_serve::data_dir::mark(own) {
            warn!(dir = %own.display(), error = %e, "cannot mark a data directory as Chorus's own; another deployment on this host could accept it as a workspace");
        }
    }
    state.key_references = KeyReferenceRules {
        protected: state.roots.protected.clone(),
        ..config.key_references.clone()
    };
    state.addresses = addresses(config, addr)?;
    state.prices = Arc::new(config.prices.clone());
    state.push_networks = config.push_networks.clone();
    if !config.prices.is_empty() {
        info!(prices = config.prices.len(), "price table loaded");
    }
    Ok(state)
}

/// Where agents reach the services (over TLS when they serve it).
fn addresses(
    config: &OrchestratorConfig,
    addr: std::net::SocketAddr,
) -> anyhow::Result<crate::state::Addresses> {
    let scheme = |addr: String| match &config.tls {
        Some(_) if !addr.contains("://") && !addr.is_empty() => format!("https://{addr}"),
        _ => addr,
    };
    if addr.ip().is_unspecified() && config.advertise_addr.is_none() {
        warn!(
            %addr,
            "the orchestrator listens on every address and no --advertise-addr is set: agent cards name it by the host each client reached the card by (or this machine's name), and agents on other machines cannot be told where it is; set --advertise-addr"
        );
    }
    Ok(crate::state::Addresses {
        orchestrator: scheme(
            config
                .advertise_addr
                .clone()
                .unwrap_or_else(|| addr.to_string()),
        ),
        tool_exec: scheme(match &config.embedded_tool_exec {
            Some(embedded) => embedded.listener.local_addr()?.to_string(),
            None => config.tool_exec_addr.clone().unwrap_or_default(),
        }),
        embedded_tool_exec: config.embedded_tool_exec.is_some(),
        mcp_url: match &config.embedded_tool_exec {
            Some(EmbeddedToolExec {
                mcp: Some(face), ..
            }) => face.url(config.tls.is_some())?,
            Some(_) => String::new(),
            None => config.tool_exec_mcp_url.clone().unwrap_or_default(),
        },
        console: match &config.console {
            Some(console) => console_url(config, console.local_addr()?),
            None => String::new(),
        },
    })
}

/// The console's URL for clients: the advertised host with the console's
/// port when there is one, else the address it listens on. One listening
/// on every address is named in agent cards by the host each client
/// reached it by (`a2a::card::reachable`); that is said at start.
fn console_url(config: &OrchestratorConfig, listening: std::net::SocketAddr) -> String {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let advertised = config.advertise_addr.as_deref().and_then(|addr| {
        let addr = addr.split_once("://").map_or(addr, |(_, rest)| rest);
        addr.rsplit_once(':').map(|(host, _)| host.to_owned())
    });
    match advertised {
        Some(host) => format!("{scheme}://{host}:{}", listening.port()),
        None => {
            if listening.ip().is_unspecified() {
                warn!(
                    addr = %listening,
                    "the console listens on every address and no --advertise-addr is set: agent cards name the console and the orchestrator by the host each client reached the card by (or this machine's name); set --advertise-addr to name them yourself"
                );
            }
            format!("{scheme}://{listening}")
        }
    }
}

/// Relays the other replicas' events to this one's watchers until the
/// shutdown; `lost` fires if the replica's lock is lost.
fn start_relay(relay: Relay, state: &AppState, lost: &CancellationToken) -> JoinHandle<()> {
    tokio::spawn(relay.run(
        state.store.clone(),
        state.hub.clone(),
        state.signer.clone(),
        state.claim_now.clone(),
        state.shutdown.clone(),
        lost.clone(),
    ))
}

/// Health (`""` and both services) is NOT_SERVING while the database does
/// not answer.
fn watch_database(
    state: &AppState,
    health: &chorus_serve::Health,
    every: std::time::Duration,
) -> JoinHandle<()> {
    let store = state.store.clone();
    tokio::spawn(watch_dependency(
        health.clone(),
        "the database",
        every,
        store.failures(),
        state.shutdown.clone(),
        move || {
            let store = store.clone();
            async move { store.ping().await.map_err(|e| e.to_string()) }
        },
    ))
}

/// Serves the embedded tool-exec: it checks runs and records calls
/// in-process, and drains with the orchestrator.
fn serve_embedded(
    embedded: EmbeddedToolExec,
    state: &AppState,
    config: &OrchestratorConfig,
    serve: &ServeConfig,
    processes: &chorus_sandbox::Sandbox,
    draining: &CancellationToken,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let gate: Arc<dyn RunGate> = Arc::new(InProcessGate::new(state.clone()));
    let tool_exec_config = ToolExecConfig {
        limits: embedded.limits,
        gate: Some(gate),
        tls: config.tls.clone(),
        peers: config.peers.clone(),
        serve: serve.clone(),
        mcp: embedded.mcp,
        ..ToolExecConfig::new(state.verifier.clone(), processes.clone())
    };
    let tool_exec_stop = draining.clone();
    info!(addr = %embedded.listener.local_addr()?, "embedded tool-exec");
    Ok(tokio::spawn(chorus_tool_exec::run(
        embedded.listener,
        tool_exec_config,
        async move {
            tool_exec_stop.cancelled().await;
        },
    )))
}

/// Once calls are no longer taken: every run's processes are killed and its
/// end recorded, the replica's tasks end, and its stop is recorded — before
/// the store goes.
async fn stop_replica<const N: usize>(state: &AppState, tasks: [Option<JoinHandle<()>>; N]) {
    state.runner.shutdown().await;
    if let Some(fence) = state.runner.fence() {
        fence.remove();
    }
    for task in tasks.into_iter().flatten() {
        if let Err(e) = task.await {
            warn!(error = %e, "a replica task failed");
        }
    }
    if let Err(e) = state.store.stop_replica().await {
        warn!(error = %e, "cannot record that this replica stopped");
    }
}

/// A root service's landlock-tier sandboxes run as each workspace's owner
/// and reach their run directory through the host's directories: the runs
/// directory and the service's own directories above it let others search
/// (never list or read), at every start — a resumed run finds its way.
fn reachable_runs_dir(processes: &chorus_sandbox::Sandbox, runs_dir: &std::path::Path) {
    if processes.tier() != Some(chorus_sandbox::Tier::Landlock) || !nix::unistd::geteuid().is_root()
    {
        return;
    }
    match crate::owner_only::open_for_search(runs_dir) {
        Ok(changed) if !changed.is_empty() => info!(
            dirs = ?changed,
            "the landlock tier runs CLI agents as each workspace's owner: these directories now let others search them (mode +011: pass through, never list or read)"
        ),
        Ok(_) => {}
        Err(e) => warn!(
            runs_dir = %runs_dir.display(),
            error = %e,
            "cannot let workspace owners reach the runs directory: CLI agents will be refused until every directory above it lets them search (chmod o+x)"
        ),
    }
}
