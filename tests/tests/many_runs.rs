//! 1,000 runs at once, each making 4 tool calls at once through the real
//! chorus-tools against the orchestrator binary with its defaults: every call
//! is answered (0 errors). The 4,000 calls are more than tool-exec's 1,024
//! places for agents: the ones refused unrun at the limit are sent again by
//! chorus-tools after the service's hint. Before, chorus-tools gave up at the
//! first refusal (exit 5) and 69 of 1,000 tasks never got their report.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{add_agent, opened_run, workspace};
use chorus_tests::attacker;
use chorus_tests::orchestrator::OrchestratorProcess;

const RUNS: usize = 1000;
const CALLS_PER_RUN: usize = 4;
/// The orchestrator's peak resident memory (MiB) on the debug build.
const PEAK_MIB: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_runs_calling_tools_at_once_all_get_their_answers() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "hello").expect("a file");
    let orchestrator = OrchestratorProcess::spawn(
        data.path(),
        &data.path().join("chorus.db").display().to_string(),
        &[],
    )
    .await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "many", root.path()).await;
    add_agent(&mut admin, &ws, "reader", &["file.read"], "").await;
    let mut runs: Vec<pb::OpenRunResponse> = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        runs.push(opened_run(&mut admin, &ws, "reader", &format!("read {i}")).await);
    }

    let started = std::time::Instant::now();
    let mut calls = Vec::with_capacity(RUNS * CALLS_PER_RUN);
    for run in &runs {
        for _ in 0..CALLS_PER_RUN {
            let child = attacker::agent_call(run, r#"{"tool":"file.read","path":"notes.txt"}"#);
            calls.push(tokio::spawn(child.wait_with_output()));
        }
    }
    let mut failed = Vec::new();
    for call in calls {
        let output = call.await.expect("task").expect("chorus-tools ran");
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.contains("hello") {
            failed.push(format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    let wall = started.elapsed();
    let (_, peak) = attacker::memory_mib(orchestrator.pid());
    eprintln!(
        "{} calls of {RUNS} runs in {wall:?}; {} failed; orchestrator peak {peak} MiB",
        RUNS * CALLS_PER_RUN,
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} calls failed, e.g. {:?}",
        failed.len(),
        RUNS * CALLS_PER_RUN,
        &failed[..failed.len().min(3)]
    );
    assert!(
        peak <= PEAK_MIB,
        "the orchestrator's memory reached {peak} MiB (bound {PEAK_MIB} MiB)"
    );
    orchestrator.kill().await;
}
