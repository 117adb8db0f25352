//! The Orchestrator service driven through its trait methods, as tonic would call
//! them, over a real store: SQLite always, PostgreSQL too when
//! `CHORUS_TEST_DATABASE_URL` is set (each test in a fresh schema).

mod feed;
mod guards;
mod runs;
mod tasks;
mod watch;
mod workspaces;

use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::orchestrator_server::Orchestrator;
use chorus_run_token::RunTokenSigner;
use tonic::{Code, Request, Status};

use super::OrchestratorService;
use crate::state::AppState;
use crate::store::tests::{TestStore, test_stores};

/// A service over one backend's store.
struct Fixture {
    svc: OrchestratorService,
    state: AppState,
    t: TestStore,
}

impl Fixture {
    fn backend(&self) -> &'static str {
        self.t.backend
    }

    /// A workspace created over gRPC on a fresh directory.
    async fn workspace(&self, name: &str) -> pb::Workspace {
        let root = self.t.dir.path().join("roots").join(name);
        std::fs::create_dir_all(&root).expect("workspace root");
        self.svc
            .create_workspace(Request::new(pb::CreateWorkspaceRequest {
                name: name.into(),
                root: root.to_str().expect("utf-8 root").into(),
            }))
            .await
            .unwrap_or_else(|e| panic!("{}: create workspace {name}: {e}", self.backend()))
            .into_inner()
    }

    async fn task(&self, workspace: &pb::Workspace, description: &str) -> pb::Task {
        self.svc
            .create_task(Request::new(pb::CreateTaskRequest {
                budget: None,
                workspace_id: workspace.id.clone(),
                description: description.into(),
                source: None,
                ..Default::default()
            }))
            .await
            .unwrap_or_else(|e| panic!("{}: create task: {e}", self.backend()))
            .into_inner()
    }

    async fn set_status(&self, task: &pb::Task, status: &str) -> Result<pb::Task, Status> {
        self.svc
            .update_task_status(Request::new(pb::UpdateTaskStatusRequest {
                id: task.id.clone(),
                status: status.into(),
                reason: String::new(),
                ..Default::default()
            }))
            .await
            .map(tonic::Response::into_inner)
    }
}

/// One fixture per configured backend.
async fn fixtures() -> Vec<Fixture> {
    test_stores()
        .await
        .into_iter()
        .map(|t| {
            let state = AppState::new(
                t.store.clone(),
                std::sync::Arc::new(RunTokenSigner::generate()),
                crate::execution::RunnerConfig::new(std::path::Path::new("/nonexistent")),
                chorus_sandbox::Sandbox::refusing("these tests start no agent process"),
            );
            Fixture {
                svc: OrchestratorService::new(state.clone()),
                state,
                t,
            }
        })
        .collect()
}

/// Asserts a call failed with `code` and a message that mentions `needle`.
#[track_caller]
fn assert_status<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: Code,
    needle: &str,
    backend: &str,
) {
    let status = result.expect_err(backend);
    assert_eq!(status.code(), code, "{backend}: {}", status.message());
    assert!(
        status.message().contains(needle),
        "{backend}: '{}' does not mention '{needle}'",
        status.message()
    );
}

/// A bound on waiting for a stream item, so a bug fails the test instead of hanging it.
const STREAM_TIMEOUT: Duration = Duration::from_secs(20);
