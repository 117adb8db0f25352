//! Helpers shared by the process tests.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use chorus_sandbox::SandboxConfig;
use chorus_sandbox::testing::{TEST_UID, give_to_test_user, running_as_root};

use chorus_run_token::RunGrant;
use chorus_tool_exec::context::ToolOutcome;
use chorus_tool_exec::{Limits, ToolError, ToolRunner};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A runner whose processes run in an enforced sandbox, its shutdown token, and
/// a workspace in a temporary directory owned by the test user (sandboxed
/// programs run as the workspace's owner), for a run of its own (the run's
/// limits bound its calls together).
pub struct Harness {
    pub runner: ToolRunner,
    pub shutdown: CancellationToken,
    pub root: PathBuf,
    pub run_id: String,
    /// The egress list of a run with the network grant.
    pub egress: Vec<String>,
    _dir: tempfile::TempDir,
}

/// Numbers the harnesses of this test binary (each its own run).
static HARNESSES: AtomicU64 = AtomicU64::new(0);

impl Harness {
    pub async fn new() -> Self {
        Self::with_limits(Limits::default()).await
    }

    pub async fn with_limits(limits: Limits) -> Self {
        Self::with_sandbox(limits, SandboxConfig::default()).await
    }

    /// A harness whose sandbox is configured as `sandbox` says.
    pub async fn with_sandbox(limits: Limits, sandbox: SandboxConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical root");
        give_to_test_user(&root);
        let shutdown = CancellationToken::new();
        let processes = chorus_sandbox::testing::enforced(sandbox).await;
        let run_id = format!(
            "run-{}-{}",
            std::process::id(),
            HARNESSES.fetch_add(1, Ordering::Relaxed)
        );
        Self {
            runner: ToolRunner::new(limits, processes, shutdown.clone()),
            shutdown,
            root,
            run_id,
            egress: Vec::new(),
            _dir: dir,
        }
    }

    pub fn grant(&self) -> RunGrant {
        self.grant_at(&self.root)
    }

    pub fn grant_at(&self, root: &Path) -> RunGrant {
        RunGrant {
            run_id: self.run_id.clone(),
            task_id: "task-1".to_owned(),
            agent: "coder".to_owned(),
            tools: chorus_catalog::TOOLS
                .iter()
                .map(|t| t.name.to_owned())
                .collect(),
            root: root.to_owned(),
            egress: Vec::new(),
            epoch: 0,
        }
    }

    pub async fn call(&self, tool: &str, args: Value) -> Result<ToolOutcome, ToolError> {
        self.runner.execute(self.grant(), tool, args).await
    }

    /// A call by a run that also holds the `network` grant, with the
    /// harness's egress list.
    pub async fn call_with_network(
        &self,
        tool: &str,
        args: Value,
    ) -> Result<ToolOutcome, ToolError> {
        self.runner.execute(self.network_grant(), tool, args).await
    }

    /// The harness's grant with the `network` grant and its egress list.
    fn network_grant(&self) -> RunGrant {
        let mut grant = self.grant();
        grant.tools.push(chorus_catalog::NETWORK.to_owned());
        grant.egress.clone_from(&self.egress);
        grant
    }

    /// [`Self::call_with_network`] whose proxy asks `questions` before each
    /// connection the egress list allows.
    pub async fn call_asking(
        &self,
        questions: chorus_sandbox::NetworkQuestions,
        tool: &str,
        args: Value,
    ) -> Result<ToolOutcome, ToolError> {
        let grant = self.network_grant();
        let watched = chorus_tool_exec::runner::Watched {
            network_questions: Some(questions),
            ..Default::default()
        };
        self.runner
            .execute_watched(grant, tool, args, &CancellationToken::new(), &watched)
            .await
    }

    pub async fn ok(&self, tool: &str, args: Value) -> ToolOutcome {
        self.call(tool, args)
            .await
            .unwrap_or_else(|e| panic!("{tool} failed: {e}"))
    }

    pub fn write(&self, rel: &str, content: &str) {
        write(&self.root, rel, content);
        give_to_test_user(&self.root);
    }
}

/// A server in a test network namespace of its own, serving `f.txt`
/// ("outside\n") over HTTP on port 8080; its namespace (kept while it
/// serves) and address. Needs root.
pub async fn outside_server() -> (
    (chorus_sandbox::testing::TestNet, tempfile::TempDir),
    std::net::Ipv4Addr,
) {
    let files = tempfile::tempdir().expect("files");
    std::fs::write(files.path().join("f.txt"), "outside\n").expect("write");
    let mut net = chorus_sandbox::testing::TestNet::create();
    net.serve_files(files.path(), 8080).await;
    let ip = net.ip;
    ((net, files), ip)
}

pub fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, content).expect("write");
}

/// Runs the test's own git (not the tool's), isolated from the user's and the
/// system's configuration; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_command(dir, args).output().expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn git_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    // As the workspace's owner, as the tools' git runs.
    if running_as_root() {
        cmd.uid(TEST_UID).gid(TEST_UID).env("HOME", "/tmp");
    }
    cmd.current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    cmd
}

/// `git init` on branch main with a local identity (which wins over any global
/// one the tool's git may see) and no signing.
pub fn init_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    configure(dir);
}

pub fn configure(dir: &Path) {
    git(dir, &["config", "user.name", "Test User"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    git(dir, &["config", "commit.gpgSign", "false"]);
}

pub fn in_band_code(outcome: &ToolOutcome) -> Option<&str> {
    outcome.error.as_ref().map(|e| e.code.as_str())
}
