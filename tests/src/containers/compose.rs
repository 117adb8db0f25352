//! deploy/compose.yaml under podman-compose, as the container tests run it.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Cleanup, logs, podman, run, try_run};

/// deploy/compose.yaml with the test's override, under podman-compose.
pub struct Compose {
    pub project: String,
    pub files: [String; 2],
    pub env: Vec<(String, String)>,
}

impl Compose {
    fn command(&self, args: &[&str]) -> (Vec<String>, Vec<(String, String)>) {
        let mut all = vec!["-p".to_owned(), self.project.clone()];
        for file in &self.files {
            all.push("-f".to_owned());
            all.push(file.clone());
        }
        all.extend(args.iter().map(|a| (*a).to_owned()));
        (all, self.env.clone())
    }

    fn program() -> String {
        std::env::var("PODMAN_COMPOSE").unwrap_or_else(|_| "podman-compose".to_owned())
    }

    pub fn run(&self, args: &[&str]) -> String {
        let (args, env) = self.command(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        run(&Self::program(), &args, &env)
    }

    /// `podman-compose down -v` when `cleanup` is dropped.
    pub fn down_on_drop(&self, cleanup: &mut Cleanup) {
        let (args, env) = self.command(&["down", "-v", "-t", "10"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        cleanup.push(&Self::program(), &args, &env);
    }

    /// The container of `service`.
    pub fn container(&self, service: &str) -> String {
        let project = format!("label=com.docker.compose.project={}", self.project);
        let service = format!("label=com.docker.compose.service={service}");
        let names = podman(&[
            "ps",
            "-a",
            "--filter",
            &project,
            "--filter",
            &service,
            "--format",
            "{{.Names}}",
        ]);
        names
            .lines()
            .next()
            .unwrap_or_else(|| panic!("no container for {service}"))
            .to_owned()
    }
}

/// Runs the compose file's own health check of `container` until it passes.
pub async fn wait_healthy(container: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let mut poll = tokio::time::interval(Duration::from_millis(500));
    loop {
        poll.tick().await;
        let out = try_run("podman", &["healthcheck", "run", container], &[]);
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{container} is not healthy after {within:?}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            logs(container)
        );
    }
}

/// The spans the collector stand-in printed.
pub fn spans(collector: &str) -> Vec<Value> {
    let out = try_run("podman", &["logs", collector], &[]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["signal"] == "span")
        .collect()
}
