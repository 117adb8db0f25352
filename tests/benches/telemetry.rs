//! The cost of tracing, side by side in one run: the release orchestrator
//! binary (embedded tool-exec) started twice, once exporting nothing (spans
//! are still made: logs carry their ids and trace context travels on) and once
//! exporting traces and metrics over OTLP to a receiver in this process.
//!
//! 1. The tool-call path: the real chorus-tools (with the `TRACEPARENT` an
//!    agent has, and the OTLP endpoint when exporting) calling file.read for a
//!    live run; median, p99, and the CPU of the orchestrator and of chorus-tools.
//! 2. 200 concurrent fake-CLI runs (each in the run sandbox, each reporting
//!    through chorus-tools): wall time until all ended, orchestrator CPU.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench telemetry`
//! (CHORUS_BENCH_CALLS: tool calls per row, default 300; CHORUS_BENCH_RUNS:
//! runs, default 200).

use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, ends_run, fake_cli_team, opened_run, planned_task, wait_for};
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::otlp::Receiver;
use chorus_tests::stats::{Samples, children_cpu_seconds, env_number, ms};

/// User + system CPU seconds of process `pid` and its reaped children.
fn process_cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12, 13, 14]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// An agent's trace context, as a run's CLI gets it.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

struct Shape {
    name: &'static str,
    env: Vec<(String, String)>,
}

async fn start(shape: &Shape, data: &std::path::Path) -> OrchestratorProcess {
    let fake = chorus_tests::agents::fake_cli().display().to_string();
    let env: Vec<(&str, &str)> = shape
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let database = data.join("chorus.db").display().to_string();
    OrchestratorProcess::spawn_with_env(data, &database, &["--claude-bin", &fake], &env).await
}

struct CallRow {
    samples: Samples,
    service_cpu: f64,
    tools_cpu: f64,
}

async fn tool_calls(shape: &Shape, calls: usize) -> CallRow {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha\n".repeat(50)).expect("seed");
    let orchestrator = start(shape, data.path()).await;
    let mut client: Client = orchestrator.client().await;
    let team = fake_cli_team(&mut client, root.path(), &["file.read"], "i").await;
    let opened = opened_run(&mut client, &team.workspace, &team.agent, "read").await;
    let command = || {
        let mut command = tokio::process::Command::new(chorus_tests::chorus_tools_bin());
        command
            .arg(r#"{"tool":"file.read","path":"notes.txt"}"#)
            .env_clear()
            .env("CHORUS_RUN_TOKEN", &opened.token)
            .env(
                "CHORUS_TOOLS_ADDR",
                format!("http://{}", orchestrator.tool_exec_addr),
            )
            .env(
                "CHORUS_ORCHESTRATOR_ADDR",
                format!("http://{}", orchestrator.addr),
            )
            .env("TRACEPARENT", TRACEPARENT)
            .envs(shape.env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null());
        command
    };
    // Warm up: connections, caches.
    for _ in 0..10 {
        assert!(command().status().await.expect("chorus-tools").success());
    }
    let service_before = process_cpu_seconds(orchestrator.pid());
    let tools_before = children_cpu_seconds();
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let status = command().status().await.expect("chorus-tools");
        samples.push(started.elapsed());
        assert!(status.success());
    }
    let row = CallRow {
        samples: Samples::new(samples),
        service_cpu: process_cpu_seconds(orchestrator.pid()) - service_before,
        tools_cpu: children_cpu_seconds() - tools_before,
    };
    drop(client);
    orchestrator.stop().await;
    row
}

struct RunsRow {
    all_ended: Duration,
    completed: usize,
    service_cpu: f64,
}

async fn concurrent_runs(shape: &Shape, runs: usize) -> RunsRow {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = start(shape, data.path()).await;
    let mut client: Client = orchestrator.client().await;
    let team = fake_cli_team(&mut client, root.path(), &[], "i").await;
    let mut tasks = Vec::with_capacity(runs);
    for _ in 0..runs {
        let script = r#"fake: call {"tool":"completion-report","status":"complete","summary":"ok","output":"ok"}"#;
        tasks.push(planned_task(&mut client, &team.workspace, script).await);
    }
    let cpu_before = process_cpu_seconds(orchestrator.pid());
    let started = Instant::now();
    let mut waits = Vec::new();
    for task in &tasks {
        let mut client = client.clone();
        let (id, agent) = (task.id.clone(), team.agent.clone());
        waits.push(tokio::spawn(async move {
            client
                .start_task(pb::StartTaskRequest {
                    task_id: id.clone(),
                    agent,
                    prompt: String::new(),
                    timeout_secs: 0,
                })
                .await
                .expect("start");
            wait_for(&mut client, &id, ends_run).await
        }));
    }
    let mut completed = 0;
    for w in waits {
        let events = w.await.expect("wait");
        if chorus_tests::agents::data(events.last().expect("end"))["reason"] == "completed" {
            completed += 1;
        }
    }
    let row = RunsRow {
        all_ended: started.elapsed(),
        completed,
        service_cpu: process_cpu_seconds(orchestrator.pid()) - cpu_before,
    };
    drop(client);
    orchestrator.stop().await;
    row
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let calls = env_number("CHORUS_BENCH_CALLS", 300);
        let runs = env_number("CHORUS_BENCH_RUNS", 200);
        let receiver = Receiver::start().await;
        let shapes = [
            Shape {
                name: "not exporting (spans made, ids in logs)",
                env: Vec::new(),
            },
            Shape {
                name: "exporting traces and metrics over OTLP",
                env: vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), receiver.endpoint()),
                    ("OTEL_METRIC_EXPORT_INTERVAL".into(), "1000".into()),
                ],
            },
        ];
        println!("## The tool-call path: chorus-tools file.read, {calls} calls\n");
        println!(
            "| telemetry | median | p99 | orchestrator CPU per call | chorus-tools CPU per call |"
        );
        println!("|---|---|---|---|---|");
        for shape in &shapes {
            let row = tool_calls(shape, calls).await;
            #[allow(clippy::cast_precision_loss)]
            let per_call = |cpu: f64| format!("{:.2} ms", cpu * 1000.0 / calls as f64);
            println!(
                "| {} | {} ms | {} ms | {} | {} |",
                shape.name,
                ms(row.samples.median()),
                ms(row.samples.percentile(99.0)),
                per_call(row.service_cpu),
                per_call(row.tools_cpu),
            );
        }
        println!("\n## {runs} concurrent fake-CLI runs, each in the run sandbox\n");
        println!(
            "| telemetry | all runs ended | completed | orchestrator CPU (with its children) |"
        );
        println!("|---|---|---|---|");
        for shape in &shapes {
            let row = concurrent_runs(shape, runs).await;
            println!(
                "| {} | {} ms | {}/{runs} | {:.2} s |",
                shape.name,
                ms(row.all_ended),
                row.completed,
                row.service_cpu
            );
        }
        println!(
            "\nspans received while exporting: {}",
            receiver.spans().len()
        );
    });
}
