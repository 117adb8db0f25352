//! How agents are run: the runner's settings, the API loop's limits, the
//! environment agent processes get, where a CLI is installed, and the layout
//! of a run's directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Limits of API runs.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// Model calls per attempt.
    pub max_turns: u32,
    /// One HTTP request, connection to last byte.
    pub request_timeout: Duration,
    /// Retries of one request after 429, 5xx or a connection failure.
    pub max_retries: u32,
    /// First backoff; it doubles on each retry.
    pub backoff: Duration,
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            max_turns: 50,
            request_timeout: Duration::from_secs(300),
            max_retries: 4,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Environment variables an agent process gets from the orchestrator's own
/// environment when they are set (besides PATH, which is extended): locale,
/// the credentials the CLIs read, and proxies and certificates
/// ([`chorus_sandbox::NETWORK_ENV`]).
pub const DEFAULT_PASS_ENV: [&str; 10] = [
    "LANG",
    "LC_ALL",
    "TZ",
    "USER",
    "LOGNAME",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
];

/// Default of [`RunnerConfig::max_running_runs`] (`--max-running-runs`).
pub const DEFAULT_MAX_RUNNING_RUNS: usize = 1024;

/// How agents are run.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The chorus-tools binary agents call (an absolute path without spaces: it is
    /// written into the CLI's permission rule).
    pub chorus_tools: PathBuf,
    /// Where each run gets its own directory (HOME, generated config).
    pub runs_dir: PathBuf,
    /// The Claude Code and OpenCode executables.
    pub claude_bin: PathBuf,
    pub opencode_bin: PathBuf,
    /// How long a run may take when StartTask or PlanTask does not say (the
    /// clock stops while the run waits for a handoff).
    pub run_timeout: Duration,
    /// How long a handoff may take when its caller does not say.
    pub handoff_timeout: Duration,
    /// Between SIGTERM and SIGKILL when a run's processes are stopped.
    pub kill_grace: Duration,
    /// Names of environment variables passed on to agent processes.
    pub pass_env: Vec<String>,
    pub api: ApiLimits,
    /// Keep each run's directory after it ends (for debugging).
    pub keep_run_dirs: bool,
    /// More paths CLI agents may read (a runtime the CLI needs outside the
    /// system directories and its own installation).
    pub cli_read_only: Vec<PathBuf>,
    /// The CA of the services' TLS certificates: agents get it as CHORUS_TLS_CA
    /// (readable in their sandbox), and API agents' tool calls use it. None:
    /// the services are plaintext, or their certificates chain to the system's
    /// roots.
    pub tls_ca: Option<PathBuf>,
    /// This process's fence directory (see [`super::fence`]); None: CLI agents run
    /// without a fence (tests of everything else).
    pub fence_dir: Option<PathBuf>,
    /// Runs this process drives at once (top-level runs; a handoff's child
    /// works in its parent's place): one more waits, `run_queued`, until one
    /// ends.
    pub max_running_runs: usize,
}

impl RunnerConfig {
    /// Defaults: chorus-tools next to this executable (else the first on PATH),
    /// run directories under `data_dir/runs`, `claude` and `opencode` from PATH,
    /// 10-minute runs.
    pub fn new(data_dir: &Path) -> Self {
        let sibling = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join("chorus-tools")));
        let on_path = || {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join("chorus-tools"))
                .find(|candidate| candidate.is_file())
        };
        let chorus_tools = match sibling {
            Some(path) if path.is_file() => path,
            other => on_path()
                .or(other)
                .unwrap_or_else(|| PathBuf::from("chorus-tools")),
        };
        Self {
            chorus_tools,
            runs_dir: data_dir.join("runs"),
            claude_bin: PathBuf::from("claude"),
            opencode_bin: PathBuf::from("opencode"),
            run_timeout: Duration::from_secs(600),
            handoff_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            pass_env: DEFAULT_PASS_ENV
                .iter()
                .chain(&chorus_sandbox::NETWORK_ENV)
                .chain(&chorus_telemetry::EXPORT_ENV)
                .map(|s| (*s).to_owned())
                .collect(),
            api: ApiLimits::default(),
            keep_run_dirs: false,
            cli_read_only: Vec::new(),
            tls_ca: None,
            fence_dir: None,
            max_running_runs: DEFAULT_MAX_RUNNING_RUNS,
        }
    }

    /// The longest timeout a handoff may ask for: an hour, or the default
    /// handoff timeout when that is longer.
    pub fn max_handoff_timeout(&self) -> Duration {
        self.handoff_timeout.max(Duration::from_secs(3600))
    }

    /// Checks what can be checked at start-up.
    ///
    /// # Errors
    /// chorus-tools is missing, relative or has a space in its path.
    pub fn validate(&self) -> Result<(), String> {
        let path = &self.chorus_tools;
        if !path.is_absolute() || path.to_string_lossy().chars().any(char::is_whitespace) {
            return Err(format!(
                "the chorus-tools path '{}' must be absolute and contain no spaces (it goes into the CLI's permission rule)",
                path.display()
            ));
        }
        if !path.is_file() {
            return Err(format!(
                "chorus-tools not found at '{}'; build it (cargo build --release -p chorus-tools) or pass --chorus-tools",
                path.display()
            ));
        }
        Ok(())
    }
}

/// Where a CLI program is installed, for its sandbox: the `node_modules` tree
/// it belongs to (an npm install: the packages it needs are there), else its
/// directory. `program` without a slash is looked up on `path`.
pub fn installation(program: &Path, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let found = if program.components().count() > 1 {
        program.to_path_buf()
    } else {
        std::env::split_paths(path?)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())?
    };
    let real = std::fs::canonicalize(found).ok()?;
    real.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .or_else(|| real.parent())
        .map(Path::to_path_buf)
}

/// The names, in a run directory, of the run's HOME, its TMPDIR and a CLI's
/// (empty) working directory.
pub const HOME_DIR: &str = "home";
pub const TMP_DIR: &str = "tmp";
pub const WORK_DIR: &str = "work";

/// A run's HOME.
pub fn home_dir(run_dir: &Path) -> PathBuf {
    run_dir.join(HOME_DIR)
}

/// A run's TMPDIR.
pub fn tmp_dir(run_dir: &Path) -> PathBuf {
    run_dir.join(TMP_DIR)
}

/// A CLI's working directory: empty, in the run directory.
pub fn work_dir(run_dir: &Path) -> PathBuf {
    run_dir.join(WORK_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_get_where_spans_go_but_never_the_collectors_credentials() {
        let passed = RunnerConfig::new(Path::new("/data")).pass_env;
        for name in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER"] {
            assert!(passed.iter().any(|p| p == name), "{name} is not passed");
        }
        for secret in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_SERVICE_NAME",
            "CHORUS_SECRETS_KEY",
            "CHORUS_DATABASE_URL",
        ] {
            assert!(!passed.iter().any(|p| p == secret), "{secret} is passed");
        }
    }

    #[test]
    fn a_cli_installed_by_npm_brings_its_node_modules_tree() {
        let dir = tempfile::tempdir().expect("dir");
        let modules = dir.path().join("node_modules");
        let package = modules.join("cli/bin");
        std::fs::create_dir_all(&package).expect("package");
        std::fs::create_dir_all(modules.join(".bin")).expect(".bin");
        std::fs::write(package.join("cli.js"), "").expect("cli");
        std::os::unix::fs::symlink("../cli/bin/cli.js", modules.join(".bin/cli")).expect("link");
        let modules = modules.canonicalize().expect("canonical");
        assert_eq!(
            installation(&dir.path().join("node_modules/.bin/cli"), None),
            Some(modules.clone())
        );
        // Found on PATH when named without a slash.
        let path = std::ffi::OsString::from(dir.path().join("node_modules/.bin"));
        assert_eq!(installation(Path::new("cli"), Some(&path)), Some(modules));
        // Elsewhere: its own directory.
        let lone = dir.path().join("lone");
        std::fs::write(&lone, "").expect("lone");
        assert_eq!(
            installation(&lone, None),
            Some(dir.path().canonicalize().expect("canonical"))
        );
        assert_eq!(installation(Path::new("no-such-cli"), Some(&path)), None);
    }
}
