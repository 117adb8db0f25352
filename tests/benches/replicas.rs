//! Replicas on one PostgreSQL database (`chorus_tests::cluster`: replica
//! processes behind a round-robin balancer, one tool-exec, the fake CLI as
//! the agent), with 1, 2 and 3 replicas side by side:
//!
//! - runs/s and tool calls/s: 60 tasks started round-robin over the
//!   replicas, each run reading a file five times through chorus-tools and
//!   tool-exec (authorized and recorded by whichever replica the balancer
//!   picks), then reporting;
//! - WatchTask delivery: a change committed on replica r0 (UpdatePlanning),
//!   seen by a watcher on r0 itself and on the other replicas (commit →
//!   delivery, p50/p99 of 200);
//! - NOTIFY latency on the bare database (NOTIFY → LISTEN, p50/p99 of 500),
//!   beside a `SELECT 1` round trip on the same connection;
//! - takeover: runs waiting on the last replica, which is killed (SIGKILL):
//!   the time until every one is resumed on another replica, with 3-second
//!   leases.
//!
//! `cargo bench -p chorus-tests --bench replicas` (CHORUS_TEST_DATABASE_URL
//! names the PostgreSQL database; without it the benchmark says so and ends).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{add_agent, data, planned_task, report, start};
use chorus_tests::cluster::Cluster;
use chorus_tests::stats::Samples;
use tokio::sync::Mutex;
use tokio_stream::StreamExt;

const LEASE_SECS: u64 = 3;
const TASKS: usize = 60;
const READS: usize = 5;
const CHANGES: usize = 200;
const NOTICES: usize = 500;
const WAITING: usize = 10;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let Ok(url) = std::env::var(chorus_tests::db::DATABASE_URL_VAR) else {
        eprintln!("CHORUS_TEST_DATABASE_URL is not set: the replicas benchmark needs PostgreSQL");
        return;
    };
    let (notify, select) = notify_latency(&url).await;
    println!("| what | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| NOTIFY → LISTEN, bare database | {:.2} ms | {:.2} ms |",
        ms(Samples::new(notify.clone()).percentile(50.0)),
        ms(Samples::new(notify.clone()).percentile(99.0))
    );
    println!(
        "| `SELECT 1` round trip (baseline) | {:.2} ms | {:.2} ms |",
        ms(Samples::new(select.clone()).percentile(50.0)),
        ms(Samples::new(select.clone()).percentile(99.0))
    );
    println!();
    println!(
        "| replicas | runs/s | tool calls/s | delivery on r0 p50 / p99 | delivery on another replica p50 / p99 | death → runs resumed ({WAITING} runs, {LEASE_SECS} s lease) |"
    );
    println!("|---|---|---|---|---|---|");
    for n in 1..=3 {
        let mut cluster = Cluster::start(n, LEASE_SECS)
            .await
            .expect("PostgreSQL is configured");
        let mut client = cluster.client(0).await;
        let ws = cluster.team(&mut client).await;
        add_agent(&mut client, &ws, "reader", &["file.read"], "claude").await;
        std::fs::write(cluster.root.path().join("notes.txt"), "notes\n").expect("notes");
        chorus_sandbox::testing::give_to_test_user(cluster.root.path());
        let (runs, calls) = throughput(&cluster, &ws).await;
        let (local, remote) = delivery(&cluster, &ws).await;
        let takeover = if n >= 2 {
            format!("{:.2} s", takeover(&mut cluster, &ws).await.as_secs_f64())
        } else {
            "—".to_owned()
        };
        let remote = if remote.is_empty() {
            "—".to_owned()
        } else {
            format!(
                "{:.2} / {:.2} ms",
                ms(Samples::new(remote.clone()).percentile(50.0)),
                ms(Samples::new(remote.clone()).percentile(99.0))
            )
        };
        println!(
            "| {n} | {runs:.1} | {calls:.1} | {:.2} / {:.2} ms | {remote} | {takeover} |",
            ms(Samples::new(local.clone()).percentile(50.0)),
            ms(Samples::new(local.clone()).percentile(99.0)),
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// NOTIFY → LISTEN on two connections of the bare database, and `SELECT 1`.
async fn notify_latency(url: &str) -> (Vec<Duration>, Vec<Duration>) {
    use tokio_postgres::{AsyncMessage, NoTls};
    let (listener, mut connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send((Instant::now(), n.payload().to_owned()));
            }
        }
    });
    listener
        .batch_execute("LISTEN chorus_bench")
        .await
        .expect("listen");
    let (sender, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    let mut notify = Vec::new();
    let mut select = Vec::new();
    for i in 0..NOTICES {
        let sent = Instant::now();
        sender
            .execute("SELECT pg_notify('chorus_bench', $1)", &[&i.to_string()])
            .await
            .expect("notify");
        let (at, payload) = rx.recv().await.expect("notice");
        assert_eq!(payload, i.to_string());
        notify.push(at - sent);
        let asked = Instant::now();
        sender.execute("SELECT 1", &[]).await.expect("select");
        select.push(asked.elapsed());
    }
    (notify, select)
}

/// Tasks started round-robin over the replicas, each reading a file
/// [`READS`] times and reporting: (runs/s, tool calls/s).
async fn throughput(cluster: &Cluster, ws: &pb::Workspace) -> (f64, f64) {
    let read =
        chorus_tests::agents::call(&serde_json::json!({"tool": "file.read", "path": "notes.txt"}));
    let script = std::iter::repeat_n(read, READS)
        .chain([report("complete", "read")])
        .collect::<Vec<_>>()
        .join("\n");
    let up = cluster.up();
    let mut clients = Vec::new();
    for i in &up {
        clients.push(cluster.client(*i).await);
    }
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        tasks.push(planned_task(&mut clients[0], ws, &script).await);
    }
    let started = Instant::now();
    let mut waits = Vec::new();
    for (n, task) in tasks.iter().enumerate() {
        let mut client = clients[n % clients.len()].clone();
        let task = task.clone();
        waits.push(tokio::spawn(async move {
            start(&mut client, &task, "reader", 0).await;
            chorus_tests::agents::settled(&mut client, &task.id)
                .await
                .status
        }));
    }
    for wait in waits {
        let status = wait.await.expect("task");
        assert_eq!(status, "completed");
    }
    let secs = started.elapsed().as_secs_f64();
    (TASKS as f64 / secs, (TASKS * READS) as f64 / secs)
}

/// Changes committed on r0, delivered to watchers on every replica:
/// (latencies on r0, latencies on the others).
async fn delivery(cluster: &Cluster, ws: &pb::Workspace) -> (Vec<Duration>, Vec<Duration>) {
    let mut writer = cluster.client(0).await;
    let task = planned_task(&mut writer, ws, "changed again and again").await;
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    // Each watcher says when it has seen the warm-up change: it follows live.
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watchers = Vec::new();
    for i in cluster.up() {
        let mut client = cluster.client(i).await;
        let mut stream = client
            .watch_task(pb::WatchTaskRequest {
                task_id: task.id.clone(),
                after_sequence: 0,
                follow: true,
                until_needed: false,
            })
            .await
            .expect("watch")
            .into_inner();
        let (sent, ready) = (Arc::clone(&sent), ready_tx.clone());
        watchers.push((
            i,
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut warm = false;
                while let Some(Ok(event)) = stream.next().await {
                    if event.kind != "planning_updated" {
                        continue;
                    }
                    let at = Instant::now();
                    if !warm {
                        warm = true;
                        let _ = ready.send(());
                        continue;
                    }
                    let k = latencies.len();
                    let from = sent.lock().await[k];
                    latencies.push(at - from);
                    if latencies.len() == CHANGES {
                        break;
                    }
                }
                latencies
            }),
        ));
    }
    let change = |summary: String| pb::UpdatePlanningRequest {
        id: task.id.clone(),
        planning: Some(pb::Planning {
            summary,
            ..Default::default()
        }),
        ..Default::default()
    };
    writer
        .update_planning(change("warm-up".to_owned()))
        .await
        .expect("update");
    for _ in 0..watchers.len() {
        ready_rx.recv().await.expect("a watcher is ready");
    }
    for k in 0..CHANGES {
        sent.lock().await.push(Instant::now());
        writer
            .update_planning(change(format!("change {k}")))
            .await
            .expect("update");
    }
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for (i, watcher) in watchers {
        let latencies = watcher.await.expect("watcher");
        if i == 0 {
            local = latencies;
        } else {
            remote.extend(latencies);
        }
    }
    (local, remote)
}

/// Runs waiting on the last replica, which is killed: the time until every
/// one of them is resumed elsewhere.
async fn takeover(cluster: &mut Cluster, ws: &pb::Workspace) -> Duration {
    let victim = *cluster.up().last().expect("replicas");
    let mut on_victim = cluster.client(victim).await;
    let mut observer = cluster.client(0).await;
    let script = "fake: wait gate.fifo\nfake-resume: say resumed";
    let mut tasks = Vec::new();
    for _ in 0..WAITING {
        let task = planned_task(&mut on_victim, ws, script).await;
        start(&mut on_victim, &task, "c", 0).await;
        tasks.push(task);
    }
    for task in &tasks {
        chorus_tests::agents::wait_for(&mut observer, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["text"] == "waiting on gate.fifo"
        })
        .await;
    }
    let mut watches = Vec::new();
    for task in &tasks {
        let mut client = observer.clone();
        let id = task.id.clone();
        watches.push(tokio::spawn(async move {
            chorus_tests::agents::wait_for(&mut client, &id, |e| e.kind == "run_resumed").await;
            Instant::now()
        }));
    }
    let killed = Instant::now();
    cluster.take(victim).kill().await;
    let mut last = killed;
    let mut resumed = BTreeSet::new();
    for (n, watch) in watches.into_iter().enumerate() {
        last = last.max(watch.await.expect("resumed"));
        resumed.insert(n);
    }
    assert_eq!(resumed.len(), WAITING);
    for task in &tasks {
        let _ = observer
            .cancel_task(pb::CancelTaskRequest {
                id: task.id.clone(),
                reason: "benchmark over".into(),
                ..Default::default()
            })
            .await;
    }
    last - killed
}
