//! Many API-agent runs that each read a file four times at once and then
//! report, against the orchestrator binary, behind a gate in front of their
//! model (see `tests/tests/overload.rs` and the `overload` bench).

use chorus_proto::orchestrator::v1 as pb;
use serde_json::json;

use crate::agents::{Client, api_team, planned_task, start};
use crate::fake_openai::{FakeOpenAi, Step};
use crate::orchestrator::OrchestratorProcess;

/// Each run's conversation: four reads at once, then the report.
pub fn turns() -> Vec<Step> {
    let read = ("file_read".to_owned(), json!({ "path": "notes.txt" }));
    vec![
        Step::ToolCalls(vec![read.clone(), read.clone(), read.clone(), read]),
        Step::tool_call(
            "completion-report",
            json!({ "status": "complete", "summary": "read", "output": "read it" }),
        ),
    ]
}

/// An orchestrator on `database_url` (started with `flags`) with `runs`
/// planned tasks of an API agent whose model holds every request at its
/// gate (unless it is open).
pub struct ReadingRuns {
    pub orchestrator: OrchestratorProcess,
    pub admin: Client,
    pub model: FakeOpenAi,
    agent: String,
    /// The tasks, in the order they are started.
    pub tasks: Vec<pb::Task>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl ReadingRuns {
    /// Plans them; with `gate_open`, each run will go at once instead of
    /// waiting at the gate.
    pub async fn plan(database_url: &str, flags: &[&str], runs: usize, gate_open: bool) -> Self {
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), "hello").expect("a file");
        let model = FakeOpenAi::start_gated_by_turn(turns()).await;
        if gate_open {
            model.open_gate();
        }
        let dir = tempfile::tempdir().expect("orchestrator data");
        let orchestrator = OrchestratorProcess::spawn(dir.path(), database_url, flags).await;
        let mut admin = orchestrator.client().await;
        let team = api_team(
            &mut admin,
            root.path(),
            &model,
            &["file.read", "completion-report"],
            "",
        )
        .await;
        let mut tasks = Vec::with_capacity(runs);
        for i in 0..runs {
            tasks.push(planned_task(&mut admin, &team.workspace, &format!("read {i}")).await);
        }
        Self {
            orchestrator,
            admin,
            model,
            agent: team.agent,
            tasks,
            _dirs: (root, dir),
        }
    }

    /// Starts every task's run.
    pub async fn start_all(&mut self) {
        for task in &self.tasks {
            start(&mut self.admin, task, &self.agent, 0).await;
        }
    }

    /// Waits until every run waits at the gate, then lets them all go.
    pub async fn release(&self) {
        self.model.at_gate(self.tasks.len()).await;
        self.model.open_gate();
    }
}
