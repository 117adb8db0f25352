//! Store and history throughput: CreateTask and event appends on SQLite and
//! PostgreSQL, and WatchTask fan-out latency (commit → delivery) to 100 watchers.
//!
//! `cargo bench -p chorus-orchestrator --bench store_throughput`
//! PostgreSQL rows run when CHORUS_BENCH_DATABASE_URL is set
//! (e.g. postgres://postgres@127.0.0.1:5432/test; a fresh schema is used and dropped).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_orchestrator::domain::{EventKind, Name, TaskId, TaskSource, WorkspaceId};
use chorus_orchestrator::history::{EventHub, Until, watch_task};
use chorus_orchestrator::secrets::SecretBox;
use chorus_orchestrator::store::Store;
use serde_json::json;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

const TASKS: usize = 2000;
const APPENDS: usize = 4000;
const CONCURRENCY: usize = 16;
const WATCHERS: usize = 100;
const FANOUT_EVENTS: usize = 200;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn bench(label: &str, store: Store, root: &std::path::Path) {
    let workspace = store
        .create_workspace(
            Name::parse("name", &format!("bench-{}", uuid::Uuid::new_v4().simple())).expect("name"),
            &root.display().to_string(),
        )
        .await
        .expect("workspace");
    let ws: WorkspaceId = workspace.id;

    // CreateTask throughput.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in (worker..TASKS).step_by(CONCURRENCY) {
                let (task, _) = store
                    .create_task(ws, format!("task {n}"), TaskSource::default())
                    .await
                    .expect("create");
                ids.push(task.id);
            }
            ids
        }));
    }
    let mut ids: Vec<TaskId> = Vec::new();
    for t in tasks {
        ids.extend(t.await.expect("worker"));
    }
    let create_rate = TASKS as f64 / started.elapsed().as_secs_f64();

    // Event append throughput, spread over 16 tasks (appends to one task serialize).
    let targets: Vec<TaskId> = ids.iter().take(CONCURRENCY).copied().collect();
    let started = Instant::now();
    let mut workers = Vec::new();
    for (worker, task) in targets.iter().copied().enumerate() {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            for n in 0..APPENDS / CONCURRENCY {
                store
                    .append_events(
                        task,
                        vec![(
                            EventKind::CommentAdded,
                            json!({"text": format!("w{worker} n{n}")}),
                        )],
                    )
                    .await
                    .expect("append");
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let append_rate = APPENDS as f64 / started.elapsed().as_secs_f64();
    println!("| {label} | CreateTask, {CONCURRENCY} concurrent | {create_rate:.0}/s |");
    println!("| {label} | event append, {CONCURRENCY} tasks in parallel | {append_rate:.0}/s |");

    // WatchTask fan-out: 100 watchers of one task; latency from commit to delivery.
    let hub = Arc::new(EventHub::new());
    let task = ids[CONCURRENCY];
    let committed: Arc<Mutex<Vec<Option<Instant>>>> =
        Arc::new(Mutex::new(vec![None; FANOUT_EVENTS + 2]));
    let cancel = CancellationToken::new();
    let mut receivers = Vec::new();
    for _ in 0..WATCHERS {
        let (tx, mut rx) = mpsc::channel(64);
        let (store, hub, token) = (store.clone(), Arc::clone(&hub), cancel.clone());
        tokio::spawn(
            async move { watch_task(&store, &hub, task, 1, Until::NEVER, tx, token).await },
        );
        let committed = Arc::clone(&committed);
        receivers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while let Some(Ok(event)) = rx.recv().await {
                let now = Instant::now();
                let at = committed.lock().await[event.sequence as usize];
                if let Some(at) = at {
                    latencies.push(now.saturating_duration_since(at));
                }
                if latencies.len() == FANOUT_EVENTS {
                    break;
                }
            }
            latencies
        }));
    }
    // Let every watcher finish its (empty) replay and subscribe.
    while hub.watched_tasks() == 0 {
        tokio::task::yield_now().await;
    }
    for n in 0..FANOUT_EVENTS {
        let events = store
            .append_events(task, vec![(EventKind::CommentAdded, json!({"text": n}))])
            .await
            .expect("append");
        let now = Instant::now();
        {
            let mut c = committed.lock().await;
            for e in &events {
                c[e.sequence as usize] = Some(now);
            }
        }
        hub.publish(&events);
    }
    let mut all = Vec::new();
    for r in receivers {
        all.extend(r.await.expect("receiver"));
    }
    cancel.cancel();
    all.sort_unstable();
    println!(
        "| {label} | WatchTask fan-out to {WATCHERS} watchers ({} deliveries) | p50 {:.3} ms, p99 {:.3} ms |",
        all.len(),
        percentile(&all, 50.0).as_secs_f64() * 1e3,
        percentile(&all, 99.0).as_secs_f64() * 1e3
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        println!("| backend | measure | result |\n|---|---|---|");
        let sqlite = Store::open(
            &dir.path().join("bench.db").display().to_string(),
            SecretBox::ephemeral(),
        )
        .await
        .expect("sqlite");
        bench("SQLite", sqlite, dir.path()).await;
        if let Ok(url) = std::env::var("CHORUS_BENCH_DATABASE_URL") {
            let schema = format!("chorus_bench_{}", uuid::Uuid::new_v4().simple());
            let admin = tokio::process::Command::new("psql")
                .args([url.as_str(), "-qc", &format!("CREATE SCHEMA {schema}")])
                .status()
                .await
                .expect("psql");
            assert!(admin.success(), "cannot create schema {schema} with psql");
            let sep = if url.contains('?') { '&' } else { '?' };
            let pg = Store::open(
                &format!("{url}{sep}options=-c%20search_path%3D{schema}"),
                SecretBox::ephemeral(),
            )
            .await
            .expect("postgres");
            bench("PostgreSQL", pg, dir.path()).await;
            let _ = tokio::process::Command::new("psql")
                .args([
                    url.as_str(),
                    "-qc",
                    &format!("DROP SCHEMA {schema} CASCADE"),
                ])
                .status()
                .await;
        }
    });
}
