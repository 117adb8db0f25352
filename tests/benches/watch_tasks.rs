//! WatchTasks: one stream following many tasks, against the release
//! orchestrator binary on SQLite (and on PostgreSQL when
//! `CHORUS_TEST_DATABASE_URL` is set).
//!
//! - delivery: 10,000 tasks created, then each moved pending → planning by 8
//!   concurrent writers; a WatchTasks follower over the workspace times each
//!   change from the moment its UpdateTaskStatus was sent (p50/p99 of
//!   10,000). Beside it, the baseline: a WatchTask on one task, changed 200
//!   times the same way.
//! - memory: the orchestrator's resident memory with 1,000 idle followers
//!   (caught up, following from now on), less before, per follower.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench watch_tasks`
//! (`CHORUS_BENCH_TASKS`, `CHORUS_BENCH_FOLLOWERS` and `CHORUS_BENCH_WRITERS`
//! change the sizes; with one writer the feed's row compares with the
//! baseline's, one writer too).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::task_change::Change;
use chorus_tests::agents::Client;
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::stats::{Samples, env_number, ms};
use tokio::sync::Mutex;
use tokio_stream::StreamExt;

/// Concurrent writers by default (`CHORUS_BENCH_WRITERS`).
const WRITERS: usize = 8;
const BASELINE_CHANGES: usize = 200;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let tasks = env_number("CHORUS_BENCH_TASKS", 10_000);
    let followers = env_number("CHORUS_BENCH_FOLLOWERS", 1_000);
    let writers = env_number("CHORUS_BENCH_WRITERS", WRITERS).max(1);
    let dir = tempfile::tempdir().expect("dir");
    // SQLite, and PostgreSQL when configured (each in a schema of its own).
    let databases = chorus_tests::db::databases(dir.path());
    println!("| backend | what | p50 | p99 | n |");
    println!("|---|---|---|---|---|");
    for db in &databases {
        let backend = db.backend;
        let data = dir.path().join(backend);
        let orchestrator = OrchestratorProcess::spawn(&data, &db.url, &[]).await;
        let mut client = orchestrator.client().await;
        let root = dir.path().join(format!("root-{backend}"));
        std::fs::create_dir_all(&root).expect("root");
        let ws = chorus_tests::agents::workspace(&mut client, "many", &root).await;
        let ids = create(&client, &ws, tasks).await;
        let (feed, baseline) = delivery(&client, &ws, &ids, writers).await;
        for (what, samples) in [
            (
                format!("WatchTasks over {tasks} tasks, one change each, {writers} writer(s)"),
                feed,
            ),
            (
                format!("baseline: WatchTask on one task, {BASELINE_CHANGES} changes, 1 writer"),
                baseline,
            ),
        ] {
            let s = Samples::new(samples);
            println!(
                "| {backend} | {what} | {} ms | {} ms | {} |",
                ms(s.percentile(50.0)),
                ms(s.percentile(99.0)),
                s.len()
            );
        }
        let per_follower = memory(&orchestrator, &ws, followers).await;
        println!(
            "| {backend} | resident memory per idle follower ({followers} followers) | {per_follower:.1} KiB | | |"
        );
        orchestrator.stop().await;
    }
}

async fn create(client: &Client, ws: &pb::Workspace, n: usize) -> Vec<String> {
    let ids = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (mut client, ws, ids) = (client.clone(), ws.id.clone(), Arc::clone(&ids));
        writers.spawn(async move {
            for i in (w..n).step_by(WRITERS) {
                let task = client
                    .create_task(pb::CreateTaskRequest {
                        budget: None,
                        workspace_id: ws.clone(),
                        description: format!("task {i}"),
                        source: None,
                        ..Default::default()
                    })
                    .await
                    .expect("create")
                    .into_inner();
                ids.lock().await.push(task.id);
            }
        });
    }
    while writers.join_next().await.is_some() {}
    Arc::try_unwrap(ids).expect("writers done").into_inner()
}

/// Each task moved once by `writers` at once, timed from the call to its
/// arrival on one WatchTasks stream; then the WatchTask baseline.
async fn delivery(
    client: &Client,
    ws: &pb::Workspace,
    ids: &[String],
    writers: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let sent: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut stream = client
        .clone()
        .watch_tasks(pb::WatchTasksRequest {
            workspace_id: ws.id.clone(),
            kinds: vec!["status_changed".into()],
            ..Default::default()
        })
        .await
        .expect("follow")
        .into_inner();
    let first = stream.next().await.expect("caught up").expect("ok");
    assert!(matches!(first.change, Some(Change::CaughtUp(_))));
    let expected = ids.len();
    let follower = {
        let sent = Arc::clone(&sent);
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(expected);
            while latencies.len() < expected {
                let change = stream.next().await.expect("open").expect("ok");
                let at = Instant::now();
                let from = sent.lock().expect("lock").get(&change.task_id).copied();
                latencies.push(at - from.expect("a change that was sent"));
            }
            latencies
        })
    };
    let mut moving = tokio::task::JoinSet::new();
    for w in 0..writers {
        let mut client = client.clone();
        let mine: Vec<String> = ids.iter().skip(w).step_by(writers).cloned().collect();
        let sent = Arc::clone(&sent);
        moving.spawn(async move {
            for id in mine {
                sent.lock()
                    .expect("lock")
                    .insert(id.clone(), Instant::now());
                client
                    .update_task_status(pb::UpdateTaskStatusRequest {
                        task_id: id,
                        status: "planning".into(),
                        ..Default::default()
                    })
                    .await
                    .expect("move");
            }
        });
    }
    while moving.join_next().await.is_some() {}
    let feed = follower.await.expect("follower");
    (feed, baseline(client, ws).await)
}

/// A new task's planning changed again and again, followed with WatchTask.
async fn baseline(client: &Client, ws: &pb::Workspace) -> Vec<Duration> {
    let mut client = client.clone();
    let created = client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: ws.id.clone(),
            description: "changed again and again".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    let (task, after) = (created.id.as_str(), created.last_sequence);
    let mut stream = client
        .watch_task(pb::WatchTaskRequest {
            task_id: task.to_owned(),
            after_sequence: after,
            follow: true,
            until_needed: false,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut latencies = Vec::with_capacity(BASELINE_CHANGES);
    for n in 0..BASELINE_CHANGES {
        let from = Instant::now();
        client
            .update_planning(pb::UpdatePlanningRequest {
                task_id: task.to_owned(),
                planning: Some(pb::Planning {
                    summary: format!("change {n}"),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("change");
        stream.next().await.expect("open").expect("event");
        latencies.push(from.elapsed());
    }
    latencies
}

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Followers per API key: under the port's streams-per-credential limit (256).
const PER_KEY: usize = 200;

/// The orchestrator's memory per idle follower, in KiB (viewer keys of
/// their own, [`PER_KEY`] followers each).
async fn memory(orchestrator: &OrchestratorProcess, ws: &pb::Workspace, followers: usize) -> f64 {
    let mut admin = orchestrator.client().await;
    let mut clients = Vec::new();
    for k in 0..followers.div_ceil(PER_KEY) {
        let key = admin
            .create_api_key(pb::CreateApiKeyRequest {
                name: format!("follower-{k}"),
                role: pb::Role::Viewer.into(),
            })
            .await
            .expect("key")
            .into_inner()
            .secret;
        clients.push(chorus_tests::orchestrator::client_at(orchestrator.addr, &key).await);
    }
    let pid = orchestrator.pid();
    let before = rss_kib(pid);
    let mut streams = Vec::with_capacity(followers);
    for n in 0..followers {
        let mut stream = clients[n / PER_KEY]
            .watch_tasks(pb::WatchTasksRequest {
                workspace_id: ws.id.clone(),
                ..Default::default()
            })
            .await
            .expect("follow")
            .into_inner();
        stream.next().await.expect("caught up").expect("ok");
        streams.push(stream);
    }
    let after = rss_kib(pid);
    drop(streams);
    #[allow(clippy::cast_precision_loss)]
    let per = after.saturating_sub(before) as f64 / followers as f64;
    per
}
