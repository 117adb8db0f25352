//! Overload: N API-agent runs (each reads a file four times at once, then
//! reports) against the orchestrator binary, on SQLite and — with
//! `CHORUS_TEST_DATABASE_URL` — PostgreSQL, two ways side by side in one
//! run: released at once (every run waits at a gate in front of the model,
//! then all go), and started one after another with the gate open (the
//! baseline: the same work, never all at once). For each: how many tasks
//! completed, failed, had a run handed on (the replica could not keep its
//! leases) or were left active, the time until the last completed, and the
//! completions per second.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench overload`
//! (CHORUS_BENCH_RUNS: runs, default 1000).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, history};
use chorus_tests::db::databases;
use chorus_tests::overload::ReadingRuns;
use chorus_tests::stats::env_number;

/// Every task of `status`, by id.
async fn tasks_in(client: &mut Client, status: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_tasks(pb::ListTasksRequest {
                status: status.into(),
                page_size: 500,
                page_token,
                ..Default::default()
            })
            .await
            .expect("list tasks")
            .into_inner();
        ids.extend(page.tasks.into_iter().map(|t| t.id));
        if page.next_page_token.is_empty() {
            return ids;
        }
        page_token = page.next_page_token;
    }
}

struct Row {
    completed: usize,
    failed: usize,
    handed_on: usize,
    active: usize,
    last_done: Duration,
}

async fn measure(url: &str, runs: usize, at_once: bool) -> Row {
    let mut load = ReadingRuns::plan(url, &[], runs, !at_once).await;
    let mut began = Instant::now();
    load.start_all().await;
    if at_once {
        load.model.at_gate(runs).await;
        began = Instant::now();
        load.model.open_gate();
    }
    let admin = &mut load.admin;
    let mut done: HashMap<String, Duration> = HashMap::new();
    let ended = ["completed", "failed", "waiting", "canceled"];
    let deadline = Instant::now() + Duration::from_secs(1200);
    while done.len() < runs && Instant::now() < deadline {
        for status in ended {
            for id in tasks_in(admin, status).await {
                done.entry(id).or_insert_with(|| began.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last_done = done.values().max().copied().unwrap_or_default();
    let completed = tasks_in(admin, "completed").await.len();
    let failed = tasks_in(admin, "failed").await.len();
    let active = tasks_in(admin, "active").await.len();
    let mut handed_on = 0;
    for task in &load.tasks {
        if history(admin, &task.id)
            .await
            .iter()
            .any(|e| e.kind == "run_resumed")
        {
            handed_on += 1;
        }
    }
    load.orchestrator.kill().await;
    Row {
        completed,
        failed,
        handed_on,
        active,
        last_done,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = env_number("CHORUS_BENCH_RUNS", 1000);
    println!(
        "{runs} API-agent runs (4 file.read at once, then the report), orchestrator binary with its defaults\n"
    );
    println!(
        "| database | started | completed | failed | handed on | left active | last completed after | completions/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for at_once in [true, false] {
        // A database of its own for each row.
        let data = tempfile::tempdir().expect("data");
        for db in databases(data.path()) {
            let row = measure(&db.url, runs, at_once).await;
            let how = if at_once {
                "released at once"
            } else {
                "one after another (baseline)"
            };
            let rate = row.completed as f64 / row.last_done.as_secs_f64().max(0.001);
            println!(
                "| {} | {how} | {} | {} | {} | {} | {:.1} s | {rate:.0} |",
                db.backend,
                row.completed,
                row.failed,
                row.handed_on,
                row.active,
                row.last_done.as_secs_f64(),
            );
        }
    }
}
