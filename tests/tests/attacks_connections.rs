//! Connections as an attacker holds them, against the orchestrator binary:
//! sockets that never say a word, and a read-only key's connections that
//! each make one call and then sit idle. While each runs, admins' calls and
//! streams, an agent's calls and a new admin's connection are served.

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_tests::attacked::{legitimate_callers_are_served, peak_is_bounded, setup};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::client_at;

/// 2,000 connections from one address that never send a byte, against an
/// orchestrator allowed 1,024 open files: at most 768 connections are held (¾
/// of the files; a newer one closes the oldest silent one), each silent one
/// for at most `--handshake-timeout-secs`; callers with a credential (on a connection
/// they had, and on a new one from another address) are served, and the
/// closes are logged a few lines a second. Before, 20,000 such connections
/// used every file descriptor: admin calls got no answer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_the_open_file_limit_stall_no_one() {
    let mut s = setup(&["--handshake-timeout-secs", "5"], Some(1024)).await;
    let before = s.orchestrator.log_lines();
    let started = std::time::Instant::now();
    let mut silent = Vec::new();
    for _ in 0..2000 {
        silent.push(
            tokio::net::TcpStream::connect(s.orchestrator.addr)
                .await
                .expect("connect"),
        );
    }
    legitimate_callers_are_served(&mut s).await;
    // An admin arriving now from another address.
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", s.orchestrator.addr))
            .expect("endpoint")
            .local_address(Some(std::net::Ipv4Addr::new(127, 0, 0, 2).into()))
            .connect()
            .await
            .expect("a new connection from another address");
    OrchestratorClient::with_interceptor(channel, Bearer::new(&s.orchestrator.admin_key))
        .get_task(pb::GetTaskRequest {
            id: s.task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("a new admin's call during the attack");
    // Every silent connection is closed: the older ones as newer came, the
    // rest when their time to say something is up.
    // (The server's own SETTINGS may come first.)
    for mut socket in silent {
        let mut sink = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut socket, &mut sink).await;
    }
    let seconds = started.elapsed().as_secs() + 1;
    let logged = s.orchestrator.log_lines() - before;
    assert!(
        logged <= 10 * seconds + 20,
        "2,000 closed connections in about {seconds} s logged {logged} lines"
    );
    peak_is_bounded(&s, "silent connections");
    s.orchestrator.kill().await;
}

/// 1,600 connections of one viewer key, each making one GetTask and then
/// idle, against an orchestrator allowed 2,048 open files (1,536
/// connections): the key holds at most `--max-connections-per-credential`
/// (64) of them, its oldest idle ones closed as newer came; admins' calls and
/// streams, an agent's Handoff on a new connection and a new admin's
/// connection are served. Before, the viewer's connections counted as
/// proven and filled the limit: every new connection was closed on arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewers_idle_connections_lock_no_one_out() {
    let mut s = setup(&[], Some(2048)).await;
    let mut held = Vec::new();
    for _ in 0..1600 {
        let mut viewer = client_at(s.orchestrator.addr, &s.viewer_key).await;
        // A call may find its connection already closed for a newer one.
        let _ = viewer
            .get_task(pb::GetTaskRequest {
                id: s.task.id.clone(),
                ..Default::default()
            })
            .await;
        held.push(viewer);
    }
    legitimate_callers_are_served(&mut s).await;
    let mut new_admin = client_at(s.orchestrator.addr, &s.orchestrator.admin_key).await;
    new_admin
        .get_task(pb::GetTaskRequest {
            id: s.task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("a new admin connection during the attack");
    drop(held);
    peak_is_bounded(&s, "a viewer's idle connections");
    s.orchestrator.kill().await;
}
