//! The `chorus-tool-exec` binary as a process of its own (the two-service
//! shape), its port read from its log.

use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncBufReadExt, BufReader};

/// A running `chorus-tool-exec`.
pub struct ToolExecProcess {
    child: tokio::process::Child,
    pub addr: SocketAddr,
}

impl ToolExecProcess {
    /// Starts the binary on a port of the system's choosing, checking runs with
    /// the orchestrator at `orchestrator` with the service key in `key_file`,
    /// and waits until it serves.
    pub async fn spawn(orchestrator: SocketAddr, key_file: &Path) -> Self {
        Self::spawn_configured(orchestrator, key_file, &[], &[]).await
    }

    /// [`Self::spawn`] with `extra` arguments.
    pub async fn spawn_with(orchestrator: SocketAddr, key_file: &Path, extra: &[&str]) -> Self {
        Self::spawn_configured(orchestrator, key_file, extra, &[]).await
    }

    /// [`Self::spawn`] with `env` added to its environment.
    pub async fn spawn_with_env(
        orchestrator: SocketAddr,
        key_file: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn_configured(orchestrator, key_file, &[], env).await
    }

    async fn spawn_configured(
        orchestrator: SocketAddr,
        key_file: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut child =
            tokio::process::Command::new(crate::built_bin("chorus-tool-exec", "chorus-tool-exec"))
                .envs(env.iter().copied())
                .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
                .arg("--orchestrator-addr")
                .arg(orchestrator.to_string())
                .arg("--orchestrator-key-file")
                .arg(key_file)
                .arg("--sandbox-launcher")
                .arg(chorus_sandbox::testing::built_launcher())
                .args(extra)
                .env("RUST_LOG", "info")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start chorus-tool-exec");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = Vec::new();
        let addr = loop {
            let Some(line) = lines.next_line().await.expect("read the log") else {
                panic!(
                    "chorus-tool-exec exited before serving; its log:\n{}",
                    seen.join("\n")
                );
            };
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if entry["fields"]["message"] == "tool-exec serving"
                && let Some(addr) = entry["fields"]["addr"]
                    .as_str()
                    .and_then(|a| a.parse().ok())
            {
                break addr;
            }
            seen.push(line);
        };
        // Keep reading the log so the process never blocks on a full pipe;
        // with CHORUS_TEST_SHOW_LOGS set, a failing test shows it.
        let show = std::env::var_os("CHORUS_TEST_SHOW_LOGS").is_some();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if show {
                    eprintln!("chorus-tool-exec: {line}");
                }
            }
        });
        // It serves; its health is SERVING only once its orchestrator answers
        // (which a test may start after it): see `wait_serving`.
        Self { child, addr }
    }

    /// Stops it with SIGTERM and waits for it.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.child.wait().await.expect("wait")
    }

    /// Sends it `signal`.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self
            .child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .expect("running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("signal");
    }

    /// Waits for it to exit.
    pub async fn wait(mut self) -> std::process::ExitStatus {
        self.child.wait().await.expect("wait")
    }
}
