//! The real Claude Code (2.1.330) and OpenCode (1.18.33) CLIs, run by the
//! orchestrator over the MCP transport against scripted fake model servers:
//! the model is offered exactly the run's granted tools as native tools —
//! no Bash, no built-in tool — and calls them through `chorus-tools mcp`: a
//! read, a write, a read outside the workspace (refused by the services and
//! recorded), a handoff whose child's report comes back, and the completion
//! report; the task completes.
//!
//! Skipped (with a notice) when `CHORUS_TEST_CLAUDE_BIN` / `CHORUS_TEST_OPENCODE_BIN`
//! is not set, unless `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (as in CI), which makes
//! them fail instead.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, add_agent, ends_run, fake_cli, planned_task, start, summary, wait_for, workspace,
};
use chorus_tests::approvals;
use chorus_tests::fake_anthropic::{FakeAnthropic, Reply, claude_cli_or_skip, real_cli_or_skip};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

/// The helper's script: the fake CLI (as OpenCode, over MCP) reads the notes
/// and reports.
fn helper_script() -> String {
    [
        "fake: say Helping.",
        r#"fake: call {"tool":"file.read","path":"notes.txt"}"#,
        r#"fake: call {"tool":"completion-report","status":"complete","summary":"The helper read the notes.","output":"helped: alpha-from-notes"}"#,
        "fake: say Helped.",
    ]
    .join("\n")
}

/// The lead model's script, the same for both CLIs: (tool, arguments), then
/// the text "Reported.".
fn lead_calls() -> Vec<(&'static str, Value)> {
    vec![
        ("file_read", json!({"path": "notes.txt"})),
        (
            "file_create",
            json!({"path": "made.txt", "content": "made over mcp"}),
        ),
        ("file_read", json!({"path": "../outside.txt"})),
        (
            "handoff",
            json!({"agent": "helper", "prompt": helper_script()}),
        ),
        (
            "completion-report",
            json!({"status": "complete", "summary": "Read, wrote, checked.", "output": "made.txt"}),
        ),
    ]
}

/// The names of the tools the model was offered, sorted, against `expected`.
fn assert_offered(mut offered: Vec<String>, expected: &[&str]) {
    offered.retain(|n| n != "DeferredToolPlaceholder");
    offered.sort_unstable();
    assert_eq!(offered, expected, "no shell, no built-in tool");
}

async fn provider(
    client: &mut Client,
    ws: &pb::Workspace,
    name: &str,
    kind: pb::ProviderKind,
    base_url: &str,
    model: &str,
) {
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: name.into(),
            kind: kind.into(),
            base_url: base_url.into(),
            model: model.into(),
            api_key: if base_url.is_empty() {
                String::new()
            } else {
                "dummy-key".into()
            },
            ..Default::default()
        })
        .await
        .expect("provider");
}

/// A workspace with the lead agent on `lead_kind` (the real CLI, at the fake
/// model `base_url`) and the helper on the fake CLI; the task's events.
async fn run_lead(
    orchestrator: &Orchestrator,
    root: &std::path::Path,
    lead_kind: pb::ProviderKind,
    base_url: &str,
    model: &str,
) -> (Client, pb::Task, Vec<pb::TaskEvent>) {
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "mcp", root).await;
    provider(&mut client, &ws, "lead-model", lead_kind, base_url, model).await;
    // The helper runs the fake CLI (the runner's other CLI) with its script.
    let helper_kind = match lead_kind {
        pb::ProviderKind::ClaudeCode => pb::ProviderKind::Opencode,
        _ => pb::ProviderKind::ClaudeCode,
    };
    provider(&mut client, &ws, "helper-model", helper_kind, "", "").await;
    add_agent(
        &mut client,
        &ws,
        "lead",
        &["file.read", "file.create", "handoff"],
        "lead-model",
    )
    .await;
    add_agent(&mut client, &ws, "helper", &["file.read"], "helper-model").await;
    let task = planned_task(
        &mut client,
        &ws,
        "Read the notes, write made.txt, have them checked.",
    )
    .await;
    let started = start(&mut client, &task, "lead", 120).await;
    let run = started.run.expect("run").id;
    let events = wait_for(&mut client, &task.id, |e| {
        ends_run(e) && chorus_tests::agents::data(e)["run_id"] == run
    })
    .await;
    (client, task, events)
}

fn assert_completed(root: &std::path::Path, events: &[pb::TaskEvent]) {
    let kinds = summary(events);
    for expected in [
        "tool_executed file.read ok",
        "tool_executed file.create ok",
        "agent_handoff_started",
        "agent_handoff_completed",
        "tool_executed handoff ok",
        "tool_executed file.read permission_denied",
        "completion_report_submitted complete",
        "status_changed completed",
    ] {
        assert!(
            kinds.iter().any(|k| k.starts_with(expected)),
            "{expected} not in {kinds:#?}"
        );
    }
    assert!(
        kinds.contains(&"agent_progress file.create tool_use".to_owned()),
        "the CLI's calls are shown by their catalog names: {kinds:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("made.txt")).expect("written"),
        "made over mcp"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_cli_uses_its_granted_tools_over_mcp_with_no_shell() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let mut replies: Vec<Reply> = lead_calls()
        .into_iter()
        .map(|(name, input)| Reply::tool(format!("mcp__chorus__{name}"), input))
        .collect();
    replies.push(Reply::text("Reported."));
    let model = FakeAnthropic::start(replies).await;
    let orchestrator = Orchestrator::with_clis(data_dir.path(), claude, fake_cli()).await;
    let (_client, _task, events) = run_lead(
        &orchestrator,
        root.path(),
        pb::ProviderKind::ClaudeCode,
        &model.base_url(),
        "claude-test-model",
    )
    .await;

    // What the model was offered: exactly the granted tools, natively.
    let offered = model.main_requests()[0]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert_offered(
        offered,
        &[
            "mcp__chorus__completion-report",
            "mcp__chorus__file_create",
            "mcp__chorus__file_read",
            "mcp__chorus__handoff",
            "mcp__chorus__help",
        ],
    );
    let results = model.tool_results();
    assert!(
        results[0].0.contains("alpha-from-notes") && !results[0].1,
        "{results:?}"
    );
    assert!(!results[1].1, "{results:?}");
    assert!(results[2].1, "outside the workspace: {results:?}");
    assert!(
        results[3].0.contains("helped: alpha-from-notes"),
        "the child's report: {results:?}"
    );
    assert!(!results[4].1, "{results:?}");
    assert_completed(root.path(), &events);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_opencode_cli_uses_its_granted_tools_over_mcp_with_no_shell() {
    let Some(opencode) = real_cli_or_skip("CHORUS_TEST_OPENCODE_BIN", "the OpenCode CLI") else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let mut steps: Vec<Step> = lead_calls()
        .into_iter()
        .map(|(name, input)| Step::tool_call(format!("chorus_{name}"), input))
        .collect();
    steps.push(Step::text("Reported."));
    let model = FakeOpenAi::start(steps).await;
    let orchestrator = Orchestrator::with_clis(data_dir.path(), fake_cli(), opencode).await;
    let (_client, _task, events) = run_lead(
        &orchestrator,
        root.path(),
        pb::ProviderKind::Opencode,
        &model.base_url(),
        "fake-model",
    )
    .await;
    let offered = model
        .requests()
        .iter()
        .find_map(|r| r["tools"].as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_offered(
        offered,
        &[
            "chorus_completion-report",
            "chorus_file_create",
            "chorus_file_read",
            "chorus_handoff",
            "chorus_help",
        ],
    );
    assert_completed(root.path(), &events);
    orchestrator.stop().await;
}

/// The real Claude Code CLI over MCP under `ask` rules: a write approved
/// once, one denied with a reason the model reads, one approved for the
/// rest of the task (the next runs without asking), a read nobody answers
/// (denied at its one-second deadline); then a second task cancelled while
/// its call waits ends the wait, the run and its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_cli_waits_for_a_persons_answer_over_mcp() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let create = |path: &str| {
        Reply::tool(
            "mcp__chorus__file_create",
            json!({"path": path, "content": path}),
        )
    };
    let model = FakeAnthropic::start(vec![
        create("a.txt"),
        create("b.txt"),
        create("c.txt"),
        create("d.txt"),
        Reply::tool("mcp__chorus__file_read", json!({"path": "a.txt"})),
        Reply::tool(
            "mcp__chorus__completion-report",
            json!({"status": "complete", "summary": "Wrote what was approved.", "output": "a c d"}),
        ),
        Reply::text("Reported."),
        // The second task's only call.
        create("e.txt"),
    ])
    .await;
    let orchestrator = Orchestrator::with_clis(data_dir.path(), claude, fake_cli()).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "asks", root.path()).await;
    provider(
        &mut client,
        &ws,
        "lead-model",
        pb::ProviderKind::ClaudeCode,
        &model.base_url(),
        "claude-test-model",
    )
    .await;
    add_agent(
        &mut client,
        &ws,
        "lead",
        &["file.create", "file.read"],
        "lead-model",
    )
    .await;
    let rules = vec![
        approvals::rule("file.create", "ask", "", 0),
        approvals::rule("file.read", "ask", "", 1),
    ];
    approvals::set_rules(&mut client, &ws.id, "lead", rules).await;
    let task = planned_task(&mut client, &ws, "Write files, if allowed.").await;
    let run = start(&mut client, &task, "lead", 120)
        .await
        .run
        .expect("run")
        .id;
    // (approve, for the rest of the task, reason)
    let answers = [
        (true, false, ""),
        (false, false, "b.txt is not wanted"),
        (true, true, ""),
    ];
    for (n, (approve, for_task, reason)) in answers.into_iter().enumerate() {
        let id = approvals::approval_id(&approvals::asked(&mut client, &task.id, n + 1).await);
        approvals::answer(&mut client, &task.id, &id, approve, for_task, reason)
            .await
            .expect("answer");
    }
    let events = wait_for(&mut client, &task.id, |e| {
        ends_run(e) && chorus_tests::agents::data(e)["run_id"] == run
    })
    .await;
    let results = model.tool_results();
    assert!(!results[0].1, "approved: {results:?}");
    assert!(
        results[1].1 && results[1].0.contains("b.txt is not wanted"),
        "denied, and why: {results:?}"
    );
    assert!(
        !results[2].1 && !results[3].1,
        "approved for the task: {results:?}"
    );
    assert!(
        results[4].1 && results[4].0.contains("nobody answered"),
        "past its deadline: {results:?}"
    );
    for (file, made) in [
        ("a.txt", true),
        ("b.txt", false),
        ("c.txt", true),
        ("d.txt", true),
    ] {
        assert_eq!(root.path().join(file).exists(), made, "{file}");
    }
    let kinds = summary(&events);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| k.starts_with("approval_requested"))
            .count(),
        4,
        "d.txt ran without asking: {kinds:#?}"
    );
    assert!(
        kinds.iter().any(|k| k == "status_changed completed"),
        "{kinds:#?}"
    );

    // Cancelled while its call waits.
    let second = planned_task(&mut client, &ws, "Write one more.").await;
    let run = start(&mut client, &second, "lead", 120)
        .await
        .run
        .expect("run")
        .id;
    approvals::asked(&mut client, &second.id, 1).await;
    chorus_tests::agents::cancel(&mut client, &second.id, "not now").await;
    // The run's end, then (in the same transaction) the end of its wait.
    let events = wait_for(&mut client, &second.id, |e| {
        e.kind == "approval_answered" && chorus_tests::agents::data(e)["outcome"] == "canceled"
    })
    .await;
    assert!(
        events
            .iter()
            .any(|e| ends_run(e) && chorus_tests::agents::data(e)["run_id"] == run),
        "{:#?}",
        summary(&events)
    );
    assert!(!root.path().join("e.txt").exists());
    orchestrator.stop().await;
}
