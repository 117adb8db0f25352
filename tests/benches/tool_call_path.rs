//! A tool call on the path a deployment pays, beside its baselines in one
//! run: `file.read` of a 4 KiB file by an open run of the orchestrator
//! binary (its embedded tool-exec, the run's token checked, the call
//! authorized and recorded in the task's history), on SQLite and (with
//! `CHORUS_TEST_DATABASE_URL`) PostgreSQL:
//!
//! - a call on an open MCP session over stdio (`chorus-tools mcp`, driven by
//!   the official Rust SDK's client as an agent CLI drives it);
//! - a call on an open MCP session over Streamable HTTP (the run's `/mcp`);
//! - a one-shot `chorus-tools` process per call (the shell form);
//! - `cat` of the same file (process start to exit), and the bare gRPC
//!   health Check of the same orchestrator (its RPC floor).
//!
//! For each row also the orchestrator's CPU per call (user + system time of
//! the whole process over the row, divided by its calls), and for stdio
//! that of the resident `chorus-tools mcp`.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench tool_call_path`
//! (CHORUS_BENCH_CALLS: calls per row, default 1000).

use std::process::Command;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{add_agent, opened_run, workspace};
use chorus_tests::orchestrator::{OrchestratorProcess, channel_to};
use chorus_tests::stats::{Samples, cpu_seconds_of, env_number, ms, spawned};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// A row: what was timed, its samples, and CPU per call (ms) of the
/// orchestrator and of a resident helper.
struct Row {
    what: &'static str,
    samples: Samples,
    orchestrator_cpu: Option<f64>,
    helper_cpu: Option<f64>,
}

/// Times `calls` calls of `call` (after a tenth as many untimed), with the
/// CPU the orchestrator (and `helper`) spent over the timed ones.
async fn timed<F, Fut>(
    calls: usize,
    orchestrator: u32,
    helper: Option<u32>,
    mut call: F,
) -> (Samples, f64, Option<f64>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..calls / 10 {
        call().await;
    }
    let (o, h) = (cpu_seconds_of(orchestrator), helper.map(cpu_seconds_of));
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        call().await;
        samples.push(started.elapsed());
    }
    let per_call = |before: f64, pid: u32| (cpu_seconds_of(pid) - before) * 1000.0 / calls as f64;
    (
        Samples::new(samples),
        per_call(o, orchestrator),
        h.zip(helper).map(|(before, pid)| per_call(before, pid)),
    )
}

async fn path(database: &str, url: &str, calls: usize) {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let file = root.path().join("notes.txt");
    std::fs::write(&file, "a line of the notes, 32 bytes.\n".repeat(128)).expect("a 4 KiB file");
    chorus_sandbox::testing::give_to_test_user(root.path());
    // The run's Streamable HTTP endpoint is served with --mcp-listen.
    let o = OrchestratorProcess::spawn(data.path(), url, &["--mcp-listen", "127.0.0.1:0"]).await;
    let pid = u32::try_from(o.pid()).expect("a pid");
    let mut admin = o.client().await;
    let ws = workspace(&mut admin, "path", root.path()).await;
    add_agent(&mut admin, &ws, "reader", &["file.read"], "").await;
    let run = opened_run(&mut admin, &ws, "reader", "read the notes").await;
    let bin = chorus_tests::built_bin("chorus-tools", "chorus-tools");
    let tools_addr = o.tool_exec_addr.to_string();
    let mut rows = Vec::new();

    // stdio: one resident chorus-tools mcp for every call of the row.
    let mut server = tokio::process::Command::new(&bin);
    server
        .arg("mcp")
        .env("CHORUS_RUN_TOKEN", &run.token)
        .env("CHORUS_TOOLS_ADDR", &tools_addr);
    let transport =
        rmcp::transport::TokioChildProcess::new(server).expect("start chorus-tools mcp");
    let helper = transport.id().expect("its pid");
    let session = ().serve(transport).await.expect("an MCP session");
    let arguments = serde_json::json!({"path": "notes.txt"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let (samples, orchestrator_cpu, helper_cpu) = timed(calls, pid, Some(helper), || {
        let request = CallToolRequestParams::new("file_read").with_arguments(arguments.clone());
        let session = &session;
        async move {
            let result = session.call_tool(request).await.expect("tools/call");
            assert_ne!(result.is_error, Some(true), "{result:?}");
        }
    })
    .await;
    rows.push(Row {
        what: "a call on an open MCP session, stdio (chorus-tools mcp)",
        samples,
        orchestrator_cpu: Some(orchestrator_cpu),
        helper_cpu,
    });
    let _ = session.cancel().await;

    // Streamable HTTP: the run's endpoint, one keep-alive connection.
    let http = chorus_tests::mcp_http::Session::open(&run.mcp_url, &run.token).await;
    let http = std::sync::Arc::new(tokio::sync::Mutex::new(http));
    let (samples, orchestrator_cpu, _) = timed(calls, pid, None, || {
        let http = std::sync::Arc::clone(&http);
        async move {
            let answer = http
                .lock()
                .await
                .call("file_read", serde_json::json!({"path": "notes.txt"}))
                .await;
            assert!(
                answer["result"]["isError"] != true && answer["result"].is_object(),
                "{answer}"
            );
        }
    })
    .await;
    rows.push(Row {
        what: "a call on an open MCP session, Streamable HTTP (the run's /mcp)",
        samples,
        orchestrator_cpu: Some(orchestrator_cpu),
        helper_cpu: None,
    });

    // The shell form: a process per call.
    let before = cpu_seconds_of(pid);
    let samples = spawned(
        || {
            let mut c = Command::new(&bin);
            c.arg(r#"{"tool":"file.read","path":"notes.txt"}"#)
                .env("CHORUS_RUN_TOKEN", &run.token)
                .env("CHORUS_TOOLS_ADDR", &tools_addr);
            c
        },
        calls,
    );
    let orchestrator_cpu = (cpu_seconds_of(pid) - before) * 1000.0 / (calls + calls / 10) as f64;
    rows.push(Row {
        what: "a one-shot chorus-tools process (shell form)",
        samples,
        orchestrator_cpu: Some(orchestrator_cpu),
        helper_cpu: None,
    });

    // The baselines.
    let health = HealthClient::new(channel_to(o.addr).await);
    let (samples, orchestrator_cpu, _) = timed(calls, pid, None, || {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest::default())
                .await
                .expect("health");
        }
    })
    .await;
    rows.push(Row {
        what: "the bare gRPC health Check of the same orchestrator",
        samples,
        orchestrator_cpu: Some(orchestrator_cpu),
        helper_cpu: None,
    });
    let samples = spawned(
        || {
            let mut c = Command::new("cat");
            c.arg(&file);
            c
        },
        calls,
    );
    rows.push(Row {
        what: "cat of the same file (process start to exit)",
        samples,
        orchestrator_cpu: None,
        helper_cpu: None,
    });

    let recorded = admin
        .get_task(pb::GetTaskRequest {
            id: run.run.as_ref().expect("the run").task_id.clone(),
            ..Default::default()
        })
        .await
        .expect("the task")
        .into_inner()
        .last_sequence;
    println!(
        "\n#### {database} ({calls} calls per row, after {} untimed; the task's history now ends at event {recorded})\n",
        calls / 10
    );
    println!(
        "| file.read of a 4 KiB file | p50 ms | p90 ms | p99 ms | × cat at p50 | orchestrator CPU ms per call | chorus-tools mcp CPU ms per call |"
    );
    println!("|---|---|---|---|---|---|---|");
    let cat = rows
        .last()
        .map_or(Duration::ZERO, |r| r.samples.median())
        .as_secs_f64();
    let cpu = |c: Option<f64>| c.map_or(String::new(), |c| format!("{c:.3}"));
    for row in &rows {
        println!(
            "| {} | {} | {} | {} | {:.2}× | {} | {} |",
            row.what,
            ms(row.samples.median()),
            ms(row.samples.percentile(90.0)),
            ms(row.samples.percentile(99.0)),
            row.samples.median().as_secs_f64() / cat,
            cpu(row.orchestrator_cpu),
            cpu(row.helper_cpu),
        );
    }
    o.kill().await;
}

fn main() {
    let calls = env_number("CHORUS_BENCH_CALLS", 1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let data = tempfile::tempdir().expect("data");
        println!("### file.read on the real path: orchestrator, tool-exec and the record");
        path(
            "SQLite",
            &data.path().join("path.db").display().to_string(),
            calls,
        )
        .await;
        let pg_dir = tempfile::tempdir().expect("pg data");
        let databases = chorus_tests::db::databases(pg_dir.path());
        if let Some(pg) = databases.iter().find(|d| d.backend == "postgres") {
            path("PostgreSQL", &pg.url, calls).await;
        }
    });
}
