//! Agent execution costs, measured in this process:
//!
//! 1. Executor overhead per tool call: the real chorus-tools binary calling
//!    file.read with the token of a live fake-CLI run (tool-exec asks the
//!    orchestrator to authorize and record every call), against the same binary
//!    calling a bare tool-exec (no orchestrator, no gate) as the baseline.
//! 2. 200 concurrent fake-CLI runs on this machine, each in the run sandbox:
//!    time for StartTask to accept them all, time until all have completed (each
//!    runs chorus-tools for its completion report), the process's peak RSS and
//!    CPU time, the sandbox launchers' peak memory (PSS of every monitor and
//!    init together, sampled every 20 ms) and the CPU of every child process.
//!
//! `cargo bench -p chorus-tests --bench agent_runs`
//! (CHORUS_BENCH_CALLS: tool calls per row, default 300; CHORUS_BENCH_RUNS: runs,
//! default 200).

use std::time::Instant;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, ends_run, fake_cli_team, planned_task, wait_for};
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::stats::{
    PeakSampler, Samples, children_cpu_seconds, cpu_seconds, env_number, ms, peak_rss_mib,
};
use chorus_tests::{ToolExec, ToolsEnv, chorus_tools};
use serde_json::Value;

async fn time_calls(env: &ToolsEnv, calls: usize) -> Samples {
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let out = chorus_tools(env, &[r#"{"tool":"file.read","path":"notes.txt"}"#]).await;
        samples.push(started.elapsed());
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    Samples::new(samples)
}

async fn orchestrator(data: &std::path::Path) -> Orchestrator {
    Orchestrator::with_fake_cli_on_sqlite(data, |config| {
        // The fake CLI records its environment in its run directory.
        config.runner.keep_run_dirs = true;
    })
    .await
}

async fn overhead(calls: usize) {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha\n".repeat(50)).expect("seed");
    let orchestrator = orchestrator(data.path()).await;
    let mut client = orchestrator.client().await;
    let team = fake_cli_team(&mut client, root.path(), &["file.read"], "i").await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "fake: record record.json\nfake: say ready\nfake: hang",
    )
    .await;
    chorus_tests::agents::start(&mut client, &task, &team.agent, 0).await;
    wait_for(&mut client, &task.id, |e| e.kind == "agent_progress").await;
    let recorded: Value = serde_json::from_str(
        &std::fs::read_to_string(orchestrator.run_file("record.json")).expect("record"),
    )
    .expect("json");
    let token = recorded["env"]["CHORUS_RUN_TOKEN"]
        .as_str()
        .expect("token")
        .to_owned();
    let run_env = ToolsEnv {
        token: Some(token),
        tools_addr: Some(orchestrator.tool_exec_addr.to_string()),
        orchestrator_addr: Some(orchestrator.addr.to_string()),
    };

    let bare = ToolExec::start().await;
    let bare_env = ToolsEnv {
        token: Some(bare.token(root.path(), &["file.read"])),
        tools_addr: Some(bare.url()),
        orchestrator_addr: None,
    };
    // Warm both paths (connections, page cache).
    time_calls(&bare_env, 20).await;
    time_calls(&run_env, 20).await;
    let baseline = time_calls(&bare_env, calls).await;
    let with_run = time_calls(&run_env, calls).await;
    println!(
        "## Executor overhead per tool call ({calls} sequential chorus-tools file.read calls)\n"
    );
    println!("| path | p50 ms | p90 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        ("bare tool-exec (baseline)", &baseline),
        (
            "live CLI run: tool-exec + orchestrator authorize/record",
            &with_run,
        ),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean())
        );
    }
    #[allow(clippy::cast_precision_loss)]
    let ratio = with_run.median().as_secs_f64() / baseline.median().as_secs_f64();
    println!("\nmedian ratio (run / bare): {ratio:.2}\n");
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "bench over".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    bare.stop().await;
    orchestrator.stop().await;
}

async fn concurrent_runs(runs: usize) {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data.path()).await;
    let mut client: Client = orchestrator.client().await;
    let team = fake_cli_team(&mut client, root.path(), &[], "i").await;
    let mut tasks = Vec::with_capacity(runs);
    for _ in 0..runs {
        let script = r#"fake: call {"tool":"completion-report","status":"complete","summary":"ok","output":"ok"}"#;
        tasks.push(planned_task(&mut client, &team.workspace, script).await);
    }
    let rss_before = peak_rss_mib();
    let cpu_before = cpu_seconds();
    let children_before = children_cpu_seconds();
    let launcher =
        std::fs::canonicalize(chorus_sandbox::testing::built_launcher()).expect("launcher");
    let launchers = PeakSampler::start(launcher);
    let started = Instant::now();
    let mut starts = Vec::new();
    for task in &tasks {
        let mut client = client.clone();
        let (id, agent) = (task.id.clone(), team.agent.clone());
        starts.push(tokio::spawn(async move {
            client
                .start_task(pb::StartTaskRequest {
                    task_id: id,
                    agent,
                    prompt: String::new(),
                    timeout_secs: 0,
                })
                .await
                .expect("start")
        }));
    }
    for s in starts {
        s.await.expect("start task");
    }
    let all_started = started.elapsed();
    let mut waits = Vec::new();
    for task in &tasks {
        let mut client = client.clone();
        let id = task.id.clone();
        waits.push(tokio::spawn(async move {
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
    let all_done = started.elapsed();
    let cpu = cpu_seconds() - cpu_before;
    let (launcher_count, launcher_mib) = launchers.finish().await;
    println!("## {runs} concurrent fake-CLI runs, each in the run sandbox\n");
    println!("| measure | value |");
    println!("|---|---|");
    println!("| StartTask accepted all (ms) | {} |", ms(all_started));
    println!("| all runs ended (ms) | {} |", ms(all_done));
    println!("| runs completed by their report | {completed}/{runs} |");
    println!(
        "| peak RSS of the process (orchestrator + tool-exec + bench client) | {:.1} MiB (before: {rss_before:.1} MiB) |",
        peak_rss_mib()
    );
    println!("| CPU time of the process during the runs (user + system) | {cpu:.2} s |");
    println!(
        "| sandbox launchers (monitor + init per run): peak memory together (PSS) | {launcher_mib:.1} MiB ({launcher_count} processes at the peak) |"
    );
    println!(
        "| CPU time of child processes (launchers, CLIs, chorus-tools) | {:.2} s |",
        children_cpu_seconds() - children_before
    );
    orchestrator.stop().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        overhead(env_number("CHORUS_BENCH_CALLS", 300)).await;
        concurrent_runs(env_number("CHORUS_BENCH_RUNS", 200)).await;
    });
}
