//! The cost of the accounting, against the release orchestrator binary on
//! SQLite (and PostgreSQL when `CHORUS_TEST_DATABASE_URL` is set):
//!
//! - GetUsage over 1,000,000 recorded model calls (ledger rows and their day
//!   sums, written straight into the database: 10 agents over 30 days),
//!   grouped by agent and day: p50/p99 of 200 calls, beside a bare unary call
//!   (GetStatus) on the same server.
//! - What each model call and tool call costs with budgets on and off: an
//!   API agent's runs (5 × 40 model calls), each call asking for a file.read
//!   (the fake model answers at once); the time between consecutive
//!   `tool_executed` events (one model call and one tool call each, ms
//!   resolution), with no budget, and with a task budget and a workspace day
//!   limit (checked under the workspace's row lock at each call).
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench usage`
//! (`CHORUS_BENCH_CALLS` changes the 1,000,000).

use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, add_agent, data, planned_task, start, wait_for};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::stats::{Samples, env_number, ms};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, SqliteConnection};
use serde_json::json;

const REQUESTS: usize = 200;
/// Model calls of one run (an API agent's attempt has at most 50 turns).
const AGENT_CALLS: usize = 40;
/// Runs, one after the other, each on a task of its own.
const AGENT_RUNS: usize = 5;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let calls = env_number("CHORUS_BENCH_CALLS", 1_000_000);
    let dir = tempfile::tempdir().expect("dir");
    println!("| backend | what | p50 | p99 | n |");
    println!("|---|---|---|---|---|");
    for db in chorus_tests::db::databases(dir.path()) {
        let backend = db.backend;
        let data_dir = dir.path().join(backend);
        let orchestrator = OrchestratorProcess::spawn(&data_dir, &db.url, &[]).await;
        let mut client = orchestrator.client().await;
        let root = dir.path().join(format!("root-{backend}"));
        std::fs::create_dir_all(&root).expect("root");
        std::fs::write(root.join("notes.txt"), "alpha\n").expect("a file");

        let ws = chorus_tests::agents::workspace(&mut client, "ledger", &root).await;
        let seeded = Instant::now();
        seed(&db.url, &ws.id, calls);
        eprintln!("{backend}: {calls} calls seeded in {:?}", seeded.elapsed());
        let (usage, status) = get_usage(&mut client, &ws.id).await;
        row(
            backend,
            &format!("GetUsage over {calls} calls, by agent and day"),
            usage,
        );
        row(backend, "baseline: GetStatus", status);

        for budgets in [false, true] {
            let per_call = agent_calls(&mut client, &root, budgets).await;
            let what = if budgets {
                "model call + tool call, budgets on (task budget, workspace day limit)"
            } else {
                "model call + tool call, budgets off"
            };
            row(backend, what, per_call);
        }
        drop(client);
        orchestrator.stop().await;
    }
}

fn row(backend: &str, what: &str, samples: Vec<Duration>) {
    let s = Samples::new(samples);
    println!(
        "| {backend} | {what} | {} ms | {} ms | {} |",
        ms(s.percentile(50.0)),
        ms(s.percentile(99.0)),
        s.len()
    );
}

/// `calls` ledger rows of 10 agents over the 30 days up to today, and their
/// day sums, written in one statement each.
fn seed(url: &str, workspace: &str, calls: usize) {
    let today_ms = chorus_orchestrator::domain::now_ms();
    let day = 86_400_000_i64;
    let first = (today_ms / day - 29) * day;
    let row = |n: &str| {
        format!(
            "{first} + CAST({n} % 30 AS BIGINT) * {day}, '{workspace}', 'seeded-task', 'seeded-run', \
             'agent-' || (({n} / 30) % 10), 'model', 'fake-model', 11, 7, 4, 0, 72000000, 'price_table', 1, 0"
        )
    };
    let columns = "at_ms, workspace_id, task_id, run_id, agent, provider, model, input_tokens, \
        output_tokens, cache_read_tokens, cache_write_tokens, cost_pico_usd, cost_source, calls, \
        unpriced_calls";
    let sums = format!(
        "INSERT INTO usage_daily (workspace_id, day, agent, provider, model, calls, input_tokens, \
         output_tokens, cache_read_tokens, cache_write_tokens, cost_pico_usd, unpriced_calls) \
         SELECT workspace_id, at_ms / {day}, agent, provider, model, SUM(calls), SUM(input_tokens), \
         SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(cost_pico_usd), \
         SUM(unpriced_calls) FROM model_calls WHERE task_id = 'seeded-task' \
         GROUP BY workspace_id, at_ms / {day}, agent, provider, model"
    );
    let last = calls.saturating_sub(1);
    if url.starts_with("postgres") {
        let mut conn = PgConnection::establish(url).expect("PostgreSQL");
        conn.batch_execute(&format!(
            "INSERT INTO model_calls ({columns}) SELECT {} FROM generate_series(0, {last}) g; {sums}; ANALYZE",
            row("g")
        ))
        .expect("seed");
    } else {
        let mut conn = SqliteConnection::establish(url).expect("SQLite");
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = 60000; WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < {last}) \
             INSERT INTO model_calls ({columns}) SELECT {} FROM g; {sums}",
            row("n")
        ))
        .expect("seed");
    }
}

/// GetUsage by agent and day over the seeded month, and GetStatus, each
/// timed `REQUESTS` times.
async fn get_usage(client: &mut Client, workspace: &str) -> (Vec<Duration>, Vec<Duration>) {
    let mut usage = Vec::with_capacity(REQUESTS);
    let mut status = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let sent = Instant::now();
        let answer = client
            .get_usage(pb::GetUsageRequest {
                workspace_id: workspace.to_owned(),
                group_by: vec!["agent".into(), "day".into()],
                ..Default::default()
            })
            .await
            .expect("GetUsage")
            .into_inner();
        usage.push(sent.elapsed());
        assert_eq!(answer.groups.len(), 300, "10 agents × 30 days");
        let sent = Instant::now();
        client
            .get_status(pb::GetStatusRequest {})
            .await
            .expect("GetStatus");
        status.push(sent.elapsed());
    }
    (usage, status)
}

/// An API agent's `AGENT_CALLS` model calls, each with a file.read: the
/// time between consecutive `tool_executed` events.
async fn agent_calls(client: &mut Client, root: &std::path::Path, budgets: bool) -> Vec<Duration> {
    let read = || Step::tool_call("file_read", json!({"path": "notes.txt"}));
    let mut steps: Vec<Step> = Vec::new();
    for _ in 0..AGENT_RUNS {
        steps.extend((0..AGENT_CALLS).map(|_| read()));
        steps.push(Step::tool_call(
            "completion-report",
            json!({"status": "complete", "summary": "read", "output": "ok"}),
        ));
    }
    let model = FakeOpenAi::start(steps).await;
    let name = if budgets { "budgets-on" } else { "budgets-off" };
    let root = root.with_file_name(format!(
        "{}-{name}",
        root.file_name().and_then(|n| n.to_str()).unwrap_or("root")
    ));
    std::fs::create_dir_all(&root).expect("a root");
    std::fs::write(root.join("notes.txt"), "alpha\n").expect("a file");
    let workspace = chorus_tests::agents::workspace(client, name, &root).await;
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: workspace.id.clone(),
            name: "model".into(),
            kind: pb::ProviderKind::OpenaiCompatible.into(),
            base_url: model.base_url(),
            model: "fake-model".into(),
            api_key: "sk-test".into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    add_agent(client, &workspace, "reader", &["file.read"], "model").await;
    let team = chorus_tests::agents::Team {
        workspace,
        agent: "reader".into(),
    };
    if budgets {
        client
            .update_workspace(pb::UpdateWorkspaceRequest {
                id: team.workspace.id.clone(),
                limits: Some(pb::WorkspaceLimits {
                    daily_cost_usd: Some(1_000.0),
                    monthly_cost_usd: Some(10_000.0),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("limits");
    }
    let mut gaps = Vec::new();
    for _ in 0..AGENT_RUNS {
        let task = planned_task(client, &team.workspace, "Read and read.").await;
        if budgets {
            client
                .update_task_budget(pb::UpdateTaskBudgetRequest {
                    task_id: task.id.clone(),
                    budget: Some(pb::Budget {
                        cost_usd: Some(100.0),
                        tokens: Some(100_000_000),
                        tool_calls: Some(100_000),
                        wall_secs: Some(3_600),
                    }),
                })
                .await
                .expect("a budget");
        }
        start(client, &task, &team.agent, 0).await;
        let events = wait_for(client, &task.id, |e| {
            e.kind == "status_changed" && data(e)["to"] == "completed"
        })
        .await;
        let at: Vec<i64> = events
            .iter()
            .filter(|e| e.kind == "tool_executed" && data(e)["tool"] == "file.read")
            .map(|e| e.at_ms)
            .collect();
        gaps.extend(
            at.windows(2)
                .map(|w| Duration::from_millis(u64::try_from(w[1] - w[0]).unwrap_or(0))),
        );
    }
    gaps
}
