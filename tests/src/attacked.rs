//! An orchestrator under attack, and the callers that must be served while
//! it is: a workspace with a file, a planned task with an agent's run open,
//! an admin and a viewer key (see `tests/tests/attacks*.rs`).

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use serde_json::json;
use tokio_stream::StreamExt as _;

use crate::agents::{Client, add_agent, fake_cli, planned_task, report, workspace};
use crate::attacker;
use crate::credentials::Bearer;
use crate::orchestrator::{OrchestratorProcess, channel_to};

/// The orchestrator's resident memory never goes past this (MiB), whatever
/// the attack: the limits bound what a caller can make it hold.
pub const PEAK_MIB: u64 = 400;

/// Over how many connections [`hold`] opens its streams (HTTP/2 allows a
/// connection only so many).
const CONNECTIONS: usize = 8;

pub struct Setup {
    pub orchestrator: OrchestratorProcess,
    pub admin: Client,
    pub task: pb::Task,
    pub agent_token: String,
    pub viewer_key: String,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// An orchestrator started with `extra` flags (and at most `open_files` file
/// descriptors), a workspace with a file, a planned task with an agent's run
/// open, and a viewer key.
pub async fn setup(extra: &[&str], open_files: Option<u64>) -> Setup {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "hello").expect("a file");
    chorus_sandbox::testing::give_to_test_user(root.path());
    let url = data.path().join("chorus.db").display().to_string();
    let fake_cli = fake_cli();
    let mut flags = vec!["--claude-bin", fake_cli.to_str().expect("a UTF-8 path")];
    flags.extend_from_slice(extra);
    let orchestrator = match open_files {
        Some(n) => OrchestratorProcess::spawn_with_open_files(data.path(), &url, &flags, n).await,
        None => OrchestratorProcess::spawn(data.path(), &url, &flags).await,
    };
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "attacked", root.path()).await;
    admin
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: "model".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    add_agent(
        &mut admin,
        &ws,
        "reader",
        &["task.comment", "file.read", "handoff"],
        "model",
    )
    .await;
    add_agent(&mut admin, &ws, "helper", &["completion-report"], "model").await;
    let task = planned_task(&mut admin, &ws, "read the notes").await;
    let opened = admin
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "reader".into(),
            ttl_secs: 600,
        })
        .await
        .expect("run")
        .into_inner();
    let viewer_key = admin
        .create_api_key(pb::CreateApiKeyRequest {
            name: "dashboard".into(),
            role: pb::Role::Viewer.into(),
        })
        .await
        .expect("viewer key")
        .into_inner()
        .secret;
    Setup {
        orchestrator,
        admin,
        task,
        agent_token: opened.token,
        viewer_key,
        _dirs: (data, root),
    }
}

/// While an attack runs: an admin's unary call, WatchTask and Handoff
/// stream, an agent's call to the orchestrator and its tool call to
/// tool-exec are all served.
pub async fn legitimate_callers_are_served(s: &mut Setup) {
    s.admin
        .get_task(pb::GetTaskRequest {
            id: s.task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("an admin's unary call during the attack");
    let mut watch = s
        .admin
        .watch_task(pb::WatchTaskRequest {
            task_id: s.task.id.clone(),
            after_sequence: 0,
            follow: true,
            until_needed: false,
        })
        .await
        .expect("an admin's WatchTask during the attack")
        .into_inner();
    watch
        .next()
        .await
        .expect("an event")
        .expect("the admin's watch streams");
    // The agent hands work to another, which reports it done.
    let mut handoff = OrchestratorClient::with_interceptor(
        channel_to(s.orchestrator.addr).await,
        Bearer::new(&s.agent_token),
    )
    .handoff(pb::HandoffRequest {
        task_id: s.task.id.clone(),
        agent: "helper".into(),
        prompt: [report("complete", "helped"), "fake: say helped.".to_owned()].join("\n"),
        ..Default::default()
    })
    .await
    .expect("a Handoff during the attack")
    .into_inner();
    let mut last = None;
    while let Some(message) = handoff.next().await {
        last = message.expect("the Handoff streams").event;
    }
    assert!(
        matches!(last, Some(pb::handoff_event::Event::Completed(_))),
        "the handoff ends completed: {last:?}"
    );
    let mut agent = AgentToolsClient::with_interceptor(
        channel_to(s.orchestrator.addr).await,
        Bearer::new(&s.agent_token),
    );
    agent
        .call_tool(pb::CallToolRequest {
            tool: "help".into(),
            arguments: None,
        })
        .await
        .expect("an agent's call to the orchestrator during the attack");
    let read = ToolExecClient::with_interceptor(
        channel_to(s.orchestrator.tool_exec_addr).await,
        Bearer::new(&s.agent_token),
    )
    .execute_tool(attacker::tool_call(
        "file.read",
        &json!({"path": "notes.txt"}),
    ))
    .await
    .expect("an agent's tool call during the attack")
    .into_inner();
    assert!(format!("{read:?}").contains("hello"), "{read:?}");
}

/// After an attack of the viewer's, its key is served again: a WatchTask
/// streams its first event.
pub async fn viewer_is_served_again(s: &Setup) {
    let mut viewer = OrchestratorClient::with_interceptor(
        channel_to(s.orchestrator.addr).await,
        Bearer::new(&s.viewer_key),
    );
    let mut watch = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        viewer.watch_task(pb::WatchTaskRequest {
            task_id: s.task.id.clone(),
            after_sequence: 0,
            follow: true,
            until_needed: false,
        }),
    )
    .await
    .expect("the viewer's watch is answered")
    .expect("the viewer's watch after the attack")
    .into_inner();
    tokio::time::timeout(std::time::Duration::from_secs(20), watch.next())
        .await
        .expect("the viewer's watch streams")
        .expect("an event")
        .expect("the viewer's watch streams");
}

/// The orchestrator's peak memory after `attack` is under [`PEAK_MIB`].
pub fn peak_is_bounded(s: &Setup, attack: &str) {
    let (now, peak) = attacker::memory_mib(s.orchestrator.pid());
    eprintln!("{attack}: orchestrator RSS {now} MiB, peak {peak} MiB");
    assert!(
        peak <= PEAK_MIB,
        "{attack}: the orchestrator's memory reached {peak} MiB (bound {PEAK_MIB} MiB)"
    );
}

/// How long after an attack ends its memory is to be given back.
pub const GIVE_BACK: std::time::Duration = std::time::Duration::from_secs(60);

/// The orchestrator's resident memory now (MiB): the idle figure, before an
/// attack.
pub fn resident_mib(s: &Setup) -> u64 {
    attacker::memory_mib(s.orchestrator.pid()).0
}

/// Waits, up to [`GIVE_BACK`] after an attack ended, until the
/// orchestrator's resident memory is within twice `idle` (MiB, measured
/// before the attack); fails when it is still above.
pub async fn memory_is_given_back(s: &Setup, idle: u64, attack: &str) {
    let ended = std::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
    loop {
        tick.tick().await;
        let (now, peak) = attacker::memory_mib(s.orchestrator.pid());
        if now <= 2 * idle {
            eprintln!(
                "{attack}: orchestrator RSS {idle} MiB idle, {peak} MiB at the peak, {now} MiB {:.1} s after",
                ended.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(
            ended.elapsed() < GIVE_BACK,
            "{attack}: {} s after the attack ended the orchestrator still holds {now} MiB \
             (idle {idle} MiB, peak {peak} MiB); memory an attack took is to be given back \
             (within twice the idle figure)",
            GIVE_BACK.as_secs()
        );
    }
}

/// A WatchTask of `task` from its first event, following, on `channel`
/// with `key`, once its first event has come (within 30 s); the stream is
/// then left unread.
pub async fn watch_from_the_start(
    channel: tonic::transport::Channel,
    key: String,
    task: String,
) -> Result<tonic::Streaming<pb::TaskEvent>, tonic::Status> {
    let mut viewer = OrchestratorClient::with_interceptor(channel, Bearer::new(&key));
    let mut watch = viewer
        .watch_task(pb::WatchTaskRequest {
            task_id: task,
            after_sequence: 0,
            follow: true,
            until_needed: false,
        })
        .await?
        .into_inner();
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), watch.next())
        .await
        .expect("a watch's first event within 30 s");
    match first {
        Some(Ok(_)) => Ok(watch),
        Some(Err(status)) => Err(status),
        None => Err(tonic::Status::internal("the watch ended")),
    }
}

/// Opens `n` streams with `open`, spread over [`CONNECTIONS`] connections;
/// returns those the server took (kept open) and how many it refused.
pub async fn hold<S, F, Fut>(addr: std::net::SocketAddr, n: usize, open: F) -> (Vec<S>, usize)
where
    F: Fn(tonic::transport::Channel) -> Fut,
    Fut: std::future::Future<Output = Result<S, tonic::Status>>,
{
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(channel_to(addr).await);
    }
    hold_on(&channels, n, open).await
}

/// [`hold`] over `channels`, in turn.
pub async fn hold_on<S, F, Fut>(
    channels: &[tonic::transport::Channel],
    n: usize,
    open: F,
) -> (Vec<S>, usize)
where
    F: Fn(tonic::transport::Channel) -> Fut,
    Fut: std::future::Future<Output = Result<S, tonic::Status>>,
{
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..n {
        match open(channels[i % channels.len()].clone()).await {
            Ok(stream) => held.push(stream),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                refused += 1;
            }
        }
    }
    (held, refused)
}
