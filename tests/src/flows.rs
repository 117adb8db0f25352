//! Set-up shared by the handoff flow tests: an orchestrator whose CLI agents are
//! the fake CLI, a workspace with a Claude Code and an OpenCode provider, script
//! steps, and a compact view of a run tree's history.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;

use crate::agents::{Client, data, use_provider, wait_for};
use crate::db::TestDatabase;
use crate::orchestrator::Orchestrator;

pub async fn orchestrator(data_dir: &Path, db: &TestDatabase) -> Orchestrator {
    Orchestrator::with_fake_cli(data_dir, &db.url, |config| {
        // What the fake CLIs write is read from their run directories.
        config.runner.keep_run_dirs = true;
    })
    .await
}

/// A workspace at `root` with a Claude Code and an OpenCode provider (both the
/// fake CLI); the seeded writing agents use Claude Code.
pub async fn workspace(client: &mut Client, root: &Path) -> pb::Workspace {
    let workspace = crate::agents::workspace(client, "team", root).await;
    for (name, kind) in [
        ("claude", pb::ProviderKind::ClaudeCode),
        ("opencode", pb::ProviderKind::Opencode),
    ] {
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: workspace.id.clone(),
                name: name.into(),
                kind: kind.into(),
                ..Default::default()
            })
            .await
            .expect("provider");
    }
    use_provider(
        client,
        &workspace,
        &["writer-workflow", "writer", "editor"],
        "claude",
    )
    .await;
    workspace
}

/// An orchestrator on one database (keeping run directories, where the fake
/// CLIs write: see `Orchestrator::run_file`) with a workspace and its root.
pub struct Setup {
    pub orchestrator: Orchestrator,
    pub client: Client,
    pub ws: pb::Workspace,
    pub root: tempfile::TempDir,
}

pub async fn setup(data_dir: &Path, db: &TestDatabase) -> Setup {
    setup_configured(data_dir, db, |_| {}).await
}

/// [`setup`] with the orchestrator's configuration adjusted by `configure`.
pub async fn setup_configured(
    data_dir: &Path,
    db: &TestDatabase,
    configure: impl FnOnce(&mut chorus_orchestrator::server::OrchestratorConfig),
) -> Setup {
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::with_fake_cli(data_dir, &db.url, |config| {
        // What the fake CLIs write is read from their run directories.
        config.runner.keep_run_dirs = true;
        configure(config);
    })
    .await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, root.path()).await;
    Setup {
        orchestrator,
        client,
        ws,
        root,
    }
}

/// A fake CLI step saving the last call's exit code and output to `name` in
/// its run directory.
pub fn save(name: &str) -> String {
    format!("fake: save {name}")
}

/// A fake CLI step starting children that try every way out of the run, each
/// with `marker` as an argument, then waiting forever.
pub fn stubborn(marker: &str) -> String {
    format!("fake: stubborn {marker}")
}

/// A fake CLI step recording its argv and environment to `name` in its run
/// directory.
pub fn record(name: &str) -> String {
    format!("fake: record {name}")
}

/// `kind:agent[:tool or status]` for the events that tell the story of a run tree.
pub fn story(events: &[pb::TaskEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "status_changed"
                    | "agent_started"
                    | "agent_completed"
                    | "agent_handoff_started"
                    | "agent_handoff_completed"
                    | "completion_report_submitted"
                    | "tool_executed"
                    | "run_failed"
                    | "run_canceled"
            )
        })
        .map(|e| {
            let d = data(e);
            let mut line = e.kind.clone();
            if let Some(agent) = d["agent"].as_str() {
                line = format!("{line}:{agent}");
            }
            for key in ["tool", "to"] {
                if let Some(v) = d[key].as_str() {
                    line = format!("{line}:{v}");
                }
            }
            line
        })
        .collect()
}

pub async fn wait_stubborn(client: &mut Client, task: &str, agent: &str) -> Vec<pb::TaskEvent> {
    wait_for(client, task, |e| {
        let d = data(e);
        e.kind == "agent_progress"
            && d["agent"] == agent
            && d["text"] == "stubborn children started"
    })
    .await
}
