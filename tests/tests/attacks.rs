//! Hostile load against the orchestrator binary, each as an attacker would
//! make it: calls whose message never comes, answers never read (connections
//! held by attackers are in `attacks_connections.rs`),
//! tokens naming keys that do not exist,
//! streams held open without a credential (server reflection) or by one
//! read-only key (WatchTask).
//! While each runs, an admin's unary call and WatchTask, an agent's call to
//! the orchestrator and its tool call to tool-exec, and a Handoff stream are
//! served; afterwards the orchestrator's peak memory is under
//! [`chorus_tests::attacked::PEAK_MIB`].
//! Before, each of these stalled every caller (RESOURCE_EXHAUSTED, or no
//! answer at all) or grew the service by gigabytes.

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_tests::attacked::{
    hold, legitimate_callers_are_served, peak_is_bounded, setup, viewer_is_served_again,
    watch_from_the_start,
};
use chorus_tests::attacker::{self, H2};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::{channel_to, client_at};
use prost::Message as _;
use serde_json::json;
use tokio_stream::StreamExt as _;
use tonic::Code;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;

/// How many streams the stream attacks open: the default stream limit.
const STREAMS: usize = 1024;

/// A viewer's 600 calls whose headers come and whose message never does,
/// on the orchestrator's port and on tool-exec's: they hold no place of
/// their kind, other callers are served, and each is answered
/// DEADLINE_EXCEEDED when its time to send is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_whose_message_never_comes_stall_no_one_on_either_port() {
    let mut s = setup(&["--request-body-secs", "10"], None).await;
    let mut connections: Vec<H2> = Vec::new();
    let mut pending = Vec::new();
    for (addr, path) in [
        (
            s.orchestrator.addr,
            "/chorus.orchestrator.v1.Orchestrator/ListTasks",
        ),
        (
            s.orchestrator.tool_exec_addr,
            "/chorus.tools.v1.ToolExec/GetStatus",
        ),
    ] {
        for _ in 0..2 {
            let mut h2 = attacker::connect(addr, None).await;
            for _ in 0..150 {
                let (answer, stream) = attacker::bodiless(&mut h2, path, &s.viewer_key);
                pending.push((answer, stream, path));
            }
            connections.push(h2);
        }
    }
    legitimate_callers_are_served(&mut s).await;
    // The key's own share waited for its messages until their time was up;
    // the calls past its share were refused at once.
    let mut waited = std::collections::HashMap::<&str, usize>::new();
    for (answer, _stream, path) in pending {
        let status = attacker::status(answer).await.expect("an answer");
        match status.code() {
            Code::DeadlineExceeded => {
                assert!(
                    status.message().contains("--request-body-secs"),
                    "{status:?}"
                );
                *waited.entry(path).or_default() += 1;
            }
            Code::ResourceExhausted => assert!(
                status
                    .message()
                    .contains("--max-concurrent-requests-per-credential"),
                "{status:?}"
            ),
            _ => panic!("{path}: {status:?}"),
        }
    }
    assert_eq!(
        waited.values().copied().collect::<Vec<_>>(),
        [64, 64],
        "{waited:?}"
    );
    drop(connections);
    peak_is_bounded(&s, "bodiless calls");
    s.orchestrator.kill().await;
}

/// A viewer's 60 ListTasks whose answers it never reads (its HTTP/2 window
/// shut), over 300 tasks of 60 KB: pages are bounded by bytes, unread answers
/// count against the key, and after `--answer-send-secs` the connections are
/// closed with everything buffered for them. Before, such answers stayed
/// buffered for as long as the client liked: 60 of them took the service
/// from 644 MB to 2,628 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_never_read_are_cut_off_and_memory_stays_bounded() {
    let mut s = setup(
        &["--answer-send-secs", "10", "--connection-idle-secs", "15"],
        None,
    )
    .await;
    let started = std::time::Instant::now();
    let large = "x".repeat(60 * 1024);
    for i in 0..300 {
        s.admin
            .create_task(pb::CreateTaskRequest {
                workspace_id: s.task.workspace_id.clone(),
                description: format!("{i} {large}"),
                ..Default::default()
            })
            .await
            .expect("a large task");
    }
    let list = pb::ListTasksRequest {
        page_size: 500,
        ..Default::default()
    }
    .encode_to_vec();
    let mut connections = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let mut h2 = attacker::connect(s.orchestrator.addr, Some(0)).await;
        for _ in 0..15 {
            answers.push(attacker::unread(
                &mut h2,
                "/chorus.orchestrator.v1.Orchestrator/ListTasks",
                &s.viewer_key,
                &list,
            ));
        }
        connections.push(h2);
    }
    eprintln!("{:?} attack sent", started.elapsed());
    legitimate_callers_are_served(&mut s).await;
    eprintln!("{:?} served", started.elapsed());
    // A reader of the same lists gets them whole, page by page.
    let mut token = String::new();
    let mut listed = 0;
    loop {
        let page = s
            .admin
            .list_tasks(pb::ListTasksRequest {
                page_size: 500,
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("a page")
            .into_inner();
        listed += page.tasks.len();
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed, 301);
    // The server closes every connection that left its answers unread (those
    // whose answers were refused for the key's unread bytes are closed when
    // idle).
    eprintln!("{:?} listed", started.elapsed());
    for h2 in connections {
        let ended = h2.driver.await.expect("the connection's task");
        eprintln!("{:?} closed: {ended:?}", started.elapsed());
    }
    drop(answers);
    viewer_is_served_again(&s).await;
    peak_is_bounded(&s, "answers never read");
    s.orchestrator.kill().await;
}

/// 300 tool calls at once with tokens signed by a key the service never had:
/// refused UNAUTHENTICATED after at most two key refreshes, while the agent's
/// own calls are served. Before, the callers queued on the refresh holding
/// places, and every legitimate call was refused RESOURCE_EXHAUSTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_naming_unknown_keys_stall_no_one() {
    let mut s = setup(&[], None).await;
    let stranger = chorus_run_token::RunTokenSigner::generate().mint(
        &chorus_run_token::RunGrant {
            run_id: "made-up".into(),
            task_id: s.task.id.clone(),
            agent: "reader".into(),
            tools: vec!["file.read".into()],
            root: "/".into(),
            egress: Vec::new(),
            epoch: 0,
        },
        std::time::Duration::from_secs(600),
    );
    let channel = channel_to(s.orchestrator.tool_exec_addr).await;
    let calls: Vec<_> = (0..300)
        .map(|_| {
            let mut client =
                ToolExecClient::with_interceptor(channel.clone(), Bearer::new(&stranger));
            tokio::spawn(async move {
                client
                    .execute_tool(ExecuteToolRequest {
                        tool: "file.read".into(),
                        arguments: None,
                    })
                    .await
            })
        })
        .collect();
    legitimate_callers_are_served(&mut s).await;
    for call in calls {
        let refused = call.await.expect("task").expect_err("an unknown key");
        assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    }
    peak_is_bounded(&s, "unknown key ids");
    s.orchestrator.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_reflection_streams_without_a_credential_take_nothing_from_callers_with_one() {
    let mut s = setup(&[], None).await;
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
    peak_is_bounded(&s, "reflection streams");
    s.orchestrator.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_read_only_keys_watches_take_only_its_own_share() {
    let mut s = setup(&[], None).await;
    let viewer_key = s.viewer_key.clone();
    let (addr, task) = (s.orchestrator.addr, s.task.id.clone());
    let (held, refused) = hold(addr, STREAMS, |channel| {
        watch_from_the_start(channel, viewer_key.clone(), task.clone())
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
    peak_is_bounded(&s, "a viewer's watches");
    s.orchestrator.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_read_only_keys_a2a_subscriptions_take_only_its_own_share() {
    use chorus_proto::a2a::v1 as a2a;
    let mut s = setup(&[], None).await;
    let viewer_key = s.viewer_key.clone();
    let (addr, task) = (s.orchestrator.addr, s.task.id.clone());
    let (held, refused) = hold(addr, STREAMS, |channel| {
        let (key, task) = (viewer_key.clone(), task.clone());
        async move {
            let mut viewer = a2a::a2a_service_client::A2aServiceClient::with_interceptor(
                channel,
                Bearer::new(&key),
            );
            let mut updates = viewer
                .subscribe_to_task(a2a::SubscribeToTaskRequest {
                    tenant: String::new(),
                    id: task,
                })
                .await?
                .into_inner();
            match updates.next().await {
                Some(Ok(_)) => Ok(updates),
                Some(Err(status)) => Err(status),
                None => Err(tonic::Status::internal("the subscription ended")),
            }
        }
    })
    .await;
    assert!(!held.is_empty(), "a viewer subscribes to a task over A2A");
    assert!(refused > 0, "one viewer key held all {STREAMS} A2A streams");
    legitimate_callers_are_served(&mut s).await;
    drop(held);
    peak_is_bounded(&s, "a viewer's A2A subscriptions");
    s.orchestrator.kill().await;
}

/// An HTTP/1.1 request to the console: `method path`, with `key` as the
/// bearer when there is one, and `body`.
fn console_request(method: &str, path: &str, key: Option<&str>, body: &str) -> Vec<u8> {
    let bearer = key
        .map(|k| format!("authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    format!(
        "{method} {path} HTTP/1.1\r\nhost: console\r\n{bearer}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A connection to the console that sends `request` (when there is one)
/// and never reads; its receive buffer is small, so what the server sends
/// soon waits on the server's side.
async fn unread_console(
    addr: std::net::SocketAddr,
    request: Option<&[u8]>,
) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("a small receive buffer");
    let mut stream = socket.connect(addr).await.expect("connect to the console");
    if let Some(request) = request {
        tokio::io::AsyncWriteExt::write_all(&mut stream, request)
            .await
            .expect("send the request");
    }
    stream
}

/// The web console's port under hostile load: 600 connections that say
/// nothing, 200 that fetch the page and stay, 100 that call with a key that
/// does not exist and stay, while more keep arriving. A person with a key
/// who comes then is answered at once (the console holds 256 connections:
/// those that have shown no accepted key make room), as are the API's
/// callers. A viewer's console streams that are never read hold its stream
/// share only until a line has waited `--answer-send-secs`: then they end,
/// with their connections, and the viewer is served again. Memory stays
/// bounded. Before, 256 silent connections kept everyone out of the console
/// until they timed out, and an unread stream held its share for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_port_under_hostile_load_keeps_a_person_with_a_key_served() {
    const VIEWER_STREAMS: usize = 8;
    use bytes::Bytes;
    let mut s = setup(
        &[
            "--answer-send-secs",
            "2",
            "--max-concurrent-streams-per-credential",
            "8",
        ],
        None,
    )
    .await;
    let console = s.orchestrator.console_addr.expect("the console serves");
    let mut hostile = Vec::new();
    for _ in 0..600 {
        hostile.push(unread_console(console, None).await);
    }
    let page = console_request("GET", "/", None, "");
    for _ in 0..200 {
        hostile.push(unread_console(console, Some(&page)).await);
    }
    let stranger = console_request("POST", "/api/GetStatus", Some("chorus_madeup"), "{}");
    for _ in 0..100 {
        hostile.push(unread_console(console, Some(&stranger)).await);
    }
    // More keep coming while the person and the API's callers are served.
    let flood = tokio::spawn(async move {
        let mut held = std::collections::VecDeque::new();
        loop {
            held.push_back(unread_console(console, None).await);
            if held.len() > 300 {
                held.pop_front();
            }
            tokio::task::yield_now().await;
        }
    });
    let person = reqwest::Client::new();
    let answer = person
        .post(format!("http://{console}/api/GetStatus"))
        .bearer_auth(&s.orchestrator.admin_key)
        .json(&json!({}))
        .send()
        .await
        .expect("a person's call to the console during the attack");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    let page = person
        .get(format!("http://{console}/"))
        .send()
        .await
        .expect("the console's page during the attack");
    assert_eq!(page.status(), 200);
    legitimate_callers_are_served(&mut s).await;
    flood.abort();
    drop(hostile);

    // A task with more history than the console buffers for a stream.
    let mut agent = AgentToolsClient::with_interceptor(
        channel_to(s.orchestrator.addr).await,
        Bearer::new(&s.agent_token),
    );
    for i in 0..200 {
        agent
            .call_tool(pb::CallToolRequest {
                tool: "task.comment".into(),
                arguments: Some(chorus_proto::json::to_struct(
                    json!({ "text": format!("note {i}") })
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                )),
            })
            .await
            .expect("a comment");
    }
    // The viewer's whole share of streams as console streams over HTTP/2
    // that never read a byte (a window of 0): each is answered (its head
    // comes), then its lines wait.
    let mut h2 = attacker::connect(console, Some(0)).await;
    let watch = Bytes::from(json!({ "taskId": s.task.id, "follow": true }).to_string());
    let mut unread = Vec::new();
    for _ in 0..VIEWER_STREAMS {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{console}/api/stream/WatchTask"))
            .header("authorization", format!("Bearer {}", s.viewer_key))
            .header("content-type", "application/json")
            .body(())
            .expect("request");
        let (answer, mut body) = h2.send.send_request(request, false).expect("send");
        body.send_data(watch.clone(), true).expect("the body");
        let answer = answer.await.expect("the stream's head");
        assert_eq!(answer.status(), 200, "a viewer may watch from the console");
        unread.push(answer);
    }
    let mut viewer = OrchestratorClient::with_interceptor(
        channel_to(s.orchestrator.addr).await,
        Bearer::new(&s.viewer_key),
    );
    let watch_task = pb::WatchTaskRequest {
        task_id: s.task.id.clone(),
        after_sequence: 0,
        follow: true,
        until_needed: false,
    };
    let refused = viewer
        .watch_task(watch_task.clone())
        .await
        .expect_err("the console's streams are the viewer's");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // Once a line has waited past --answer-send-secs the streams end and the
    // connection is closed…
    // (How it ends, a GOAWAY or a reset, is the server's choice.)
    let _ended = tokio::time::timeout(std::time::Duration::from_secs(60), &mut h2.driver)
        .await
        .expect("the server closes the connection that reads nothing")
        .expect("the connection's task");
    drop(unread);
    // …and the viewer's share is its own again.
    viewer
        .watch_task(watch_task)
        .await
        .expect("the viewer is served again");
    peak_is_bounded(&s, "the console's port");
    s.orchestrator.kill().await;
}
