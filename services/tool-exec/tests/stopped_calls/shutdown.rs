//! A call running when the service shuts down stops, changes nothing, answers
//! UNAVAILABLE and is recorded so; the service stops without waiting for it.

use chorus_tool_exec::Limits;
use tonic::Code;

use crate::service::{Service, WAIT, big_text, many_patches};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_patch_stops_when_the_service_shuts_down() {
    let mut s = Service::start(Limits::default()).await;
    let original = big_text();
    s.write("big.txt", &original);

    let call = s.call("file.patch", many_patches());
    s.authorized("file.patch").await;
    s.shut_down().await;

    let status = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call returned")
        .expect("the client task")
        .expect_err("the call was stopped");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "tool-exec is shutting down; retry on another instance"
    );
    let record = s.recorded().await;
    assert_eq!(record.status, "unavailable");
    assert!(s.read("big.txt") == original.as_bytes(), "the file changed");
    assert_eq!(s.names(), ["big.txt"], "a temporary file was left");
}
