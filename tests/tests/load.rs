//! A flood of refused calls costs the attacker, not the log: calls without a
//! credential, or with a made-up key, are refused without a log line each.
//! (The stream attacks — reflection without a credential, a viewer's watches —
//! are in `attacks.rs`, against the binary.)

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::{channel_to, client_at};
use tonic::Code;

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
