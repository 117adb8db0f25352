//! A task of 50 tool calls by one agent, over MCP and over the shell form,
//! side by side: the fake CLI (as Claude Code) plays a script of 50
//! `file.read` calls and its completion report, through `chorus-tools mcp`
//! (one resident server for the session) or through one `chorus-tools`
//! process per call. Wall time from StartTask to the run's end, with the
//! orchestrator and its embedded tool-exec in this process on SQLite, in the
//! run sandbox.
//!
//! `cargo bench -p chorus-tests --bench mcp_task` (CHORUS_BENCH_CALLS: calls
//! per task, default 50; CHORUS_BENCH_RUNS: tasks per transport, default 5).

use std::time::Instant;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{ends_run, fake_cli_team, planned_task, start, use_transport, wait_for};
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::stats::{Samples, env_number, ms};

fn main() {
    let calls = env_number("CHORUS_BENCH_CALLS", 50);
    let runs = env_number("CHORUS_BENCH_RUNS", 5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), "alpha\n".repeat(50)).expect("seed");
        let orchestrator = Orchestrator::with_fake_cli_on_sqlite(data.path(), |_| {}).await;
        let mut client = orchestrator.client().await;
        let team = fake_cli_team(&mut client, root.path(), &["file.read"], "i").await;
        let mut script: Vec<String> = (0..calls)
            .map(|_| r#"fake: call {"tool":"file.read","path":"notes.txt"}"#.to_owned())
            .collect();
        script.push(
            r#"fake: call {"tool":"completion-report","status":"complete","summary":"read","output":"read"}"#
                .to_owned(),
        );
        let script = script.join("\n");
        let mut rows = Vec::new();
        for transport in [pb::ToolTransport::Mcp, pb::ToolTransport::Shell] {
            use_transport(&mut client, &team, transport).await;
            let mut walls = Vec::new();
            // One task first, untimed: caches and the first spawn.
            for round in 0..=runs {
                let task = planned_task(&mut client, &team.workspace, &script).await;
                let started = Instant::now();
                let run = start(&mut client, &task, &team.agent, 0).await.run.expect("run").id;
                let events = wait_for(&mut client, &task.id, |e| {
                    ends_run(e) && chorus_tests::agents::data(e)["run_id"] == run
                })
                .await;
                let wall = started.elapsed();
                let executed = events.iter().filter(|e| e.kind == "tool_executed").count();
                assert!(executed > calls, "{executed} calls recorded of {calls}");
                assert_eq!(
                    events.last().map(|e| e.kind.as_str()),
                    Some("agent_completed")
                );
                if round > 0 {
                    walls.push(wall);
                }
            }
            rows.push((transport, Samples::new(walls)));
        }
        println!("{calls} file.read calls and a completion report per task, {runs} tasks per row");
        println!("| transport | median wall ms | min ms | max ms | per call ms (median / calls) |");
        println!("|---|---|---|---|---|");
        for (transport, s) in &rows {
            println!(
                "| {} | {} | {} | {} | {:.2} |",
                transport.as_str_name(),
                ms(s.median()),
                ms(s.percentile(0.0)),
                ms(s.percentile(100.0)),
                s.median().as_secs_f64() * 1000.0 / calls as f64
            );
        }
        orchestrator.stop().await;
    });
}
