//! What the CLI's end-to-end tests share: an orchestrator on a fake model
//! with a workspace `demo` (a [`Stage`]), a tmux server of a test's own
//! ([`Tmux`]), and the model's steps they script.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::Client;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

pub const CHORUS: &str = env!("CARGO_BIN_EXE_chorus");

pub fn questions() -> Step {
    Step::tool_call(
        "planner-output",
        json!({"type": "questions", "questions": ["Which greeting?", "For whom?"]}),
    )
}

pub fn plan() -> Step {
    Step::tool_call(
        "planner-output",
        json!({
            "type": "plan",
            "summary": "Write hello.txt",
            "requirements": ["a greeting"],
            "acceptanceCriteria": ["hello.txt exists"],
            "plan": ["create the file", "report"],
            "assignedAgent": "writer",
        }),
    )
}

pub fn report(status: &str, summary: &str) -> Step {
    Step::tool_call(
        "completion-report",
        json!({"status": status, "summary": summary, "output": summary}),
    )
}

/// An orchestrator, a workspace `demo` whose planner and writer run on the
/// fake model, and a key file only its owner reads.
pub struct Stage {
    pub orchestrator: Orchestrator,
    pub model: FakeOpenAi,
    pub root: tempfile::TempDir,
    pub dir: tempfile::TempDir,
    pub key_file: PathBuf,
}

impl Stage {
    pub async fn new(steps: Vec<Step>) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let orchestrator = Orchestrator::for_api_agents(dir.path()).await;
        let model = FakeOpenAi::start(steps).await;
        let root = tempfile::tempdir().expect("root");
        let mut client: Client = orchestrator.client().await;
        let workspace = chorus_tests::agents::workspace(&mut client, "demo", root.path()).await;
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: workspace.id.clone(),
                name: "model".into(),
                kind: pb::ProviderKind::OpenaiCompatible.into(),
                base_url: model.base_url(),
                model: "fake-model".into(),
                ..Default::default()
            })
            .await
            .expect("provider");
        client
            .update_workspace(pb::UpdateWorkspaceRequest {
                limits: None,
                id: workspace.id.clone(),
                name: None,
                system_provider: Some("model".into()),
                ..Default::default()
            })
            .await
            .expect("system provider");
        let key_file = dir.path().join("operator.key");
        std::fs::write(&key_file, format!("{}\n", orchestrator.admin_key)).expect("key file");
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("chmod");
        Self {
            orchestrator,
            model,
            root,
            dir,
            key_file,
        }
    }

    /// The environment `chorus` reads its address and key from.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "CHORUS_ADDRESS",
                format!("http://{}", self.orchestrator.addr),
            ),
            ("CHORUS_API_KEY_FILE", self.key_file.display().to_string()),
            (
                "CHORUS_CONFIG",
                self.dir.path().join("none.toml").display().to_string(),
            ),
            ("NO_COLOR", "1".to_owned()),
        ]
    }

    /// [`Self::env`] as `NAME=value` words for a shell (`env {words} chorus …`).
    pub fn env_words(&self) -> String {
        self.env()
            .iter()
            .map(|(k, v)| format!("{k}={} ", shell_quote(v)))
            .collect()
    }

    /// Runs `chorus args` with no terminal: its exit code and output.
    pub async fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_with(args, &[]).await
    }

    /// [`Self::run`] with `env` over the stage's environment.
    pub async fn run_with(&self, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
        let output = tokio::process::Command::new(CHORUS)
            .args(args)
            .envs(self.env())
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run chorus");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

/// A tmux server of its own, killed when dropped.
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    /// None (the test is skipped) when tmux is missing, unless CI requires it.
    pub fn start(command: &str, cwd: &Path) -> Option<Self> {
        if std::process::Command::new("tmux")
            .arg("-V")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("CHORUS_TEST_REQUIRE_TMUX").is_none(),
                "tmux is not installed and CHORUS_TEST_REQUIRE_TMUX is set: install it (apt-get install tmux)"
            );
            eprintln!("skipped: tmux is not installed (apt-get install tmux)");
            return None;
        }
        // One server per test: tests run at once in this process.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmux = Self {
            socket: format!("chorus-cli-test-{}-{n}", std::process::id()),
        };
        let started = std::process::Command::new("tmux")
            .args([
                "-L",
                &tmux.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "80",
                "-c",
            ])
            .arg(cwd)
            .arg(command)
            .status()
            .expect("tmux new-session");
        assert!(started.success(), "tmux new-session failed");
        Some(tmux)
    }

    pub fn screen(&self) -> String {
        let out = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-J", "-S", "-200"])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn send(&self, keys: &str) {
        let sent = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-l", keys])
            .status()
            .expect("send-keys");
        assert!(sent.success());
        let enter = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "Enter"])
            .status()
            .expect("send-keys Enter");
        assert!(enter.success());
    }

    /// Waits until the screen shows `text` `n` times.
    pub async fn wait_for_count(&self, text: &str, n: usize) -> String {
        loop {
            let screen = self.wait_for(text).await;
            if screen.matches(text).count() >= n {
                return screen;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the screen shows `text` (a bound, not a timing: the
    /// screen is polled until then).
    pub async fn wait_for(&self, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the terminal never showed '{text}'; it shows:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The command lines of every process on the machine.
pub fn command_lines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .collect()
}

pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}
