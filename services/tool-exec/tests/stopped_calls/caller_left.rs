//! The client goes away mid-call: the call stops unless it already made its
//! change, and is recorded either way.

use std::time::Duration;

use chorus_sandbox::testing::eventually;
use chorus_tool_exec::Limits;
use chorus_tool_exec::record::{INPUT_BYTES, JSON_START, json_len};
use serde_json::json;
use tonic::Code;

use crate::service::{GateEvent, Service, big_text, many_patches};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_patch_whose_client_leaves_stops_changes_nothing_and_is_recorded() {
    let mut s = Service::start(Limits::default()).await;
    let original = big_text();
    s.write("big.txt", &original);

    let call = s.call("file.patch", many_patches());
    s.authorized("file.patch").await;
    call.abort();

    let record = s.recorded().await;
    assert_eq!(record.tool, "file.patch");
    assert_eq!(
        record.status, "cancelled",
        "the call ran on after its client left: {}",
        record.output_excerpt
    );
    assert_eq!(
        record.output_excerpt,
        "the caller went away before file.patch finished; it was stopped and nothing was changed"
    );
    // History keeps the start of the 10,000 patches, and their full size.
    assert_eq!(record.input_bytes, json_len(&many_patches()));
    assert!(json_len(&record.input) <= INPUT_BYTES as u64);
    assert!(
        record.input[JSON_START].as_str().is_some_and(
            |start| start.contains(r#"{"find":"line 000000 ","replace":"LINE 000000 "}"#)
        ),
        "{}",
        record.input
    );
    assert!(s.read("big.txt") == original.as_bytes(), "the file changed");
    assert_eq!(s.names(), ["big.txt"], "a temporary file was left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_left_before_it_was_recorded_is_still_recorded() {
    let mut s = Service::start_with_held_records(Limits::default()).await;
    s.write("notes.txt", "old\n");

    // The client's deadline passes while the gate holds the record: the server
    // drops the call's handler, as when a client leaves.
    let call = s.call_within(
        "file.write",
        json!({ "path": "notes.txt", "content": "new\n" }),
        Some(Duration::from_secs(1)),
    );
    s.authorized("file.write").await;
    match s.event().await {
        GateEvent::Recording(tool) => assert_eq!(tool, "file.write"),
        other => panic!("expected the record to arrive, got {other:?}"),
    }
    assert_eq!(s.read("notes.txt"), b"new\n", "the change was made");
    // tonic's server answers a passed grpc-timeout with CANCELLED, once it has
    // dropped the handler.
    let answer = call.await.expect("the client task");
    let status = answer.expect_err("the client's deadline passed");
    assert_eq!(
        (status.code(), status.message()),
        (Code::Cancelled, "Timeout expired"),
        "{status:?}"
    );
    s.release_record();

    let record = s.recorded().await;
    assert_eq!(record.tool, "file.write");
    assert_eq!(record.status, "ok");
    assert_eq!(record.input["content"], "new\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_committed_before_the_client_left_is_made_and_recorded_as_done() {
    let mut s = Service::start(Limits::default()).await;
    let content = "c".repeat(2 * 1024 * 1024);
    let call = s.call(
        "file.create",
        json!({ "path": "new/dir/made.txt", "content": content }),
    );
    s.authorized("file.create").await;
    // Making the first missing directory commits the call; the content is
    // written and linked into place after that.
    eventually("the call committed its change", || {
        s.root.join("new").exists()
    })
    .await;
    call.abort();

    let record = s.recorded().await;
    assert_eq!(record.tool, "file.create");
    assert_eq!(record.status, "ok", "{}", record.output_excerpt);
    assert!(
        s.read("new/dir/made.txt") == content.as_bytes(),
        "the change was not completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_client_leaves_is_recorded_as_what_it_did() {
    const ROUNDS: usize = 10;
    let mut s = Service::start(Limits::default()).await;
    let mut before = b"round -\n".to_vec();
    s.write("out.txt", &before);
    let (mut done, mut stopped) = (0, 0);
    for round in 0..ROUNDS {
        // Small writes mostly commit before the client's leaving is seen, big
        // ones mostly do not.
        let size = if round % 2 == 0 { 16 } else { 2 * 1024 * 1024 };
        let content = format!("round {round}\n{}\n", "w".repeat(size));
        let call = s.call(
            "file.write",
            json!({ "path": "out.txt", "content": content }),
        );
        s.authorized("file.write").await;
        call.abort();

        let record = s.recorded().await;
        let now = s.read("out.txt");
        match record.status.as_str() {
            // The change was made after the client left, or just before: recorded as done.
            "ok" => {
                assert!(
                    now == content.as_bytes(),
                    "round {round}: recorded ok, file differs"
                );
                done += 1;
            }
            "cancelled" => {
                assert!(
                    now == before,
                    "round {round}: recorded cancelled, file changed"
                );
                stopped += 1;
            }
            other => panic!("round {round}: {other}: {}", record.output_excerpt),
        }
        eventually("the stopped write removed its temporary file", || {
            s.names() == ["out.txt"]
        })
        .await;
        before = now;
    }
    eprintln!("writes whose client left: {done} made and recorded ok, {stopped} stopped");
}
