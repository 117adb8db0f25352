//! `chorus task watch` and `chorus task list --watch` across replica changes:
//! two orchestrator replicas on one PostgreSQL behind a TCP balancer, as a
//! Kubernetes Service runs them. Each replica in turn stops while both
//! commands follow through the balancer; changes made while they are away are
//! shown once they reconnect — by themselves, to the other replica, from
//! their cursor — every one once and in order, and `task watch` ends with the
//! task's exit code.
//!
//! Needs PostgreSQL (`CHORUS_TEST_DATABASE_URL`); skipped without it, unless
//! `CHORUS_TEST_REQUIRE_POSTGRES=1` (CI), where a missing one fails it.

use std::process::Stdio;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::cluster::Cluster;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

const CHORUS: &str = env!("CARGO_BIN_EXE_chorus");

/// `chorus args -o json` against the balancer, its JSON lines read as they come.
fn chorus(
    cluster: &Cluster,
    key_file: &std::path::Path,
    args: &[&str],
) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = tokio::process::Command::new(CHORUS)
        .args(args)
        .args(["-o", "json"])
        .env(
            "CHORUS_ADDRESS",
            format!("http://{}", cluster.balancer.addr),
        )
        .env("CHORUS_API_KEY_FILE", key_file)
        .env("CHORUS_CONFIG", cluster.dir.path().join("none.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run chorus");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

/// Reads JSON lines until `until` holds for one; returns them all.
async fn read_until(
    lines: &mut Lines<BufReader<ChildStdout>>,
    until: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut seen = Vec::new();
    while let Some(line) = lines.next_line().await.expect("chorus's output") {
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let done = until(&value);
        seen.push(value);
        if done {
            return seen;
        }
    }
    panic!("chorus stopped before the awaited line; it said {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn task_watch_and_list_watch_follow_across_replica_changes_missing_nothing() {
    let Some(mut cluster) = Cluster::start(2, 10).await else {
        eprintln!("CHORUS_TEST_DATABASE_URL is not set: replicas need PostgreSQL; skipped");
        return;
    };
    let mut client = cluster.client(0).await;
    let ws = cluster.team(&mut client).await;
    let task = client
        .create_task(pb::CreateTaskRequest {
            workspace_id: ws.id.clone(),
            description: "Followed across replicas.".into(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    let key_file = cluster.dir.path().join("cli.key");
    std::fs::write(&key_file, format!("{}\n", cluster.replica(0).admin_key)).expect("key");
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");

    let (mut watch, mut watched) = chorus(&cluster, &key_file, &["task", "watch", &task.id]);
    let (mut list, mut listed) = chorus(&cluster, &key_file, &["task", "list", "--watch"]);
    // Both follow: the task's first event, and the list's catch-up line.
    let mut events = read_until(&mut watched, |v| v["kind"] == "task_created").await;
    read_until(&mut listed, |v| v.get("caughtUp").is_some()).await;

    // Each replica in turn goes, with changes made while it is away (the
    // task's budget, a task created); it comes back before the other goes.
    let mut changes = Vec::new();
    for gone in [0_usize, 1] {
        let other = 1 - gone;
        let stopped = cluster.take(gone);
        stopped.stop().await;
        let mut client = cluster.client(other).await;
        client
            .update_task_budget(pb::UpdateTaskBudgetRequest {
                task_id: task.id.clone(),
                budget: Some(pb::Budget {
                    tokens: Some(1_000 * (gone as u64 + 1)),
                    ..Default::default()
                }),
            })
            .await
            .expect("budget");
        let made = format!("made while r{gone} was away");
        client
            .create_task(pb::CreateTaskRequest {
                workspace_id: ws.id.clone(),
                description: made.clone(),
                ..Default::default()
            })
            .await
            .expect("task");
        events.extend(
            read_until(&mut watched, |v| {
                v["kind"] == "budget_changed"
                    && v["data"]
                        .to_string()
                        .contains(&format!("{}", 1_000 * (gone + 1)))
            })
            .await,
        );
        changes.extend(
            read_until(&mut listed, |v| {
                v["event"]["kind"] == "task_created" && v["event"]["data"]["description"] == made
            })
            .await,
        );
        cluster.start_replica(gone).await;
    }
    let mut client = cluster.client(0).await;
    client
        .cancel_task(pb::CancelTaskRequest {
            task_id: task.id.clone(),
            reason: "done following".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    events.extend(read_until(&mut watched, |v| v.get("end").is_some()).await);
    let canceled = |v: &Value| {
        v["event"]["kind"] == "status_changed" && v["event"]["data"]["to"] == "canceled"
    };
    changes.extend(read_until(&mut listed, canceled).await);

    // task watch: every event once, in order, and the task's end.
    let sequences: Vec<u64> = events
        .iter()
        .filter_map(|v| v["sequence"].as_u64())
        .collect();
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(
        sequences, expected,
        "every event once, in order: {events:#?}"
    );
    let end = events.last().expect("the end line");
    assert_eq!(end["exitCode"], 4, "{end}");
    let status = watch.wait().await.expect("task watch ends");
    assert_eq!(status.code(), Some(4), "canceled");
    // task list --watch: the tasks made while a replica was away, and the
    // cancel, once each and in order.
    let seen: Vec<String> = changes
        .iter()
        .filter_map(|v| match v["event"]["kind"].as_str() {
            Some("task_created") => v["event"]["data"]["description"]
                .as_str()
                .map(str::to_owned),
            Some("status_changed") => v["event"]["data"]["to"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        [
            "made while r0 was away",
            "made while r1 was away",
            "canceled"
        ],
        "{changes:#?}"
    );
    let stderr = {
        let _ = list.start_kill();
        let output = list.wait_with_output().await.expect("list ends");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    assert!(
        stderr.contains("following again from cursor"),
        "it said why it reconnected: {stderr}"
    );
}
