//! Consistent sizes, end to end: the orchestrator with its embedded tool-exec,
//! a run opened over gRPC, and the real chorus-tools binary sending calls of
//! several megabytes on stdin. Files are written whole; history keeps bounded
//! excerpts with the full sizes, in pages a default client can read; a request
//! over the message limit is refused RESOURCE_EXHAUSTED, naming the limit.

use chorus_proto::limits::DEFAULT_MESSAGE_BYTES;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, data};
use std::path::Path;

use chorus_tests::db::databases;
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::{ToolsEnv, chorus_tools_with_stdin};
use chorus_tool_exec::record::{INPUT_BYTES, OUTPUT_EXCERPT_BYTES};
use prost::Message;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

const MB: usize = 1_000_000;

/// An orchestrator on `db`, a workspace at `root` with an agent that may
/// write files and comment, and a run of it opened on an active task.
struct Run {
    orchestrator: Orchestrator,
    client: Client,
    task_id: String,
    env: ToolsEnv,
}

async fn open_run(data_dir: &Path, database_url: &str, root: &Path) -> Run {
    let orchestrator = Orchestrator::start(database_url, data_dir).await;
    let mut client = orchestrator.client().await;
    let workspace = chorus_tests::agents::workspace(&mut client, "big", root).await;
    client
        .create_agent(pb::CreateAgentRequest {
            workspace_id: workspace.id.clone(),
            name: "bulk-writer".into(),
            instructions: "write".into(),
            allowed_tools: vec!["@developer".into(), "task.comment".into()],
            ..Default::default()
        })
        .await
        .expect("agent");
    let opened =
        chorus_tests::agents::opened_run(&mut client, &workspace, "bulk-writer", "large files")
            .await;
    let task_id = opened.run.as_ref().expect("the run").task_id.clone();
    Run {
        env: ToolsEnv {
            token: Some(opened.token),
            tools_addr: Some(opened.tools_addr),
            orchestrator_addr: Some(opened.orchestrator_addr),
        },
        orchestrator,
        client,
        task_id,
    }
}

fn sqlite(dir: &Path) -> String {
    dir.join("chorus.db").display().to_string()
}

/// `size` bytes of text that are not all one letter.
fn content(size: usize) -> String {
    "0123456789abcdefghijklmnopqrstuvwxyz\n"
        .chars()
        .cycle()
        .take(size)
        .collect()
}

/// Sends `call` to chorus-tools on stdin (`chorus-tools [root] -`).
async fn call_on_stdin(env: &ToolsEnv, root: Option<&str>, call: &Value) -> chorus_tests::ToolsRun {
    let args: Vec<&str> = root.into_iter().chain(["-"]).collect();
    chorus_tools_with_stdin(env, &args, call.to_string().into_bytes()).await
}

async fn page(client: &mut Client, task: &str, after: u64, limit: u32) -> Vec<pb::TaskEvent> {
    client
        .get_history(pb::GetHistoryRequest {
            task_id: task.to_owned(),
            after_sequence: after,
            limit,
        })
        .await
        .expect("a history page within the client's 4 MiB")
        .into_inner()
        .events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5_mb_file_create_on_stdin_is_written_whole_and_history_keeps_excerpts_with_sizes() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    let mut run = open_run(data_dir.path(), &sqlite(data_dir.path()), root.path()).await;

    let big = content(5 * MB);
    let created = call_on_stdin(
        &run.env,
        None,
        &json!({"tool": "file.create", "path": "big.txt", "content": big}),
    )
    .await;
    assert_eq!(created.output()["bytes_written"], 5 * MB, "{created:?}");
    let written = std::fs::read_to_string(root.path().join("big.txt")).expect("written");
    assert!(written == big, "the file holds the whole content");

    // More multi-megabyte calls, naming the workspace root too.
    let root_arg = root.path().display().to_string();
    for (n, size) in [3, 4, 6].into_iter().enumerate() {
        let written = call_on_stdin(
            &run.env,
            Some(&root_arg),
            &json!({"tool": "file.create", "path": format!("part{n}.txt"), "content": content(size * MB)}),
        )
        .await;
        assert_eq!(written.output()["bytes_written"], size * MB, "{written:?}");
    }

    // A small page of a client with tonic's default 4 MiB limit reads them all.
    let events = page(&mut run.client, &run.task_id, 0, 20).await;
    let calls: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "tool_executed")
        .map(data)
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    for (call, size) in calls.iter().zip([5, 3, 4, 6]) {
        assert_eq!(call["tool"], "file.create");
        assert_eq!(call["status"], "ok");
        let full = size * MB;
        let cut = call["input"]["content"].as_str().expect("content");
        assert!(cut.len() <= 2048, "{} bytes kept", cut.len());
        assert!(cut.ends_with(&format!("…[{full} bytes]")), "{cut}");
        let input_bytes = call["input_bytes"].as_u64().expect("input_bytes");
        assert!(input_bytes > full as u64, "{input_bytes}");
        assert!(call["output_excerpt"].as_str().expect("excerpt").len() <= OUTPUT_EXCERPT_BYTES);
        assert!(call["output_bytes"].as_u64().expect("output_bytes") > 0);
    }
    for event in &events {
        assert!(
            event.encoded_len() < 2 * INPUT_BYTES,
            "{} is {} bytes",
            event.kind,
            event.encoded_len()
        );
    }
    run.orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_message_limit_is_resource_exhausted_naming_the_limit() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    let run = open_run(data_dir.path(), &sqlite(data_dir.path()), root.path()).await;
    let limit = DEFAULT_MESSAGE_BYTES.to_string();
    let over = content(DEFAULT_MESSAGE_BYTES + MB);

    // tool-exec (the embedded one) and the orchestrator both refuse it.
    for call in [
        json!({"tool": "file.create", "path": "huge.txt", "content": over}),
        json!({"tool": "task.comment", "text": over}),
    ] {
        let refused = call_on_stdin(&run.env, None, &call).await;
        let message = refused.expect_failure(1, "resource_exhausted");
        assert!(
            message.contains(&limit) && message.contains("send less"),
            "{message}"
        );
    }
    assert!(!root.path().join("huge.txt").exists());
    run.orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_large_events_return_every_event_once_in_order() {
    let data_dir = tempfile::tempdir().expect("data dir");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("workspace");
        let dir = tempfile::tempdir_in(data_dir.path()).expect("orchestrator dir");
        let mut run = open_run(dir.path(), &db.url, root.path()).await;
        // Comments are kept whole: 1.5 MB events, between small ones.
        for n in 0..6 {
            let text = if n % 2 == 0 {
                content(1_500_000)
            } else {
                format!("note {n}")
            };
            let commented = call_on_stdin(
                &run.env,
                None,
                &json!({"tool": "task.comment", "text": text}),
            )
            .await;
            assert_eq!(commented.code, 0, "{b}: {commented:?}");
        }
        // GetHistory: pages of at most 20 events, bounded by bytes, in order.
        let mut after = 0;
        let (mut paged, mut comments) = (Vec::new(), 0);
        loop {
            let events = page(&mut run.client, &run.task_id, after, 20).await;
            let Some(end) = events.last() else { break };
            after = end.sequence;
            let bytes: usize = events.iter().map(Message::encoded_len).sum();
            assert!(
                events.len() == 1 || bytes <= 1_100_000,
                "{b}: a page of {} events is {bytes} bytes",
                events.len()
            );
            paged.extend(events.iter().map(|e| e.sequence));
            comments += events.iter().filter(|e| e.kind == "comment_added").count();
        }
        assert_eq!(comments, 6, "{b}");
        let last = chorus_tests::agents::task_of(&mut run.client, &run.task_id)
            .await
            .last_sequence;
        let all: Vec<u64> = (1..=last).collect();
        assert_eq!(paged, all, "{b}");

        // WatchTask: the same events, once each, in order.
        let mut stream = run
            .client
            .watch_task(pb::WatchTaskRequest {
                task_id: run.task_id.clone(),
                after_sequence: 0,
                follow: true,
                until_needed: false,
            })
            .await
            .expect("watch")
            .into_inner();
        let mut watched = Vec::new();
        while watched.len() < all.len() {
            let event = stream.next().await.expect("an event").expect("ok");
            watched.push(event.sequence);
        }
        assert_eq!(watched, all, "{b}");
        drop(stream);
        run.orchestrator.stop().await;
    }
}
