//! What approval rules cost, on the path a deployment pays, in one run of
//! the orchestrator binary (embedded tool-exec, the run's token checked, the
//! call authorized and recorded), over the run's Streamable HTTP `/mcp`:
//!
//! - `file.read` of a 4 KiB file by a run with no approval rules, beside the
//!   same call by a run whose agent has 100 rules that all name file tools
//!   (99 path denials that do not match, and the allow that does), the two
//!   rows interleaved round by round, and `cat` of the same file;
//! - an approval's round trip: a run whose `file.read` asks, timed from the
//!   operator's AnswerApproval sent to the call's answer back at the agent
//!   (the tool run and recorded in between).
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench approvals`
//! (CHORUS_BENCH_CALLS: calls per rule row, default 2000; CHORUS_BENCH_ASKS:
//! approvals timed, default 200; with `CHORUS_TEST_DATABASE_URL` also on
//! PostgreSQL).

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{add_agent, opened_run, workspace};
use chorus_tests::approvals::{rule, set_rules};
use chorus_tests::mcp_http::Session;
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::stats::{Samples, env_number, ms, spawned};
use tokio::sync::Mutex;
use tokio_stream::StreamExt as _;

async fn read(session: &Arc<Mutex<Session>>) {
    let answer = session
        .lock()
        .await
        .call("file_read", serde_json::json!({"path": "notes.txt"}))
        .await;
    assert!(
        answer["result"]["isError"] != true && answer["result"].is_object(),
        "{answer}"
    );
}

async fn bench(database: &str, url: &str, calls: usize, asks: usize) {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let file = root.path().join("notes.txt");
    std::fs::write(&file, "a line of the notes, 32 bytes.\n".repeat(128)).expect("a 4 KiB file");
    chorus_sandbox::testing::give_to_test_user(root.path());
    let o = OrchestratorProcess::spawn(data.path(), url, &["--mcp-listen", "127.0.0.1:0"]).await;
    let mut admin = o.client().await;
    let ws = workspace(&mut admin, "rules", root.path()).await;
    for agent in ["plain", "ruled", "asked"] {
        add_agent(&mut admin, &ws, agent, &["file.read"], "").await;
    }
    let mut hundred: Vec<pb::ApprovalRule> = (0..99)
        .map(|i| rule("file.*", "deny", &format!("secret-{i}/**"), 0))
        .collect();
    hundred.push(rule("file.read", "allow", "*.txt", 0));
    set_rules(&mut admin, &ws.id, "ruled", hundred).await;
    set_rules(
        &mut admin,
        &ws.id,
        "asked",
        vec![rule("file.read", "ask", "", 0)],
    )
    .await;

    let open = |agent: &'static str| {
        let mut admin = admin.clone();
        let ws = ws.clone();
        async move {
            let run = opened_run(&mut admin, &ws, agent, "read the notes").await;
            let session = Session::open(&run.mcp_url, &run.token).await;
            (run, Arc::new(Mutex::new(session)))
        }
    };
    let (_, plain) = open("plain").await;
    let (_, ruled) = open("ruled").await;

    // The two rows, interleaved: ten rounds of a tenth each, after a warm-up.
    for _ in 0..calls / 10 {
        read(&plain).await;
        read(&ruled).await;
    }
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        for (session, samples) in [(&plain, &mut without), (&ruled, &mut with)] {
            for _ in 0..calls / 10 {
                let started = Instant::now();
                read(session).await;
                samples.push(started.elapsed());
            }
        }
    }
    let cat = spawned(
        || {
            let mut c = Command::new("cat");
            c.arg(&file);
            c
        },
        calls,
    );

    // The round trip of an approval: the call waits, the operator answers.
    let (run, asked) = open("asked").await;
    let task = run.run.expect("the run").task_id;
    let mut history = admin
        .watch_task(pb::WatchTaskRequest {
            task_id: task.clone(),
            after_sequence: 0,
            follow: true,
            until_needed: false,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut trips = Vec::with_capacity(asks);
    for _ in 0..asks + asks / 10 {
        let call = tokio::spawn({
            let asked = Arc::clone(&asked);
            async move { read(&asked).await }
        });
        let approval = loop {
            let event = history
                .next()
                .await
                .expect("the history")
                .expect("an event");
            if let Some(needs) = event.needs_you
                && !needs.approval_id.is_empty()
            {
                break needs.approval_id;
            }
        };
        let started = Instant::now();
        admin
            .answer_approval(pb::AnswerApprovalRequest {
                task_id: task.clone(),
                approval_id: approval,
                approve: true,
                ..Default::default()
            })
            .await
            .expect("approve");
        call.await.expect("the call");
        trips.push(started.elapsed());
    }
    let trips = Samples::new(trips.split_off(asks / 10));
    let (without, with) = (Samples::new(without), Samples::new(with));

    println!(
        "\n#### {database} ({calls} calls per rule row in 10 interleaved rounds; {asks} approvals)\n"
    );
    println!("| what | p50 ms | p90 ms | p99 ms | × cat at p50 |");
    println!("|---|---|---|---|---|");
    let base = cat.median().as_secs_f64();
    for (what, samples) in [
        (
            "file.read, a run with no approval rules (HTTP /mcp)",
            &without,
        ),
        (
            "file.read, a run with 100 approval rules on file tools (HTTP /mcp)",
            &with,
        ),
        ("cat of the same file (process start to exit)", &cat),
        (
            "approval round trip: AnswerApproval sent → the waiting call's answer at the agent",
            &trips,
        ),
    ] {
        println!(
            "| {what} | {} | {} | {} | {:.2}× |",
            ms(samples.median()),
            ms(samples.percentile(90.0)),
            ms(samples.percentile(99.0)),
            samples.median().as_secs_f64() / base
        );
    }
    let cost = with.median().as_secs_f64() - without.median().as_secs_f64();
    println!(
        "\n100 rules add {:.3} ms at p50 ({:+.1} %).",
        cost * 1000.0,
        cost / without.median().as_secs_f64() * 100.0
    );
    o.kill().await;
}

fn main() {
    let calls = env_number("CHORUS_BENCH_CALLS", 2000);
    let asks = env_number("CHORUS_BENCH_ASKS", 200);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let data = tempfile::tempdir().expect("data");
        println!("### Approval rules on the tool-call path, and an approval's round trip");
        bench(
            "SQLite",
            &data.path().join("rules.db").display().to_string(),
            calls,
            asks,
        )
        .await;
        let pg_dir = tempfile::tempdir().expect("pg data");
        let databases = chorus_tests::db::databases(pg_dir.path());
        if let Some(pg) = databases.iter().find(|d| d.backend == "postgres") {
            bench("PostgreSQL", &pg.url, calls, asks).await;
        }
    });
}
