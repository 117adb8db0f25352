//! Handoff costs, measured in this process (orchestrator with its embedded
//! tool-exec; the fake CLI as every agent):
//!
//! 1. Handoff overhead: from the moment the child's CLI is about to exit (its
//!    last step stamps the wall clock) to the moment the parent's chorus-tools
//!    has printed the result and returned (the parent stamps right after). That
//!    covers the child's exit, the sweep of its processes, the end transaction,
//!    the stream to chorus-tools and chorus-tools' exit. Baseline, measured the
//!    same way in the same run: one chorus-tools file.read round trip.
//! 2. Concurrent chains: N tasks (default 100), each a chain A → B → C where
//!    every agent reports: time until all completed, peak RSS and CPU of the
//!    process.
//!
//! `cargo bench -p chorus-tests --bench handoffs`
//! (CHORUS_BENCH_HANDOFFS: sequential handoffs, default 100;
//! CHORUS_BENCH_CHAINS: chains, default 100).

use std::path::Path;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, add_agent, call, data, ends, handoff, planned_task, report, wait_for,
};
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::stats::{Samples, cpu_seconds, env_number, ms, peak_rss_mib};
use serde_json::json;

async fn orchestrator(data: &Path) -> Orchestrator {
    Orchestrator::with_fake_cli_on_sqlite(data, |config| {
        // The fake CLIs stamp the clock in their run directories.
        config.runner.keep_run_dirs = true;
    })
    .await
}

async fn workspace(client: &mut Client, root: &Path) -> pb::Workspace {
    let workspace = chorus_tests::agents::workspace(client, "bench", root).await;
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: workspace.id.clone(),
            name: "cli".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    add_agent(client, &workspace, "a", &["handoff", "file.read"], "cli").await;
    add_agent(client, &workspace, "b", &["handoff"], "cli").await;
    add_agent(client, &workspace, "c", &[], "cli").await;
    workspace
}

/// A step writing the wall clock to `name` in the run's directory.
fn stamp(name: &str) -> String {
    format!("fake: stamp {name}")
}

fn read_stamp(path: &Path) -> u128 {
    std::fs::read_to_string(path)
        .expect("stamp")
        .trim()
        .parse()
        .expect("nanoseconds")
}

fn between(orchestrator: &Orchestrator, from: &str, to: &str) -> Duration {
    let (from, to) = (
        read_stamp(&orchestrator.run_file(from)),
        read_stamp(&orchestrator.run_file(to)),
    );
    Duration::from_nanos(u64::try_from(to.saturating_sub(from)).unwrap_or(u64::MAX))
}

async fn overhead(handoffs: usize) {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("seed");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, root.path()).await;
    let mut script = Vec::new();
    for i in 0..handoffs {
        script.push(stamp(&format!("read-{i}-start")));
        script.push(call(&json!({"tool": "file.read", "path": "notes.txt"})));
        script.push(stamp(&format!("read-{i}-end")));
        script.push(handoff(
            "c",
            &[report("complete", "ok"), stamp(&format!("child-{i}-exit"))],
        ));
        script.push(stamp(&format!("parent-{i}-back")));
    }
    script.push(report("complete", "all handed off"));
    let task = planned_task(&mut client, &ws, &script.join("\n")).await;
    let run = chorus_tests::agents::start(&mut client, &task, "a", 3600)
        .await
        .run
        .expect("run")
        .id;
    let events = wait_for(&mut client, &task.id, |e| ends(e, &run)).await;
    assert_eq!(
        data(events.last().expect("end"))["reason"],
        "completed",
        "the parent completed"
    );
    let back = Samples::new(
        (0..handoffs)
            .map(|i| {
                between(
                    &orchestrator,
                    &format!("child-{i}-exit"),
                    &format!("parent-{i}-back"),
                )
            })
            .collect(),
    );
    let read = Samples::new(
        (0..handoffs)
            .map(|i| {
                between(
                    &orchestrator,
                    &format!("read-{i}-start"),
                    &format!("read-{i}-end"),
                )
            })
            .collect(),
    );
    println!("## Handoff overhead ({handoffs} sequential handoffs by one parent)\n");
    println!("| measure | p50 ms | p90 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        (
            "child's exit → parent's chorus-tools returned with the result",
            &back,
        ),
        ("baseline: one chorus-tools file.read round trip", &read),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean())
        );
    }
    println!();
    orchestrator.stop().await;
}

async fn chains(count: usize) {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, root.path()).await;
    let c = [report("complete", "c done")];
    let b = [handoff("c", &c), report("complete", "b done")];
    let a = [handoff("b", &b), report("complete", "a done")].join("\n");
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        tasks.push(planned_task(&mut client, &ws, &a).await);
    }
    let rss_before = peak_rss_mib();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let mut waits = Vec::with_capacity(count);
    for task in &tasks {
        let mut client = client.clone();
        let id = task.id.clone();
        waits.push(tokio::spawn(async move {
            let run = chorus_tests::agents::start(
                &mut client,
                &pb::Task {
                    id: id.clone(),
                    ..Default::default()
                },
                "a",
                3600,
            )
            .await
            .run
            .expect("run")
            .id;
            wait_for(&mut client, &id, |e| ends(e, &run)).await
        }));
    }
    let mut completed = 0;
    for wait in waits {
        let events = wait.await.expect("chain");
        if events
            .iter()
            .any(|e| e.kind == "status_changed" && data(e)["to"] == "completed")
        {
            completed += 1;
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_seconds() - cpu_before;
    println!("## {count} concurrent handoff chains (A → B → C, every agent reports)\n");
    println!("| measure | value |");
    println!("|---|---|");
    println!("| all chains ended (ms) | {} |", ms(elapsed));
    println!("| tasks completed by their root's report | {completed}/{count} |");
    println!(
        "| peak RSS of the process (orchestrator + tool-exec + bench client) | {:.1} MiB (before: {rss_before:.1} MiB) |",
        peak_rss_mib()
    );
    println!("| CPU time of the process during the chains (user + system) | {cpu:.2} s |");
    orchestrator.stop().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        overhead(env_number("CHORUS_BENCH_HANDOFFS", 100)).await;
        chains(env_number("CHORUS_BENCH_CHAINS", 100)).await;
    });
}
