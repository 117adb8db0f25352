//! Memory an attacker makes the orchestrator binary take: bounded per key
//! while the attack lasts, and given back once it ends (resident memory
//! within twice its idle figure, see
//! [`chorus_tests::attacked::memory_is_given_back`]). While each attack
//! runs, an admin's unary call, WatchTask and Handoff, and an agent's calls
//! are served.

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_tests::attacked::{
    Setup, hold_on, legitimate_callers_are_served, memory_is_given_back, peak_is_bounded,
    resident_mib, setup, watch_from_the_start,
};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::channel_to;
use serde_json::json;

/// Events of the watched task.
const EVENTS: usize = 600;
/// Bytes of each (a comment's text).
const EVENT_BYTES: usize = 4096;
/// Viewer keys of the watch attack.
const VIEWERS: usize = 4;
/// Connections each viewer opens its watches over.
const CONNECTIONS: usize = 8;
/// Watches each viewer opens: its whole share of streams (the default
/// `--max-concurrent-streams-per-credential`).
const WATCHES: usize = 256;
/// What the watch attack may add to the orchestrator's resident memory
/// (MiB), all four keys together: each watch holds at most a replay page
/// (64 KiB) and its buffer while its watcher does not read.
const WATCH_ATTACK_MIB: u64 = 160;

/// Four viewer keys each open their whole share of WatchTask streams on a
/// task of 600 events of 4 KiB, read one event and stop reading. The
/// orchestrator's memory grows by a bounded amount, an admin's WatchTask and
/// the other legitimate callers are served, and once the watches are gone
/// the memory is given back. Before, each watch held a replay batch of up to
/// 1 MiB: four keys took the orchestrator past a gigabyte, which it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_of_a_long_task_take_bounded_memory_and_give_it_back() {
    // Connections whose answers wait unread are kept (by default for 30 s):
    // the watches stay for as long as the attack takes to open them all.
    let mut s = setup(&["--answer-send-secs", "600"], None).await;
    comment(&s, EVENTS, EVENT_BYTES).await;
    let mut keys = Vec::new();
    for i in 0..VIEWERS {
        keys.push(
            s.admin
                .create_api_key(pb::CreateApiKeyRequest {
                    name: format!("dashboard-{i}"),
                    role: pb::Role::Viewer.into(),
                })
                .await
                .expect("a viewer key")
                .into_inner()
                .secret,
        );
    }
    let idle = resident_mib(&s);
    let mut held = Vec::new();
    for key in &keys {
        // Each watch reads one event and no more: what it leaves unread
        // fills its stream's window (64 KiB), not the connection's, so the
        // next watch on the connection gets its first event too.
        let mut channels = Vec::new();
        for _ in 0..CONNECTIONS {
            channels.push(
                tonic::transport::Endpoint::from_shared(format!("http://{}", s.orchestrator.addr))
                    .expect("an endpoint")
                    .initial_connection_window_size(64 * 1024 * 1024)
                    .connect()
                    .await
                    .expect("a connection"),
            );
        }
        let (watches, _refused) = hold_on(&channels, WATCHES, |channel| {
            watch_from_the_start(channel, key.clone(), s.task.id.clone())
        })
        .await;
        assert!(
            watches.len() >= WATCHES / 2,
            "a viewer key is served its share of watches: {} of {WATCHES}",
            watches.len()
        );
        held.push(watches);
    }
    legitimate_callers_are_served(&mut s).await;
    let attacked = resident_mib(&s);
    assert!(
        attacked <= idle + WATCH_ATTACK_MIB,
        "{VIEWERS} viewers' {} watches took the orchestrator from {idle} to {attacked} MiB \
         (bound: {WATCH_ATTACK_MIB} MiB more)",
        held.iter().map(Vec::len).sum::<usize>()
    );
    drop(held);
    peak_is_bounded(&s, "four viewers' watches");
    memory_is_given_back(&s, idle, "four viewers' watches").await;
    s.orchestrator.kill().await;
}

/// 18,000 connections from 20 addresses that never send a byte (each closed
/// after `--handshake-timeout-secs`): while they are held the legitimate
/// callers are served, and once they are gone the orchestrator gives back
/// the memory they took. Before, 20,000 took a fresh orchestrator from 41 to
/// 560 MB, none of it given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_taken_by_silent_connections_is_given_back() {
    let open_files = open_file_limit();
    let connections = 18_000.min(open_files.saturating_sub(2_000) as usize);
    let mut s = setup(&["--handshake-timeout-secs", "5"], None).await;
    let idle = resident_mib(&s);
    let mut silent = Vec::with_capacity(connections);
    for i in 0..connections {
        let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i % 20) as u8);
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind((from, 0).into())
            .expect("an address of the loopback");
        silent.push(socket.connect(s.orchestrator.addr).await.expect("connect"));
    }
    legitimate_callers_are_served(&mut s).await;
    // Each silent connection is closed by the server (the older ones when
    // their time to say something is up).
    for mut socket in silent {
        let mut sink = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut socket, &mut sink).await;
    }
    peak_is_bounded(&s, "silent connections from 20 addresses");
    memory_is_given_back(&s, idle, "silent connections from 20 addresses").await;
    s.orchestrator.kill().await;
}

/// The agent of the setup's run comments `n` times with `bytes` of text.
async fn comment(s: &Setup, n: usize, bytes: usize) {
    let mut agent = AgentToolsClient::with_interceptor(
        channel_to(s.orchestrator.addr).await,
        Bearer::new(&s.agent_token),
    );
    for i in 0..n {
        let text = format!("{i:>8} {}", "x".repeat(bytes));
        agent
            .call_tool(pb::CallToolRequest {
                tool: "task.comment".into(),
                arguments: Some(chorus_proto::json::to_struct(
                    json!({ "text": text })
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                )),
            })
            .await
            .expect("a comment");
    }
}

/// This process's limit of open files (raised to its hard limit): the
/// client's side of the silent connections.
fn open_file_limit() -> u64 {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("the open-file limit");
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)
        .expect("raising the open-file limit");
    hard
}
