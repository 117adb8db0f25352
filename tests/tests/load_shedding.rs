//! The concurrency limit with load shedding: beyond `--max-concurrent-requests`
//! unary calls (or `--max-concurrent-streams` streams) a caller is refused at
//! once with RESOURCE_EXHAUSTED, a message naming the limit and its flag, and a
//! `grpc-retry-pushback-ms` hint; streams and unary calls have separate
//! limits, so open streams never starve unary calls; health always answers.
//!
//! Calls are held open deterministically: bash commands that wait on a FIFO
//! the test holds, and WatchTask streams that follow a task.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use chorus_proto::json;
use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_proto::tools::v1::{ExecuteToolRequest, ExecuteToolResponse, ListToolsRequest};
use chorus_run_token::RunTokenSigner;
use chorus_sandbox::testing::give_to_test_user;
use chorus_tests::agents::workspace;
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::{TOOL_EXEC_SERVICE, ToolExec, health_status};
use serde_json::json;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

/// A FIFO in `dir` that the sandboxed test user can open.
fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o666)).expect("mkfifo");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    path
}

/// Blocks until `count` lines were written to the FIFO `path` (by writers
/// that open, write and close it one after another or together).
fn read_lines(path: &Path, count: usize) {
    let mut seen = 0;
    while seen < count {
        let mut text = String::new();
        std::fs::File::open(path)
            .expect("open the FIFO")
            .read_to_string(&mut text)
            .expect("read the FIFO");
        seen += text.lines().count();
    }
}

async fn execute(
    client: &mut ToolExecClient<tonic::transport::Channel>,
    token: &str,
    command: &str,
) -> Result<ExecuteToolResponse, tonic::Status> {
    let mut request = tonic::Request::new(ExecuteToolRequest {
        tool: "bash".into(),
        arguments: Some(json::to_struct(
            json!({"command": command, "timeout_secs": 600})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        )),
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ascii"),
    );
    client
        .execute_tool(request)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_exec_refuses_calls_beyond_its_limit_at_once_with_a_retry_hint() {
    let service = ToolExec::start_configured(
        |config| config.serve.capacity.agent_unary = 2,
        RunTokenSigner::generate(),
    )
    .await;
    let workspace = tempfile::tempdir().expect("workspace");
    give_to_test_user(workspace.path());
    let started = fifo(workspace.path(), "started");
    let release = fifo(workspace.path(), "release");
    // Held open read-write by the test: a reader opens it without waiting,
    // and reads until the test lets go of it.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&release)
        .expect("hold the release FIFO");
    let token = service.token(workspace.path(), &["bash"]);
    let channel = tonic::transport::Endpoint::from_shared(service.url())
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let client = ToolExecClient::new(channel);

    // Two calls take the two places and wait.
    let waiting = "exec 3<release; echo in > started; cat <&3 > /dev/null; echo released";
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let (mut client, token) = (client.clone(), token.clone());
            tokio::spawn(async move { execute(&mut client, &token, waiting).await })
        })
        .collect();
    tokio::task::spawn_blocking(move || read_lines(&started, 2))
        .await
        .expect("both calls run");

    // A third is refused at once, whatever it is.
    let mut third = client.clone();
    let refused = execute(&mut third, &token, "true")
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(
        refused.message(),
        "tool-exec is serving its limit of 2 calls of agents at once (--agent-max-concurrent-requests); nothing of this call was done: retry after 1000 ms"
    );
    assert_eq!(
        refused
            .metadata()
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok()),
        Some("1000")
    );
    let mut request = tonic::Request::new(ListToolsRequest::default());
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ascii"),
    );
    let listed = third.list_tools(request).await.expect_err("refused too");
    assert_eq!(listed.code(), Code::ResourceExhausted);
    // Health is never counted.
    assert_eq!(
        health_status(service.addr, TOOL_EXEC_SERVICE)
            .await
            .expect("health"),
        ServingStatus::Serving
    );

    // Once the held calls are answered, calls are served again.
    drop(held);
    for call in calls {
        let answer = call.await.expect("task").expect("answered");
        assert!(
            json::from_value(answer.output.expect("output"))["stdout"]
                .as_str()
                .is_some_and(|out| out.contains("released")),
        );
    }
    let answer = execute(&mut third, &token, "echo again")
        .await
        .expect("served");
    assert!(answer.error.is_none(), "{answer:?}");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrator_streams_beyond_their_limit_are_refused_and_unary_calls_go_on() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::start_configured(
        &data.path().join("chorus.db").display().to_string(),
        RunTokenSigner::generate(),
        true,
        |config| {
            config.serve.capacity.streams = 2;
            config.serve.capacity.unary = 2;
        },
    )
    .await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "busy", root.path()).await;
    let task = client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: ws.id.clone(),
            description: "watched".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    let watch = pb::WatchTaskRequest {
        task_id: task.id.clone(),
        after_sequence: 0,
        follow: true,
        until_needed: false,
    };

    // Two followers take the two stream places (each is in once answered).
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut stream = client
            .watch_task(watch.clone())
            .await
            .expect("a stream place")
            .into_inner();
        stream
            .message()
            .await
            .expect("event")
            .expect("task_created");
        streams.push(stream);
    }
    let refused = client
        .watch_task(watch.clone())
        .await
        .expect_err("a third stream is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(
        refused.message(),
        "the orchestrator is serving its limit of 2 streams of API keys at once (--max-concurrent-streams); nothing of this call was done: retry after 1000 ms"
    );
    assert!(refused.metadata().get("grpc-retry-pushback-ms").is_some());

    // Unary calls have places of their own: more of them than the two
    // allowed at once, one after another, while the streams stay open.
    for _ in 0..4 {
        client
            .get_task(pb::GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            })
            .await
            .expect("unary calls are not starved by streams");
    }
    // The streams still deliver.
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "done watching".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    for stream in &mut streams {
        let event = stream.message().await.expect("event").expect("an event");
        assert_eq!(event.kind, "status_changed");
    }
    drop(streams);
    orchestrator.stop().await;
}

/// Python's grpc client (grpcio, which the A2A SDK's gRPC transport uses)
/// reads why a stream beyond the limit was refused: RESOURCE_EXHAUSTED
/// naming the limit and its flag, not INTERNAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refused_at_the_limit_is_read_as_such_by_pythons_grpc_client() {
    let Some(python) = chorus_tests::a2a::python_or_skip() else {
        return;
    };
    let data = tempfile::tempdir().expect("data");
    let orchestrator = chorus_tests::orchestrator::OrchestratorProcess::spawn(
        data.path(),
        &data.path().join("chorus.db").display().to_string(),
        &["--max-anonymous-calls", "2"],
    )
    .await;
    let plan = json!({ "addr": orchestrator.addr.to_string(), "hold": 2 });
    let seen = chorus_tests::a2a::run_script(
        &python,
        "refused_reflection.py",
        plan.to_string().as_bytes(),
    )
    .await;
    assert_eq!(seen["code"], "RESOURCE_EXHAUSTED", "{seen}");
    assert!(
        seen["details"]
            .as_str()
            .is_some_and(|d| d.contains("--max-anonymous-calls")),
        "{seen}"
    );
    orchestrator.kill().await;
}
