//! A call that runs past its deadline stops, changes nothing, answers
//! DEADLINE_EXCEEDED and is recorded so.

use std::time::Duration;

use chorus_tool_exec::Limits;
use tonic::Code;

use crate::service::{Service, WAIT, big_text, many_patches};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_past_its_deadline_stops_and_changes_nothing() {
    let mut s = Service::start(Limits {
        tool_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    let original = big_text();
    s.write("big.txt", &original);

    let call = s.call("file.patch", many_patches());
    let status = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call returned")
        .expect("the client task")
        .expect_err("the call ran past its deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().starts_with(
            "file.patch ran past its 1-second deadline and was stopped; nothing was changed"
        ),
        "{status:?}"
    );
    assert!(s.read("big.txt") == original.as_bytes(), "the file changed");
    assert_eq!(s.names(), ["big.txt"], "a temporary file was left");

    s.authorized("file.patch").await;
    let record = s.recorded().await;
    assert_eq!(record.status, "deadline_exceeded");
}
