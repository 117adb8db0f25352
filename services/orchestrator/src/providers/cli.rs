//! What a CLI provider's command is built from: the program, chorus-tools,
//! the environment passed on, what its sandbox shows ([`CliSetup`]), and the command of one attempt in the run sandbox.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::RunContext;
use crate::execution::{
    Facilities, cli_network, home_dir, installation, process, tmp_dir, work_dir,
};

/// What a CLI provider needs besides the run: its program, chorus-tools, the
/// environment it passes on, and what its sandbox shows.
#[derive(Debug, Clone)]
pub struct CliSetup {
    pub program: PathBuf,
    pub chorus_tools: PathBuf,
    /// (name, value) taken from the orchestrator's environment.
    pub passed: Vec<(String, String)>,
    /// The orchestrator's PATH.
    pub path: Option<OsString>,
    /// How long the CLI's own shell tool lets a command run: long enough for the
    /// longest handoff.
    pub bash_timeout: Duration,
    /// What the CLI may read besides the system: chorus-tools, the CLI's own
    /// installation, the configured paths, the services' CA.
    pub read_only: Vec<PathBuf>,
    /// The services' CA (CHORUS_TLS_CA for chorus-tools).
    pub tls_ca: Option<PathBuf>,
    /// The replica's fence: the CLI dies with it.
    pub fence: Option<PathBuf>,
}

impl CliSetup {
    /// What a CLI provider's command is built from, for `program`: what it
    /// may read (chorus-tools, its own installation, the configured paths,
    /// the services' CA), the variables passed on, and its shell tool's
    /// timeout (long enough for the longest handoff).
    pub fn new(facilities: &Facilities, program: &Path) -> Self {
        let config = facilities.config();
        let path = std::env::var_os("PATH");
        let mut read_only = vec![config.chorus_tools.clone()];
        read_only.extend(installation(program, path.as_deref()));
        read_only.extend(config.cli_read_only.iter().cloned());
        read_only.extend(config.tls_ca.iter().cloned());
        Self {
            program: program.to_path_buf(),
            chorus_tools: config.chorus_tools.clone(),
            passed: config
                .pass_env
                .iter()
                .filter_map(|name| Some((name.clone(), std::env::var(name).ok()?)))
                .collect(),
            path,
            bash_timeout: config.max_handoff_timeout() + Duration::from_secs(60),
            read_only,
            tls_ca: config.tls_ca.clone(),
            fence: facilities
                .fence()
                .map(crate::execution::fence::ReplicaFence::path),
        }
    }

    /// The environment every CLI agent process starts from: its own HOME and
    /// TMPDIR in the run directory, PATH with chorus-tools' directory first, the
    /// passed variables, and the run's token, addresses and ids.
    pub fn base_env(&self, ctx: &RunContext) -> Vec<(String, String)> {
        let tools_dir = self
            .chorus_tools
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        let system_path = self.path.as_ref().map_or_else(
            || "/usr/local/bin:/usr/bin:/bin".to_owned(),
            |p| p.to_string_lossy().into_owned(),
        );
        let mut env = vec![
            ("PATH".to_owned(), format!("{tools_dir}:{system_path}")),
            (
                "HOME".to_owned(),
                home_dir(&ctx.run_dir).display().to_string(),
            ),
            (
                "TMPDIR".to_owned(),
                tmp_dir(&ctx.run_dir).display().to_string(),
            ),
            ("TERM".to_owned(), "dumb".to_owned()),
            ("CHORUS_RUN_TOKEN".to_owned(), ctx.token.clone()),
            ("CHORUS_TOOLS_ADDR".to_owned(), ctx.tools_addr.clone()),
            (
                "CHORUS_ORCHESTRATOR_ADDR".to_owned(),
                ctx.orchestrator_addr.clone(),
            ),
            ("CHORUS_TASK_ID".to_owned(), ctx.task_id.to_string()),
            (
                "CHORUS_TOOLS".to_owned(),
                self.chorus_tools.display().to_string(),
            ),
        ];
        if let Some(ca) = &self.tls_ca {
            env.push(("CHORUS_TLS_CA".to_owned(), ca.display().to_string()));
        }
        // chorus-tools continues the run's trace.
        env.extend(chorus_telemetry::propagation::env_of(&ctx.span));
        env.extend(self.passed.iter().cloned());
        env
    }

    /// The command of one attempt: `args` and `env` in the run's sandbox, its
    /// working directory the run's empty `work` directory (the workspace is not
    /// visible to a CLI: every file it reaches goes through chorus-tools).
    pub fn command(
        &self,
        ctx: &RunContext,
        args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> process::CliCommand {
        let default_hosts = ctx.provider.provider().default_hosts(ctx.model.as_deref());
        let (network, env) = cli_network::confine(
            env,
            cli_network::CliReach {
                base_url: ctx.provider.base_url.as_deref(),
                default_hosts: &default_hosts,
                egress: ctx
                    .tools
                    .iter()
                    .any(|t| t == chorus_catalog::NETWORK)
                    .then_some(ctx.egress.as_slice()),
            },
        );
        process::CliCommand {
            program: self.program.clone(),
            args,
            env,
            cwd: work_dir(&ctx.run_dir),
            run_dir: ctx.run_dir.clone(),
            read_only: self.read_only.clone(),
            network,
            identity: ctx.identity,
            run: ctx.run_id.to_string(),
            fence: self.fence.clone(),
        }
    }
}
