//! Hostile load costs the attacker, not the service: streams held open by a
//! caller without a credential (server reflection) or by one read-only key
//! (WatchTask) take only the places of their own kind — and, for one key,
//! its own share — so that while they are held an admin's unary call and
//! WatchTask and an agent's call are still served. Before, 1,024 such
//! streams took every stream place of the orchestrator, the places being
//! taken before the credential was checked.

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_tests::agents::{Client, add_agent, planned_task, workspace};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::{Orchestrator, channel_to, client_at};
use tokio_stream::StreamExt as _;
use tonic::Code;
use tonic::transport::Channel;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;

/// How many streams the attacker opens: the default stream limit.
const STREAMS: usize = 1024;
/// Over how many connections (HTTP/2 allows a connection only so many).
const CONNECTIONS: usize = 8;

struct Setup {
    orchestrator: Orchestrator,
    admin: Client,
    task: pb::Task,
    agent_token: String,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn setup() -> Setup {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::start(
        &data.path().join("chorus.db").display().to_string(),
        data.path(),
    )
    .await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "load", root.path()).await;
    add_agent(&mut admin, &ws, "reader", &["task.comment"], "").await;
    let task = planned_task(&mut admin, &ws, "read").await;
    let agent_token = admin
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "reader".into(),
            ttl_secs: 600,
        })
        .await
        .expect("run")
        .into_inner()
        .token;
    Setup {
        orchestrator,
        admin,
        task,
        agent_token,
        _dirs: (data, root),
    }
}

/// While the attack holds its streams: an admin's unary call and WatchTask,
/// and an agent's call, are served.
async fn legitimate_callers_are_served(s: &mut Setup) {
    s.admin
        .get_task(pb::GetTaskRequest {
            id: s.task.id.clone(),
        })
        .await
        .expect("an admin's unary call during the attack");
    let mut watch = s
        .admin
        .watch_task(pb::WatchTaskRequest {
            task_id: s.task.id.clone(),
            after_sequence: 0,
            follow: true,
        })
        .await
        .expect("an admin's WatchTask during the attack")
        .into_inner();
    watch
        .next()
        .await
        .expect("an event")
        .expect("the admin's watch streams");
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
        .expect("an agent's call during the attack");
}

/// Opens `n` streams with `open`, spread over [`CONNECTIONS`] connections;
/// returns those the server took (kept open) and how many it refused.
async fn hold<S, F, Fut>(addr: std::net::SocketAddr, n: usize, open: F) -> (Vec<S>, usize)
where
    F: Fn(Channel) -> Fut,
    Fut: std::future::Future<Output = Result<S, tonic::Status>>,
{
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(channel_to(addr).await);
    }
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..n {
        match open(channels[i % CONNECTIONS].clone()).await {
            Ok(stream) => held.push(stream),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                refused += 1;
            }
        }
    }
    (held, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_reflection_streams_without_a_credential_take_nothing_from_callers_with_one() {
    let mut s = setup().await;
    let (held, refused) = hold(s.orchestrator.addr, STREAMS, |channel| async move {
        let mut client = ServerReflectionClient::new(channel);
        // One request, then the stream is left open.
        let (sender, requests) = tokio::sync::mpsc::channel(1);
        sender
            .send(ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            })
            .await
            .expect("queued");
        let mut answers = client
            .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(requests))
            .await?
            .into_inner();
        match answers.next().await {
            Some(Ok(_)) => Ok((sender, answers)),
            Some(Err(status)) => Err(status),
            None => Err(tonic::Status::internal("the stream ended")),
        }
    })
    .await;
    assert!(
        !held.is_empty(),
        "grpcurl without .proto files still lists the services"
    );
    assert!(
        refused > 0,
        "every one of {STREAMS} streams without a credential was taken"
    );
    legitimate_callers_are_served(&mut s).await;
    drop(held);
    s.orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_read_only_keys_watches_take_only_its_own_share() {
    let mut s = setup().await;
    let viewer_key = s
        .admin
        .create_api_key(pb::CreateApiKeyRequest {
            name: "dashboard".into(),
            role: pb::Role::Viewer.into(),
        })
        .await
        .expect("key")
        .into_inner()
        .secret;
    let (addr, task) = (s.orchestrator.addr, s.task.id.clone());
    let (held, refused) = hold(addr, STREAMS, |channel| {
        let (key, task) = (viewer_key.clone(), task.clone());
        async move {
            let mut viewer = OrchestratorClient::with_interceptor(channel, Bearer::new(&key));
            let mut watch = viewer
                .watch_task(pb::WatchTaskRequest {
                    task_id: task,
                    after_sequence: 0,
                    follow: true,
                })
                .await?
                .into_inner();
            match watch.next().await {
                Some(Ok(_)) => Ok(watch),
                Some(Err(status)) => Err(status),
                None => Err(tonic::Status::internal("the watch ended")),
            }
        }
    })
    .await;
    assert!(!held.is_empty());
    assert!(refused > 0, "one viewer key held all {STREAMS} streams");
    legitimate_callers_are_served(&mut s).await;
    // Another viewer is served too.
    let mut other = client_at(addr, &s.orchestrator.admin_key).await;
    other
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .expect("another caller");
    drop(held);
    s.orchestrator.stop().await;
}

/// A flood of calls without a credential (or with a made-up key) is refused
/// without a log line each: 2,000 refusals log a few lines a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_do_not_flood_the_log() {
    let data = tempfile::tempdir().expect("data");
    let orchestrator = chorus_tests::orchestrator::OrchestratorProcess::spawn(
        data.path(),
        &data.path().join("chorus.db").display().to_string(),
        &[],
    )
    .await;
    let before = orchestrator.log_lines();
    let mut anonymous = OrchestratorClient::new(channel_to(orchestrator.addr).await);
    let mut made_up = OrchestratorClient::with_interceptor(
        channel_to(orchestrator.addr).await,
        Bearer::new(chorus_auth::ApiKey::generate().expose()),
    );
    let started = std::time::Instant::now();
    for _ in 0..1000 {
        let err = anonymous
            .list_tasks(pb::ListTasksRequest::default())
            .await
            .expect_err("no credential");
        assert_eq!(err.code(), Code::Unauthenticated);
        let err = made_up
            .list_tasks(pb::ListTasksRequest::default())
            .await
            .expect_err("a made-up key");
        assert_eq!(err.code(), Code::Unauthenticated);
    }
    // The last lines may still be on their way: an admin's call after the
    // flood is answered once they are written.
    let mut admin = client_at(orchestrator.addr, &orchestrator.admin_key).await;
    admin
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .expect("the admin is served");
    let seconds = started.elapsed().as_secs() + 1;
    let logged = orchestrator.log_lines() - before;
    assert!(
        logged <= 10 * seconds + 10,
        "2,000 refused calls in about {seconds} s logged {logged} lines"
    );
    orchestrator.kill().await;
}
