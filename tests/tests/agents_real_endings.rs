//! The real Claude Code CLI (2.1.330) stopped by each ending a run can have —
//! its task's budget, a cancel, its timeout, a crash of the CLI — while the
//! fake model serves calls whose output tokens grow (23, 26, 29, …) and
//! holds one call open: every token the fake served is recorded, less at most
//! the call in flight, whose input (known from its `message_start`) is
//! recorded too, as an estimate. Before the CLI's stream events were read,
//! each call kept 1 output token (what its `assistant` lines say) and a
//! stopped CLI's limits overshot.
//!
//! Skipped (with a notice) when `CHORUS_TEST_CLAUDE_BIN` is not set, unless
//! `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (as in CI), which makes it fail instead.

use std::path::PathBuf;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, data, planned_task, task_of, team, wait_for};
use chorus_tests::fake_anthropic::{
    FakeAnthropic, HELD_TEXT, Reply, Served, Serving, claude_cli_or_skip,
};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

/// The `n`th call's output tokens.
fn growing(n: usize) -> u64 {
    23 + 3 * n as u64
}

/// A run of the real CLI reading a file again and again (never reporting),
/// its fake model serving as `serving` says.
struct Stage {
    orchestrator: Orchestrator,
    client: Client,
    model: FakeAnthropic,
    task: pb::Task,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn stage(claude: PathBuf, hold: Option<usize>) -> Stage {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("seed");
    let reads: Vec<Reply> = (0..12)
        .map(|_| Reply::tool("mcp__chorus__file_read", json!({"path": "notes.txt"})))
        .collect();
    let model = FakeAnthropic::start_serving(
        vec![("", reads)],
        Serving {
            output_tokens: growing,
            hold,
        },
    )
    .await;
    let orchestrator =
        Orchestrator::with_clis(data_dir.path(), claude, chorus_tests::agents::fake_cli()).await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::ClaudeCode,
        &model.base_url(),
        "dummy-key",
        "claude-test-model",
        &["file.read"],
        "You read notes.",
    )
    .await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "Read the notes, again and again.",
    )
    .await;
    Stage {
        orchestrator,
        client,
        model,
        task,
        _dirs: (data_dir, root),
    }
}

impl Stage {
    /// Waits for the run's end: it failed, its reason saying `why`.
    async fn failed_with(&mut self, why: &str) {
        let events = wait_for(
            &mut self.client,
            &self.task.id,
            chorus_tests::agents::ends_run,
        )
        .await;
        let end = data(events.last().expect("the run's end"));
        let reason = end["reason"].as_str().unwrap_or_default();
        assert!(
            events.last().is_some_and(|e| e.kind == "run_failed") && reason.contains(why),
            "{end}"
        );
    }

    async fn start(&mut self, timeout_secs: u32) {
        chorus_tests::agents::start(&mut self.client, &self.task, "worker", timeout_secs).await;
    }

    /// Waits until the held call's text is in the task's history: the
    /// orchestrator has read the call's start.
    async fn call_in_flight(&mut self) {
        self.model.holding().await;
        wait_for(&mut self.client, &self.task.id, |e| {
            e.kind == "agent_progress" && data(e)["text"] == HELD_TEXT
        })
        .await;
    }

    /// The task's recorded usage.
    async fn recorded(&mut self) -> pb::Usage {
        task_of(&mut self.client, &self.task.id)
            .await
            .usage
            .unwrap_or_default()
    }
}

fn tokens(u: &pb::Usage) -> u64 {
    u.input_tokens + u.output_tokens
}

/// Every token served is recorded, and the call held open (when one is)
/// counts with its input as an estimate; prints the figures for
/// docs/benchmarks.md.
fn assert_all_counted(ending: &str, served: Served, recorded: &pb::Usage) {
    let served_tokens = served.input_tokens + served.output_tokens;
    println!(
        "{ending}: served {} calls, {served_tokens} tokens (+{} input of the call in flight); recorded {} calls, {} tokens ({} estimated)",
        served.calls,
        served.held_input_tokens,
        recorded.model_calls,
        tokens(recorded),
        recorded.estimated_calls,
    );
    assert!(
        tokens(recorded) >= served_tokens + served.held_input_tokens,
        "{ending}: served {served:?}, recorded {recorded:?}"
    );
    assert!(
        recorded.output_tokens >= served.output_tokens,
        "{ending}: every output token served is counted: {served:?} {recorded:?}"
    );
    let in_flight = u64::from(served.held_input_tokens > 0);
    assert_eq!(
        recorded.model_calls,
        served.calls + in_flight,
        "{ending}: every call counted once: {served:?} {recorded:?}"
    );
    assert_eq!(
        recorded.estimated_calls, in_flight,
        "{ending}: {recorded:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_counts_every_served_token_and_overshoots_by_at_most_one_call() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let mut s = stage(claude, None).await;
    // 33 + 36 + 39 = 108: the third call reaches it.
    let limit = 100;
    s.client
        .update_task_budget(pb::UpdateTaskBudgetRequest {
            task_id: s.task.id.clone(),
            budget: Some(pb::Budget {
                tokens: Some(limit),
                ..Default::default()
            }),
        })
        .await
        .expect("a budget");
    s.start(180).await;
    let events = wait_for(&mut s.client, &s.task.id, |e| e.kind == "budget_exceeded").await;
    let exceeded = data(events.last().expect("exceeded"));
    assert_eq!(exceeded["limit"], "tokens", "{exceeded}");
    // Canceling the waiting task waits for its run's processes and records.
    s.client
        .cancel_task(pb::CancelTaskRequest {
            task_id: s.task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let recorded = s.recorded().await;
    let served = s.model.served();
    // The CLI may have sent the next call before it was stopped: all but
    // that one are counted, and the limit is passed by at most one call.
    let last = 10 + growing(served.calls as usize - 1);
    assert!(
        tokens(&recorded) + last >= served.input_tokens + served.output_tokens,
        "served {served:?}, recorded {recorded:?}"
    );
    assert!(
        tokens(&recorded) < limit + 10 + growing(3),
        "stopped at the call that reached {limit}: {recorded:?}"
    );
    println!(
        "budget ({limit} tokens): served {} calls, {} tokens; recorded {} calls, {} tokens",
        served.calls,
        served.input_tokens + served.output_tokens,
        recorded.model_calls,
        tokens(&recorded)
    );
    s.orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_call_counts_every_served_token_and_the_call_in_flight() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let mut s = stage(claude, Some(2)).await;
    s.start(180).await;
    s.call_in_flight().await;
    s.client
        .cancel_task(pb::CancelTaskRequest {
            task_id: s.task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let recorded = s.recorded().await;
    assert_all_counted("cancel", s.model.served(), &recorded);
    s.orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_mid_call_counts_every_served_token_and_the_call_in_flight() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let mut s = stage(claude, Some(2)).await;
    // Long enough for the CLI to start and make two calls; the third is
    // held until the run's time is up.
    s.start(15).await;
    s.failed_with("timed out").await;
    let recorded = s.recorded().await;
    assert_all_counted("timeout", s.model.served(), &recorded);
    s.orchestrator.stop().await;
}

/// The CLI's processes: those whose environment names the task and whose
/// program is Claude Code.
fn claude_processes(task: &str) -> Vec<i32> {
    let marker = format!("CHORUS_TASK_ID={task}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            exe.to_string_lossy().contains("claude")
                && environ.split(|b| *b == 0).any(|v| v == marker.as_bytes())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_the_cli_mid_call_counts_every_served_token_and_the_call_in_flight() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let mut s = stage(claude, Some(2)).await;
    s.start(180).await;
    s.call_in_flight().await;
    let pids = claude_processes(&s.task.id);
    assert!(!pids.is_empty(), "the CLI's process is found by its task");
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    s.failed_with("signal").await;
    let recorded = s.recorded().await;
    assert_all_counted("crash", s.model.served(), &recorded);
    s.orchestrator.stop().await;
}
