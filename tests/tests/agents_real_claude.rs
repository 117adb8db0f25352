//! The real Claude Code CLI (2.1.330, installed by `.ci/run`), run by the
//! orchestrator against a scripted fake Anthropic Messages API, in the run
//! sandbox: it calls chorus-tools through its Bash tool, reads a file, is
//! refused a tool outside its allow-list (by Chorus) and two commands outside
//! its rules (by the CLI itself, recorded as `tool_denied` by "cli"), and
//! submits its completion report; the task completes. This proves our flags,
//! environment, sandbox and system prompt work with the real client.
//!
//! Skipped (with a notice) when `CHORUS_TEST_CLAUDE_BIN` is not set, unless
//! `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (as in CI), which makes it fail instead.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{data, ends_run, planned_task, start, summary, team, wait_for};
use chorus_tests::fake_anthropic::{FakeAnthropic, Reply, claude_cli_or_skip};
use chorus_tests::orchestrator::Orchestrator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_cli_reads_is_refused_and_reports_through_chorus_tools() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let chorus_tools = chorus_tests::chorus_tools_bin().display().to_string();
    let model = FakeAnthropic::start(vec![
        Reply::bash(format!(r#"{chorus_tools} '{{"tool":"file.read","path":"notes.txt"}}'"#)),
        Reply::bash(format!(r#"{chorus_tools} '{{"tool":"file.write","path":"notes.txt","content":"x"}}'"#)),
        Reply::bash("cat /etc/passwd".to_owned()),
        Reply::bash(format!(r#"{chorus_tools} '{{"tool":"help"}}' > /tmp/out.txt"#)),
        Reply::bash(format!(
            r#"{chorus_tools} '{{"tool":"completion-report","status":"complete","summary":"Read the notes.","output":"alpha-from-notes"}}'"#
        )),
        Reply::text("Reported."),
    ])
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
        "You read notes and report what they say.",
    )
    .await;
    chorus_tests::agents::use_transport(&mut client, &team, pb::ToolTransport::Shell).await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        "Read notes.txt and report its content.",
    )
    .await;
    // A cost limit, which the real CLI gets as its own --max-budget-usd too.
    client
        .update_task_budget(pb::UpdateTaskBudgetRequest {
            task_id: task.id.clone(),
            budget: Some(pb::Budget {
                cost_usd: Some(5.0),
                ..Default::default()
            }),
        })
        .await
        .expect("a budget");
    start(&mut client, &task, &team.agent, 120).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let kinds = summary(&events);
    for step in [
        "tool_executed file.read ok",
        "tool_denied file.write",
        "completion_report_submitted complete",
        "status_changed completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == step),
            "'{step}' missing from {kinds:#?}"
        );
    }
    let end = data(events.last().expect("end"));
    assert_eq!(end["reason"], "completed", "{end}");
    assert!(
        end["session_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{end}"
    );
    assert!(
        end["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{end}"
    );
    // Every model message is a call of the task's, read from the stream as it
    // came; the CLI's result line adds the output tokens it counted last, and
    // its own total cost covers every call.
    let calls = model.main_requests().len() as u64;
    let task = chorus_tests::agents::task_of(&mut client, &task.id).await;
    let usage = task.usage.unwrap_or_default();
    assert_eq!(
        (usage.model_calls, usage.input_tokens, usage.output_tokens),
        (
            calls,
            calls * chorus_tests::fake_anthropic::INPUT_TOKENS,
            calls * chorus_tests::fake_anthropic::OUTPUT_TOKENS
        ),
        "{usage:?}"
    );
    assert!(
        usage.cost_usd > 0.0 && usage.unpriced_calls == 0,
        "the CLI's own cost: {usage:?}"
    );

    // What the model saw: only Bash (no sub-agent tool), our prompt, the results.
    let requests = model.main_requests();
    let first = requests.first().expect("a request");
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"Bash") && !tools.contains(&"Agent") && !tools.contains(&"Task"),
        "{tools:?}"
    );
    assert_eq!(first["model"], "claude-test-model");
    let system = first["system"].to_string();
    assert!(
        system.contains("You read notes and report what they say."),
        "{system}"
    );
    assert!(
        system.contains(&format!("{chorus_tools} '{{")),
        "the prompt names the allowed path"
    );
    let results = model.tool_results();
    assert!(results.len() >= 3, "{results:?}");
    assert!(
        results[0].0.contains("alpha-from-notes") && !results[0].1,
        "{results:?}"
    );
    assert!(
        results[1].1 && results[1].0.contains("permission_denied"),
        "{results:?}"
    );
    // Refused by the CLI's own rules, and recorded so.
    let by_cli: Vec<serde_json::Value> = events
        .iter()
        .filter(|e| e.kind == "tool_denied")
        .map(data)
        .filter(|d| d["by"] == "cli")
        .collect();
    let commands: Vec<&str> = by_cli
        .iter()
        .map(|d| d["input"]["command"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        commands,
        [
            "cat /etc/passwd".to_owned(),
            format!(r#"{chorus_tools} '{{"tool":"help"}}' > /tmp/out.txt"#),
        ],
        "{by_cli:?}"
    );
    assert!(by_cli.iter().all(|d| d["tool"] == "Bash"), "{by_cli:?}");
    assert!(
        !std::path::Path::new("/tmp/out.txt").exists()
            || std::fs::read_to_string("/tmp/out.txt").is_ok_and(|t| !t.contains("tools")),
        "the redirection never ran"
    );
    let task = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    assert_eq!(task.status, "completed");
    orchestrator.stop().await;
}

/// A provider named `name` of kind Claude Code on the fake model at `base_url`.
async fn claude_provider(
    client: &mut chorus_tests::agents::Client,
    workspace: &pb::Workspace,
    name: &str,
    base_url: &str,
) {
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: workspace.id.clone(),
            name: name.into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            base_url: base_url.into(),
            model: "claude-test-model".into(),
            api_key: "dummy-key".into(),
            // These tests are of the shell form: agents_real_mcp.rs has MCP's.
            tool_transport: pb::ToolTransport::Shell.into(),
        })
        .await
        .expect("provider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_cli_hands_off_through_chorus_tools_and_gets_the_report_back() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let chorus_tools = chorus_tests::chorus_tools_bin().display().to_string();
    // One fake model per agent: each conversation follows its own script.
    let lead_model = FakeAnthropic::start(vec![
        Reply::bash(format!(
            r#"{chorus_tools} '{{"tool":"handoff","agent":"reader","prompt":"Read notes.txt and report what it says."}}'"#
        )),
        Reply::bash(format!(
            r#"{chorus_tools} '{{"tool":"completion-report","status":"complete","summary":"The reader read the notes.","output":"alpha-from-notes"}}'"#
        )),
        Reply::text("Lead done."),
    ])
    .await;
    let reader_model = FakeAnthropic::start(vec![
        Reply::bash(format!(r#"{chorus_tools} '{{"tool":"file.read","path":"notes.txt"}}'"#)),
        Reply::bash(format!(
            r#"{chorus_tools} '{{"tool":"completion-report","status":"complete","summary":"notes say alpha","output":"alpha-from-notes"}}'"#
        )),
        Reply::text("Reader done."),
    ])
    .await;
    let orchestrator =
        Orchestrator::with_clis(data_dir.path(), claude, chorus_tests::agents::fake_cli()).await;
    let mut client = orchestrator.client().await;
    let workspace = chorus_tests::agents::workspace(&mut client, "real", root.path()).await;
    claude_provider(
        &mut client,
        &workspace,
        "lead-model",
        &lead_model.base_url(),
    )
    .await;
    claude_provider(
        &mut client,
        &workspace,
        "reader-model",
        &reader_model.base_url(),
    )
    .await;
    chorus_tests::agents::add_agent(&mut client, &workspace, "lead", &["handoff"], "lead-model")
        .await;
    chorus_tests::agents::add_agent(
        &mut client,
        &workspace,
        "reader",
        &["file.read"],
        "reader-model",
    )
    .await;
    let task = planned_task(&mut client, &workspace, "Find out what the notes say.").await;
    let run = start(&mut client, &task, "lead", 180)
        .await
        .run
        .expect("run")
        .id;
    let events = wait_for(&mut client, &task.id, |e| {
        chorus_tests::agents::ends(e, &run)
    })
    .await;
    let kinds = summary(&events);
    for step in [
        "agent_handoff_started",
        "tool_executed file.read ok",
        "agent_handoff_completed",
        "tool_executed handoff ok",
        "status_changed completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == step),
            "'{step}' missing from {kinds:#?}"
        );
    }
    // The lead's Bash tool printed the reader's output and report.
    let results = lead_model.tool_results();
    let (handoff_result, is_error) = results.first().expect("the handoff's result");
    assert!(!is_error, "{results:?}");
    assert!(
        handoff_result.contains("Reader done.") && handoff_result.contains("notes say alpha"),
        "{handoff_result}"
    );
    let reader_results = reader_model.tool_results();
    assert!(
        reader_results
            .first()
            .is_some_and(|(text, _)| text.contains("alpha-from-notes")),
        "{reader_results:?}"
    );
    let task = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    assert_eq!(task.status, "completed");
    orchestrator.stop().await;
}
