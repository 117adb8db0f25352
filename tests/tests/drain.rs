//! Shutdown as container orchestrators drive it, on the real binaries: on
//! SIGTERM health turns NOT_SERVING on every name at once while calls (new
//! ones and open streams) are still served for `--drain-secs`; then the
//! process stops and exits 0. A second signal during the drain exits at once
//! with 128 + the signal's number.

use chorus_auth::Role;
use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::tools::v1::GetStatusRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_tests::agents::workspace;
use chorus_tests::credentials::{Bearer, make_key};
use chorus_tests::orchestrator::{OrchestratorProcess, channel_to, client_at};
use chorus_tests::tool_exec_process::ToolExecProcess;
use chorus_tests::wait_health;
use nix::sys::signal::Signal;
use tonic_health::pb::health_check_response::ServingStatus;

const ORCHESTRATOR_NAMES: [&str; 3] = [
    "",
    "chorus.orchestrator.v1.Orchestrator",
    "chorus.orchestrator.v1.AgentTools",
];
const TOOL_EXEC_NAMES: [&str; 2] = ["", "chorus.tools.v1.ToolExec"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_drains_serving_calls_and_a_second_sigterm_exits_at_once() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let database = data.path().join("chorus.db").display().to_string();
    // Long enough that the drain never ends by itself in this test.
    let orchestrator =
        OrchestratorProcess::spawn(data.path(), &database, &["--drain-secs", "600"]).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "draining", root.path()).await;
    let task = client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: ws.id.clone(),
            description: "watched through the drain".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    let mut stream = client
        .watch_task(pb::WatchTaskRequest {
            task_id: task.id.clone(),
            after_sequence: 0,
            follow: true,
            until_needed: false,
        })
        .await
        .expect("watch")
        .into_inner();
    stream
        .message()
        .await
        .expect("event")
        .expect("task_created");

    orchestrator.signal(Signal::SIGTERM);
    for name in ORCHESTRATOR_NAMES {
        wait_health(orchestrator.addr, name, ServingStatus::NotServing).await;
    }
    for name in TOOL_EXEC_NAMES {
        wait_health(orchestrator.tool_exec_addr, name, ServingStatus::NotServing).await;
    }

    // Still served: calls on an open connection, on a new one, and the stream.
    client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("served during the drain");
    let mut fresh = client_at(orchestrator.addr, &orchestrator.admin_key).await;
    fresh
        .list_workspaces(pb::ListWorkspacesRequest::default())
        .await
        .expect("a new connection is served during the drain");
    fresh
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "draining".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    assert_eq!(
        stream.message().await.expect("event").expect("one").kind,
        "status_changed"
    );

    orchestrator.signal(Signal::SIGTERM);
    let exit = orchestrator.wait().await;
    assert_eq!(
        exit.code(),
        Some(143),
        "a second SIGTERM exits at once: {exit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_drain_the_orchestrator_stops_and_exits_0() {
    let data = tempfile::tempdir().expect("data");
    let database = data.path().join("chorus.db").display().to_string();
    let orchestrator =
        OrchestratorProcess::spawn(data.path(), &database, &["--drain-secs", "1"]).await;
    orchestrator.signal(Signal::SIGTERM);
    wait_health(orchestrator.addr, "", ServingStatus::NotServing).await;
    let exit = orchestrator.wait().await;
    assert!(exit.success(), "{exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_separate_tool_exec_drains_and_a_second_ctrl_c_exits_at_once() {
    let data = tempfile::tempdir().expect("data");
    let database = data.path().join("chorus.db").display().to_string();
    let service_key = make_key(&database, "tool-exec", Role::ToolExec).await;
    let viewer = make_key(&database, "viewer", Role::Viewer).await;
    let key_file = data.path().join("tool-exec.key");
    std::fs::write(&key_file, service_key).expect("key file");
    let orchestrator = OrchestratorProcess::spawn(data.path(), &database, &[]).await;
    let tool_exec =
        ToolExecProcess::spawn_with(orchestrator.addr, &key_file, &["--drain-secs", "600"]).await;
    wait_health(tool_exec.addr, "", ServingStatus::Serving).await;

    tool_exec.signal(Signal::SIGINT);
    for name in TOOL_EXEC_NAMES {
        wait_health(tool_exec.addr, name, ServingStatus::NotServing).await;
    }
    let mut client =
        ToolExecClient::with_interceptor(channel_to(tool_exec.addr).await, Bearer::new(&viewer));
    client
        .get_status(GetStatusRequest {})
        .await
        .expect("served during the drain");

    tool_exec.signal(Signal::SIGINT);
    let exit = tool_exec.wait().await;
    assert_eq!(
        exit.code(),
        Some(130),
        "a second Ctrl-C exits at once: {exit}"
    );
    assert!(orchestrator.stop().await.success());
}
