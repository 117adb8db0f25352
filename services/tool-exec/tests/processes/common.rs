//! Helpers shared by the process tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use chorus_run_token::RunGrant;
use chorus_tool_exec::context::ToolOutcome;
use chorus_tool_exec::{Limits, ToolError, ToolRunner};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A runner, its shutdown token and a workspace in a temporary directory.
pub struct Harness {
    pub runner: ToolRunner,
    pub shutdown: CancellationToken,
    pub root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    pub fn with_limits(limits: Limits) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical root");
        let shutdown = CancellationToken::new();
        Self {
            runner: ToolRunner::new(limits, shutdown.clone()),
            shutdown,
            root,
            _dir: dir,
        }
    }

    pub fn grant(&self) -> RunGrant {
        self.grant_at(&self.root)
    }

    pub fn grant_at(&self, root: &Path) -> RunGrant {
        RunGrant {
            run_id: "run-1".to_owned(),
            task_id: "task-1".to_owned(),
            agent: "coder".to_owned(),
            tools: chorus_catalog::TOOLS
                .iter()
                .map(|t| t.name.to_owned())
                .collect(),
            root: root.to_owned(),
        }
    }

    pub async fn call(&self, tool: &str, args: Value) -> Result<ToolOutcome, ToolError> {
        self.runner.execute(self.grant(), tool, args).await
    }

    pub async fn ok(&self, tool: &str, args: Value) -> ToolOutcome {
        self.call(tool, args)
            .await
            .unwrap_or_else(|e| panic!("{tool} failed: {e}"))
    }

    pub fn write(&self, rel: &str, content: &str) {
        write(&self.root, rel, content);
    }
}

pub fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, content).expect("write");
}

/// True while `pid` exists and is not a zombie (a zombie has finished running; its
/// parent, possibly an init that never reaps, just has not collected it).
pub fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("");
    !matches!(state, "Z" | "X" | "x" | "")
}

/// Every whole number printed on its own line.
pub fn pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
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
