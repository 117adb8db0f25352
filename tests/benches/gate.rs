//! The live-run path of one tool call — chorus-tools file.read with an agent's
//! run token: tool-exec verifies it, the gate authorizes the call against the
//! stored run, tool-exec reads the file, the gate records the call in the
//! task's history — against `cat` of the same file, and the gate in-process
//! (the all-in-one shape) against the gate over loopback gRPC with tool-exec's
//! service key (the two-service shape), the three interleaved call by call.
//! Then a bash call on the all-in-one live path (authorized, noted in flight,
//! fenced and watched, run in the sandbox, recorded) against `bash -c true`.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench gate`
//! (CHORUS_BENCH_CALLS: calls per row, default 300).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_auth::Role;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, add_agent, workspace};
use chorus_tests::credentials::make_key;
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::stats::{Samples, ms};
use chorus_tests::{ToolExec, ToolsEnv, chorus_tools};
use chorus_tool_exec::gate::{OrchestratorGate, RunGate};

const CALL: &str = r#"{"tool":"file.read","path":"notes.txt"}"#;
const BASH: &str = r#"{"tool":"bash","command":"true"}"#;

/// A planned task of `root`'s workspace with a run of an agent granted
/// file.read and bash.
async fn run_token(client: &mut Client, root: &Path) -> String {
    let ws = workspace(client, "bench", root).await;
    add_agent(client, &ws, "reader", &["file.read", "bash"], "").await;
    let task = chorus_tests::agents::planned_task(client, &ws, "read").await;
    client
        .open_run(pb::OpenRunRequest {
            task_id: task.id,
            agent: "reader".into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner()
        .token
}

async fn timed(env: &ToolsEnv) -> Duration {
    timed_call(env, CALL).await
}

async fn timed_call(env: &ToolsEnv, call: &str) -> Duration {
    let started = Instant::now();
    let out = chorus_tools(env, &[call]).await;
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{}", out.stderr);
    took
}

async fn cat(file: &Path) -> Duration {
    timed_program("cat", &[file.to_str().expect("utf-8")]).await
}

async fn timed_program(program: &str, args: &[&str]) -> Duration {
    let started = Instant::now();
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .expect("program");
    let took = started.elapsed();
    assert!(out.status.success());
    took
}

fn print_rows(rows: &[(&str, Samples)]) {
    println!("| path | p50 ms | p90 ms | p99 ms | mean ms | median / baseline |");
    println!("|---|---|---|---|---|---|");
    let baseline = rows[0].1.median().as_secs_f64();
    for (name, s) in rows {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean()),
            s.median().as_secs_f64() / baseline
        );
    }
}

fn main() {
    let calls: usize = std::env::var("CHORUS_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let content = "alpha beta gamma delta\n".repeat(40);

        // The all-in-one shape: the embedded tool-exec gates in-process.
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), &content).expect("seed");
        // Bash runs as the workspace's owner.
        chorus_sandbox::testing::give_to_test_user(root.path());
        let all_in_one = Orchestrator::start(
            &data.path().join("chorus.db").display().to_string(),
            data.path(),
        )
        .await;
        let mut client = all_in_one.client().await;
        let in_process = ToolsEnv {
            token: Some(run_token(&mut client, root.path()).await),
            tools_addr: Some(all_in_one.tool_exec_addr.to_string()),
            orchestrator_addr: Some(all_in_one.addr.to_string()),
        };

        // The two-service shape: tool-exec asks the orchestrator over loopback.
        let data2 = tempfile::tempdir().expect("data");
        let root2 = tempfile::tempdir().expect("root");
        std::fs::write(root2.path().join("notes.txt"), &content).expect("seed");
        let database2 = data2.path().join("chorus.db").display().to_string();
        let signer = chorus_run_token::load_or_create_signer(data2.path()).expect("keys");
        let orchestrator = Orchestrator::start_with(&database2, signer, false).await;
        let key = make_key(&database2, "tool-exec", Role::ToolExec).await;
        let gate: Arc<dyn RunGate> = Arc::new(
            OrchestratorGate::new(&orchestrator.addr.to_string(), Some(&key), &Default::default(), chorus_tool_exec::gate::pool::DEFAULT_CONNECTIONS)
                .expect("gate"),
        );
        let same_keys = chorus_run_token::load_or_create_signer(data2.path()).expect("keys");
        let tool_exec =
            ToolExec::start_with_gate(chorus_tool_exec::Limits::default(), same_keys, Some(gate))
                .await;
        let mut client2 = orchestrator.client().await;
        let loopback = ToolsEnv {
            token: Some(run_token(&mut client2, root2.path()).await),
            tools_addr: Some(tool_exec.url()),
            orchestrator_addr: Some(orchestrator.addr.to_string()),
        };

        let file = root.path().join("notes.txt");
        for _ in 0..20 {
            cat(&file).await;
            timed(&in_process).await;
            timed(&loopback).await;
        }
        let (mut by_cat, mut by_in_process, mut by_loopback) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..calls {
            by_cat.push(cat(&file).await);
            by_in_process.push(timed(&in_process).await);
            by_loopback.push(timed(&loopback).await);
        }
        let rows = [
            ("cat (baseline)", Samples::new(by_cat)),
            ("chorus-tools, live run, gate in-process (all-in-one)", Samples::new(by_in_process)),
            ("chorus-tools, live run, gate over loopback gRPC (two services)", Samples::new(by_loopback)),
        ];
        println!("## chorus-tools file.read on the live run path vs cat ({calls} calls per row, interleaved)\n");
        print_rows(&rows);

        for _ in 0..20 {
            timed_program("bash", &["-c", "true"]).await;
            timed_call(&in_process, BASH).await;
        }
        let (mut by_bash, mut by_tool) = (Vec::new(), Vec::new());
        for _ in 0..calls {
            by_bash.push(timed_program("bash", &["-c", "true"]).await);
            by_tool.push(timed_call(&in_process, BASH).await);
        }
        let rows = [
            ("bash -c true (baseline)", Samples::new(by_bash)),
            ("chorus-tools bash true, live run, all-in-one", Samples::new(by_tool)),
        ];
        println!("\n## chorus-tools bash on the live run path vs bash ({calls} calls per row, interleaved)\n");
        print_rows(&rows);
        tool_exec.stop().await;
        orchestrator.stop().await;
        all_in_one.stop().await;
    });
}
