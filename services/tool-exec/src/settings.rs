//! tool-exec's settings: one typed struct, from flags, environment variables
//! and the optional configuration file (defaults < file < environment <
//! flags; see `chorus_serve::config`), validated once at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use chorus_serve::config::{ConfigArgs, Render};
use chorus_serve::{ServeArgs, ServeConfig};

use crate::config::Limits;
use crate::sandbox::HardLinks;

/// Everything `chorus-tool-exec` is told at start.
#[derive(Debug, Clone, clap::Args)]
pub struct ToolExecSettings {
    /// Address to serve gRPC on.
    #[arg(
        long,
        env = "CHORUS_TOOL_EXEC_LISTEN",
        default_value = "127.0.0.1:50052"
    )]
    pub listen: SocketAddr,
    /// With --standalone: directory holding the run-token public keys when
    /// --public-key is not given. If it has no key set yet, a development set is
    /// created there.
    #[arg(long, env = "CHORUS_DATA_DIR", default_value = ".chorus")]
    pub data_dir: PathBuf,
    /// With --standalone: PEM file with the run-token public key(s) (Ed25519,
    /// SPKI). With an orchestrator the keys are fetched from it.
    #[arg(long, env = "CHORUS_RUN_TOKEN_PUBLIC_KEY")]
    pub public_key: Option<PathBuf>,
    /// Largest file (bytes) tools will read.
    #[arg(long, env = "CHORUS_MAX_FILE_BYTES", default_value_t = Limits::default().max_file_bytes)]
    pub max_file_bytes: u64,
    /// Largest content (bytes) tools will write.
    #[arg(long, env = "CHORUS_MAX_WRITE_BYTES", default_value_t = Limits::default().max_write_bytes)]
    pub max_write_bytes: u64,
    /// Largest tool output (bytes): read content, each bash stream, diff text.
    #[arg(long, env = "CHORUS_MAX_OUTPUT_BYTES", default_value_t = Limits::default().max_output_bytes)]
    pub max_output_bytes: usize,
    /// Default bash timeout in seconds.
    #[arg(long, env = "CHORUS_BASH_TIMEOUT_SECS", default_value_t = Limits::default().bash_default_timeout.as_secs())]
    pub bash_timeout_secs: u64,
    /// Largest bash timeout a call may ask for, in seconds.
    #[arg(long, env = "CHORUS_BASH_MAX_TIMEOUT_SECS", default_value_t = Limits::default().bash_max_timeout.as_secs())]
    pub bash_max_timeout_secs: u64,
    /// Deadline of every tool call, in seconds (bash and git calls get their own
    /// timeouts plus 10 s when that is longer).
    #[arg(long, env = "CHORUS_TOOL_TIMEOUT_SECS", default_value_t = Limits::default().tool_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub tool_timeout_secs: u64,
    /// Let file tools read regular files that have more than one hard link
    /// (refused by default: a link planted in a workspace can name a file
    /// outside it).
    #[arg(long, env = "CHORUS_ALLOW_HARD_LINKS")]
    pub allow_hard_links: bool,
    /// Orchestrator address (host:port): runs are checked with it before every tool
    /// call, every call is recorded in the task's history, and the run-token keys
    /// are fetched from it. Needs --orchestrator-key-file.
    #[arg(long, env = "CHORUS_ORCHESTRATOR_ADDR")]
    pub orchestrator_addr: Option<String>,
    /// File holding tool-exec's own API key (role tool-exec; an admin makes one
    /// with CreateApiKey), its credential with the orchestrator.
    #[arg(long, env = "CHORUS_ORCHESTRATOR_KEY_FILE")]
    pub orchestrator_key_file: Option<PathBuf>,
    /// Connections to the orchestrator, each made through
    /// --orchestrator-addr (a load balancer in front of replicas sends each
    /// to a replica) and following that replica's health: calls go round
    /// those whose replica serves, and one whose replica stops serving is
    /// made again.
    #[arg(long, env = "CHORUS_ORCHESTRATOR_CONNECTIONS", default_value_t = crate::gate::pool::DEFAULT_CONNECTIONS, value_parser = parse_connections)]
    pub orchestrator_connections: usize,
    /// Run without an orchestrator (development): run tokens alone decide, nothing
    /// is recorded, and an ended run's token keeps working until it expires.
    #[arg(long, env = "CHORUS_STANDALONE", conflicts_with = "orchestrator_addr")]
    pub standalone: bool,
    /// Log format.
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: chorus_telemetry::LogFormat,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,
    #[command(flatten)]
    pub sandbox: chorus_sandbox::cli::SandboxArgs,
    #[command(flatten)]
    pub tls: chorus_auth::cli::TlsArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Who checks runs and records calls, as the settings say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateSettings {
    /// The orchestrator at `addr`, called with the API key in `key_file` (None:
    /// the client certificate is the credential).
    Orchestrator {
        addr: String,
        key_file: Option<PathBuf>,
    },
    /// No orchestrator: run tokens alone decide (development).
    Standalone,
}

impl ToolExecSettings {
    /// Checks what clap cannot: the combinations. The message says what to fix.
    ///
    /// # Errors
    /// The settings cannot work together.
    pub fn validate(&self) -> Result<GateSettings, String> {
        if self.bash_timeout_secs > self.bash_max_timeout_secs {
            return Err(format!(
                "--bash-timeout-secs ({}) is larger than --bash-max-timeout-secs ({}): lower the first or raise the second",
                self.bash_timeout_secs, self.bash_max_timeout_secs
            ));
        }
        match (&self.orchestrator_addr, self.standalone) {
            (Some(addr), _) => match (&self.orchestrator_key_file, &self.tls.tls_client_cert) {
                (None, None) => Err(
                    "--orchestrator-addr needs --orchestrator-key-file: a file with tool-exec's API key (role tool-exec), made by an admin with CreateApiKey (or a client certificate: --tls-client-cert)".to_owned(),
                ),
                (key_file, _) => Ok(GateSettings::Orchestrator {
                    addr: addr.clone(),
                    key_file: key_file.clone(),
                }),
            },
            (None, true) => Ok(GateSettings::Standalone),
            (None, false) => Err(
                "tool-exec needs an orchestrator to check runs and record their tool calls: pass --orchestrator-addr and --orchestrator-key-file (or --standalone for development)".to_owned(),
            ),
        }
    }

    /// The limits of tool calls.
    pub fn limits(&self) -> Limits {
        Limits {
            max_file_bytes: self.max_file_bytes,
            max_write_bytes: self.max_write_bytes,
            max_output_bytes: self.max_output_bytes,
            bash_default_timeout: Duration::from_secs(self.bash_timeout_secs),
            bash_max_timeout: Duration::from_secs(self.bash_max_timeout_secs),
            tool_timeout: Duration::from_secs(self.tool_timeout_secs),
            hard_links: if self.allow_hard_links {
                HardLinks::Allow
            } else {
                HardLinks::Refuse
            },
            ..Limits::default()
        }
    }

    pub fn serve(&self) -> ServeConfig {
        self.serve.config()
    }

    /// What `--print-config` shows beside the parsed values.
    pub fn render(&self) -> Render<'static> {
        let mut render = Render::default();
        if self.standalone && self.public_key.is_none() {
            render.notes.push(format!(
                "standalone without public-key: the keys in {}, a development key set made there when missing",
                self.data_dir
                    .join(chorus_run_token::PUBLIC_KEY_FILE)
                    .display()
            ));
        }
        render
    }
}

/// `--orchestrator-connections`: 1 to 64.
fn parse_connections(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{text}': give a number of connections from 1 to 64"
        )),
    }
}
