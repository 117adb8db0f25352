//! The orchestrator's settings: one typed struct, from flags, environment
//! variables and the optional configuration file (defaults < file <
//! environment < flags; see `chorus_serve::config`), validated once at start
//! and turned into the [`OrchestratorConfig`] `run` takes.
//!
//! What the orchestrator writes can be placed apart from the data directory,
//! for a read-only root filesystem and mounted secrets: the database
//! (`--database-url`), the run-token key set (`--run-token-keys`), the run
//! directories (`--runs-dir`), the first admin key (`--admin-key-file`) and
//! the secrets key (`--secrets-key-file` or `CHORUS_SECRETS_KEY`). With all of
//! them placed, nothing is written to the data directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use chorus_run_token::KEY_SET_FILE;
use chorus_serve::ServeArgs;
use chorus_serve::config::{ConfigArgs, Render};

use crate::domain::{KeyReferenceRules, RootPolicy};
use crate::secrets::{KeySource, SECRETS_KEY_FILE, SECRETS_KEY_VAR};
use crate::server::{ADMIN_KEY_FILE, EmbeddedToolExec, OrchestratorConfig};

/// SQLite file of the default database, in the data directory.
pub const DATABASE_FILE: &str = "chorus.db";

/// Everything `chorus-orchestrator` is told at start.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "chorus-orchestrator", version)]
pub struct OrchestratorSettings {
    /// Address to serve gRPC on.
    #[arg(long, env = "CHORUS_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory (owner-only) for what is not placed elsewhere: the SQLite
    /// database, the run-token key set, the run directories, the secrets key
    /// and the first admin key.
    #[arg(long, env = "CHORUS_DATA_DIR", default_value = ".chorus")]
    pub data_dir: PathBuf,
    /// Database: `postgres://user@host/db`, or a SQLite file (default: <data-dir>/chorus.db).
    #[arg(long, env = "CHORUS_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The run-token key set: the private keys that sign run tokens (made,
    /// 0600, when missing; rotated in place). Default: <data-dir>/run-token-keys.json.
    #[arg(long, env = "CHORUS_RUN_TOKEN_KEYS", value_name = "FILE")]
    pub run_token_keys: Option<PathBuf>,
    /// Where each run gets its directory (HOME, TMPDIR, generated config);
    /// must be writable. Default: <data-dir>/runs.
    #[arg(long, env = "CHORUS_RUNS_DIR", value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Do not start the embedded tool-exec (run chorus-tool-exec separately).
    #[arg(long, env = "CHORUS_NO_EMBEDDED_TOOL_EXEC")]
    pub no_embedded_tool_exec: bool,
    /// Address of the embedded tool-exec.
    #[arg(
        long,
        env = "CHORUS_TOOL_EXEC_LISTEN",
        default_value = "127.0.0.1:50052"
    )]
    pub tool_exec_listen: SocketAddr,
    /// Address (host:port) of a separately run tool-exec, handed to agents; implies
    /// --no-embedded-tool-exec.
    #[arg(long, env = "CHORUS_TOOL_EXEC_ADDR")]
    pub tool_exec_addr: Option<String>,
    /// The MCP endpoint of a separately run tool-exec (its --mcp-listen, as
    /// clients reach it: http(s)://host:port/mcp), handed to OpenRun's callers.
    #[arg(long, env = "CHORUS_TOOL_EXEC_MCP_URL", requires = "tool_exec_addr")]
    pub tool_exec_mcp_url: Option<String>,
    /// The embedded tool-exec's MCP endpoint.
    #[command(flatten)]
    pub mcp: chorus_tool_exec::mcp::McpArgs,
    /// Address of the web console (HTTP, or HTTPS with --tls-cert): its pages
    /// and the JSON face of this API they call, behind the same API keys.
    #[arg(long, env = "CHORUS_CONSOLE_LISTEN", default_value = "127.0.0.1:50053")]
    pub console_listen: SocketAddr,
    /// Do not serve the web console.
    #[arg(long, env = "CHORUS_NO_CONSOLE")]
    pub no_console: bool,
    /// Log format.
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: chorus_telemetry::LogFormat,
    /// The chorus-tools binary agents call (default: next to this executable).
    #[arg(long, env = "CHORUS_TOOLS_BIN")]
    pub chorus_tools: Option<PathBuf>,
    /// The Claude Code CLI.
    #[arg(long, env = "CHORUS_CLAUDE_BIN", default_value = "claude")]
    pub claude_bin: PathBuf,
    /// The OpenCode CLI.
    #[arg(long, env = "CHORUS_OPENCODE_BIN", default_value = "opencode")]
    pub opencode_bin: PathBuf,
    /// Seconds an agent run may take unless StartTask says otherwise.
    #[arg(long, env = "CHORUS_RUN_TIMEOUT_SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub run_timeout_secs: u64,
    /// Runs this replica drives at once (top-level runs; a handoff's child
    /// works in its parent's place). One more waits for a place, its task
    /// says why (`run_queued`), and starts when a run ends; its time limit
    /// counts from then.
    #[arg(long, env = "CHORUS_MAX_RUNNING_RUNS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_running_runs: u32,
    /// Seconds a handoff may take unless its caller says otherwise.
    #[arg(long, env = "CHORUS_HANDOFF_TIMEOUT_SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub handoff_timeout_secs: u64,
    /// More environment variables to pass on to agent processes (comma-separated
    /// names; locale, proxy and model-credential variables are passed already).
    #[arg(long, env = "CHORUS_AGENT_PASS_ENV", value_delimiter = ',')]
    pub agent_pass_env: Vec<String>,
    /// Keep each run's directory (its HOME, generated config) after it ends.
    #[arg(long, env = "CHORUS_KEEP_RUN_DIRS")]
    pub keep_run_dirs: bool,
    /// More paths CLI agents may read in their sandbox (comma-separated; for a
    /// runtime the CLI needs outside the system directories and its own install).
    #[arg(long, env = "CHORUS_AGENT_READ_ONLY_PATHS", value_delimiter = ',')]
    pub agent_read_only_path: Vec<PathBuf>,
    /// Directories workspace roots may lie under (comma-separated; default: the
    /// directory the orchestrator is started in). `/`, the data directory and
    /// the directories that hold it are always refused.
    #[arg(long, env = "CHORUS_WORKSPACE_ROOTS", value_delimiter = ',')]
    pub workspace_roots: Vec<PathBuf>,
    /// Where the first admin key is written when the database has no admin key
    /// (default: <data-dir>/admin.key).
    #[arg(long, env = "CHORUS_ADMIN_KEY_FILE")]
    pub admin_key_file: Option<PathBuf>,
    /// File with the API key a separate tool-exec presents (its
    /// --orchestrator-key-file): stored with role tool-exec at start when the
    /// database does not hold it. The file is only read.
    #[arg(long, env = "CHORUS_TOOL_EXEC_KEY_FILE")]
    pub tool_exec_key_file: Option<PathBuf>,
    /// File of the key that encrypts provider API keys in the database (32 random
    /// bytes in base64; must exist). Without it: the key itself from
    /// CHORUS_SECRETS_KEY, else <data-dir>/secrets.key, made when missing.
    #[arg(long, env = "CHORUS_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Where agents reach the orchestrator (host:port), when not at
    /// --listen: the load balancer in front of the replicas, so an agent's
    /// handoff may start on any replica.
    #[arg(long, env = "CHORUS_ADVERTISE_ADDR")]
    pub advertise_addr: Option<String>,
    /// The directory provider key files live in: a `file:/path` key reference
    /// must name a file in it (default: none, and file references are
    /// refused).
    #[arg(long, env = "CHORUS_PROVIDER_KEY_DIR", value_name = "DIR")]
    pub provider_key_dir: Option<PathBuf>,
    /// The price table: a TOML file of US dollars per million tokens by model
    /// (`[models."gpt-4o"] input = 2.5, output = 10.0, cache-read = 1.25`)
    /// and by model for providers of a name (`[providers.NAME."model"]`).
    /// What a model call costs when its provider does not say; a model in no
    /// table is unpriced (counted, never taken as free).
    #[arg(long, env = "CHORUS_PRICES", value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// A private network (CIDR, e.g. 10.20.0.0/16) whose addresses A2A
    /// push-notification webhooks may be at; repeat for more. Public
    /// addresses are always allowed; this machine's, link-local and cloud
    /// metadata addresses never are, whatever is given here.
    #[arg(
        long = "a2a-push-allow-network",
        env = "CHORUS_A2A_PUSH_ALLOW_NETWORKS",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub a2a_push_allow_networks: Vec<String>,
    /// An `env:NAME` key reference must name a variable starting with this.
    #[arg(long, env = "CHORUS_PROVIDER_KEY_ENV_PREFIX", default_value = crate::domain::DEFAULT_KEY_ENV_PREFIX)]
    pub provider_key_env_prefix: String,
    /// Let the embedded tool-exec's file tools read regular files that have
    /// more than one hard link (refused by default: a link planted in a
    /// workspace can name a file outside it).
    #[arg(long, env = "CHORUS_ALLOW_HARD_LINKS")]
    pub allow_hard_links: bool,
    /// This orchestrator's replica id. Replicas sharing one PostgreSQL
    /// database each need their own, kept across restarts where possible (a
    /// restarted replica takes its own runs back at once). Default: the host
    /// name; with SQLite, which serves one orchestrator, `local`.
    #[arg(long, env = "CHORUS_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Seconds a replica's lease on the runs it drives lasts without a
    /// heartbeat (it beats three times per lease): the runs of a replica that
    /// died are taken over after at most this long.
    #[arg(long, env = "CHORUS_LEASE_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_secs: u64,
    /// Seconds a first start waits for a PostgreSQL database that does not
    /// answer (serving health NOT_SERVING, every other call UNAVAILABLE, and
    /// trying again) before it gives up and exits; 0 exits at once.
    #[arg(long, env = "CHORUS_DATABASE_WAIT_SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub database_wait_secs: u64,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub sandbox: chorus_sandbox::cli::SandboxArgs,
    #[command(flatten)]
    pub tls: chorus_auth::cli::TlsArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
}

impl OrchestratorSettings {
    /// The database URL: `--database-url`, else `<data-dir>/chorus.db`.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| self.data_dir.join(DATABASE_FILE).display().to_string())
    }

    /// This replica's id: `--replica-id`, else the host name with
    /// PostgreSQL, `local` with SQLite.
    ///
    /// # Errors
    /// The host name cannot be read, or is not a valid replica id.
    pub fn replica_id(&self) -> Result<String, String> {
        if let Some(id) = &self.replica_id {
            return Ok(id.clone());
        }
        let url = self.database_url();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            crate::starting::host_name()
        } else {
            Ok("local".to_owned())
        }
    }

    /// The run-token key set file.
    pub fn run_token_keys(&self) -> PathBuf {
        self.run_token_keys
            .clone()
            .unwrap_or_else(|| self.data_dir.join(KEY_SET_FILE))
    }

    /// The run directories.
    pub fn runs_dir(&self) -> PathBuf {
        self.runs_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("runs"))
    }

    /// The first admin key's file.
    pub fn admin_key_file(&self) -> PathBuf {
        self.admin_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(ADMIN_KEY_FILE))
    }

    /// Whether anything is kept in the data directory: a setting left to its
    /// default there (the SQLite database, the key set, the run directories,
    /// the admin key, the secrets key `secrets` names).
    pub fn keeps_in_data_dir(&self, secrets: &KeySource) -> bool {
        self.database_url.is_none()
            || self.run_token_keys.is_none()
            || self.runs_dir.is_none()
            || self.admin_key_file.is_none()
            || secrets
                .file()
                .is_some_and(|f| f.starts_with(&self.data_dir))
    }

    /// The limits of the embedded tool-exec's calls.
    pub fn tool_exec_limits(&self) -> chorus_tool_exec::Limits {
        chorus_tool_exec::Limits {
            hard_links: if self.allow_hard_links {
                chorus_tool_exec::sandbox::HardLinks::Allow
            } else {
                chorus_tool_exec::sandbox::HardLinks::Refuse
            },
            ..chorus_tool_exec::Limits::default()
        }
    }

    /// Whether the embedded tool-exec is served.
    pub fn embeds_tool_exec(&self) -> bool {
        !self.no_embedded_tool_exec && self.tool_exec_addr.is_none()
    }

    /// The secrets key: `--secrets-key-file`, else the key itself in
    /// `CHORUS_SECRETS_KEY` (`env_key`, the variable's value), else
    /// `<data-dir>/secrets.key`, made when missing.
    pub fn secrets_key(&self, env_key: Option<String>) -> KeySource {
        let value = env_key.filter(|v| !v.trim().is_empty());
        match (&self.secrets_key_file, value) {
            (Some(path), _) => KeySource::File {
                path: path.clone(),
                create: false,
            },
            (None, Some(base64)) => KeySource::Value {
                base64,
                var: SECRETS_KEY_VAR,
            },
            (None, None) => KeySource::default_file(&self.data_dir),
        }
    }

    /// Checks what clap cannot: the combinations. The message says what to fix.
    ///
    /// # Errors
    /// The settings cannot work together.
    pub fn validate(&self) -> Result<(), String> {
        // Port 0: each listener gets a port of the system's choosing.
        if self.embeds_tool_exec()
            && self.tool_exec_listen == self.listen
            && self.listen.port() != 0
        {
            return Err(format!(
                "--listen and --tool-exec-listen are both {}: give the embedded tool-exec another address, or --no-embedded-tool-exec",
                self.listen
            ));
        }
        if let Some(id) = &self.replica_id {
            crate::starting::check_replica_id(id)?;
        }
        KeyReferenceRules::new(
            self.provider_key_dir.as_deref(),
            &self.provider_key_env_prefix,
        )?;
        if let Some(path) = &self.chorus_tools
            && path.as_os_str().is_empty()
        {
            return Err("--chorus-tools is empty: name the chorus-tools binary".to_owned());
        }
        Ok(())
    }

    /// The configuration `run` takes, with `signer`, the embedded tool-exec's
    /// listener (when it is served) and the secrets key `secrets_key`; `cwd`
    /// is the default workspace root.
    ///
    /// # Errors
    /// A path cannot be made absolute.
    pub fn config(
        &self,
        signer: chorus_run_token::RunTokenSigner,
        embedded_tool_exec: Option<EmbeddedToolExec>,
        secrets_key: KeySource,
        cwd: &Path,
    ) -> anyhow::Result<OrchestratorConfig> {
        let mut config = OrchestratorConfig {
            embedded_tool_exec,
            tool_exec_addr: self.tool_exec_addr.clone(),
            tool_exec_mcp_url: self.tool_exec_mcp_url.clone(),
            sandbox: self.sandbox.config(),
            serve: self.serve.config(),
            admin_key_file: Some(self.admin_key_file()),
            tool_exec_key_file: self.tool_exec_key_file.clone(),
            secrets_key,
            tls: self.tls.server(),
            peers: self.tls.peers().map_err(anyhow::Error::msg)?,
            replica_id: Some(self.replica_id().map_err(anyhow::Error::msg)?),
            advertise_addr: self.advertise_addr.clone(),
            lease: Duration::from_secs(self.lease_secs),
            database_wait: Duration::from_secs(self.database_wait_secs),
            ..OrchestratorConfig::new(self.database_url(), signer, &self.data_dir)
        };
        let allowed = if self.workspace_roots.is_empty() {
            vec![cwd.to_owned()]
        } else {
            self.workspace_roots.clone()
        };
        // The orchestrator's own places are never workspaces (the secrets key
        // file is added by `run`).
        let protected = [
            self.data_dir.clone(),
            self.runs_dir(),
            self.run_token_keys(),
            self.admin_key_file(),
        ];
        config.workspace_roots = RootPolicy::new(&allowed, &protected);
        config.key_references = KeyReferenceRules::new(
            self.provider_key_dir.as_deref(),
            &self.provider_key_env_prefix,
        )
        .map_err(anyhow::Error::msg)?;
        config.push_networks =
            crate::domain::push::PushNetworks::parse(&self.a2a_push_allow_networks)
                .map_err(|e| anyhow::anyhow!("--a2a-push-allow-network: {e}"))?;
        if let Some(file) = &self.prices {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the price table {}", file.display()))?;
            config.prices = crate::domain::Prices::parse(&text)
                .with_context(|| format!("the price table {}", file.display()))?;
        }
        let runner = &mut config.runner;
        runner.tls_ca = self
            .tls
            .tls_ca
            .as_ref()
            .map(std::path::absolute)
            .transpose()
            .context("resolving --tls-ca")?;
        if let Some(path) = &self.chorus_tools {
            runner.chorus_tools = std::path::absolute(path)
                .with_context(|| format!("resolving {}", path.display()))?;
        }
        runner.claude_bin.clone_from(&self.claude_bin);
        runner.opencode_bin.clone_from(&self.opencode_bin);
        runner.run_timeout = Duration::from_secs(self.run_timeout_secs.max(1));
        runner.handoff_timeout = Duration::from_secs(self.handoff_timeout_secs.max(1));
        runner.max_running_runs = usize::try_from(self.max_running_runs).unwrap_or(usize::MAX);
        runner.pass_env.extend(
            self.agent_pass_env
                .iter()
                .filter(|n| !n.is_empty())
                .cloned(),
        );
        runner.keep_run_dirs = self.keep_run_dirs;
        runner.cli_read_only.clone_from(&self.agent_read_only_path);
        let runs_dir = self.runs_dir();
        runner.runs_dir = std::path::absolute(&runs_dir)
            .with_context(|| format!("resolving {}", runs_dir.display()))?;
        Ok(config)
    }

    /// What `--print-config` shows beside the parsed values: the places that
    /// follow from the data directory, the database password hidden, and
    /// where the secrets key comes from (`env_key`: whether
    /// `CHORUS_SECRETS_KEY` is set).
    pub fn render(&self, cwd: &Path, env_key: bool) -> Render<'static> {
        let path = |p: PathBuf| p.display().to_string();
        let mut derived = vec![
            ("database-url", self.database_url(), "<data-dir>/chorus.db"),
            (
                "run-token-keys",
                path(self.run_token_keys()),
                "<data-dir>/run-token-keys.json",
            ),
            ("runs-dir", path(self.runs_dir()), "<data-dir>/runs"),
            (
                "admin-key-file",
                path(self.admin_key_file()),
                "<data-dir>/admin.key",
            ),
            (
                "workspace-roots",
                path(cwd.to_owned()),
                "the directory it starts in",
            ),
        ];
        if let Some(tools) = crate::execution::RunnerConfig::new(&self.data_dir)
            .chorus_tools
            .to_str()
        {
            derived.push((
                "chorus-tools",
                tools.to_owned(),
                "next to this executable, else on PATH",
            ));
        }
        let secrets = match (&self.secrets_key_file, env_key) {
            (Some(file), _) => format!(
                "the secrets key: the file {} (its content hidden)",
                file.display()
            ),
            (None, true) => format!("the secrets key: {SECRETS_KEY_VAR} (hidden)"),
            (None, false) => format!(
                "the secrets key: {} (made when missing; {SECRETS_KEY_VAR} unset)",
                self.data_dir.join(SECRETS_KEY_FILE).display()
            ),
        };
        Render {
            derived,
            urls: vec!["database-url"],
            notes: vec![secrets],
            ..Render::default()
        }
    }
}

#[cfg(test)]
mod tests;
