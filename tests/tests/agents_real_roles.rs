//! The real Claude Code (2.1.330) and OpenCode (1.18.33) CLIs in every role a
//! task gives an agent, over the default tool transport (MCP), each against a
//! scripted fake model of its own: the planner (the workspace's system
//! provider) asks a question, reads the answer and plans with an assigned
//! agent; the executor reads, is refused the tools it was not given — by the
//! CLI itself, recorded as `tool_denied {by: cli}` — hands part of the work to
//! a helper on the same CLI and reports; the helper reads and reports. The
//! task completes. This is the path a newcomer's first task takes.
//!
//! Skipped (with a notice) when `CHORUS_TEST_CLAUDE_BIN` / `CHORUS_TEST_OPENCODE_BIN`
//! is not set, unless `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (as in CI), which makes
//! them fail instead.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, add_agent, data, task_of, wait_for, workspace};
use chorus_tests::fake_anthropic::{FakeAnthropic, Reply, claude_cli_or_skip, real_cli_or_skip};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

/// What the planner's second conversation holds and its first does not.
const ANSWERED: &str = "Clarifying Q&A";
const QUESTION: &str = "Which notes should be read?";
const ANSWER: &str = "notes.txt";

/// The planner's verdicts: a question, then (once answered) a plan for `lead`.
fn questions() -> Value {
    json!({"type": "questions", "questions": [QUESTION]})
}

fn plan() -> Value {
    json!({
        "type": "plan",
        "summary": "Read the notes with a helper's check",
        "requirements": ["the notes' content"],
        "acceptance_criteria": ["the report quotes the notes"],
        "plan": ["read notes.txt", "have the helper check it", "report"],
        "assigned_agent": "lead",
    })
}

/// The executor's calls, by catalog wire name: a read, three tools it was not
/// given (refused by the CLI, not by Chorus), a handoff, the report.
fn lead_calls(not_given: [&str; 3]) -> Vec<(String, Value)> {
    let mut calls = vec![("file_read".to_owned(), json!({"path": "notes.txt"}))];
    calls.extend(
        not_given
            .iter()
            .map(|name| ((*name).to_owned(), json!({"path": "notes.txt"}))),
    );
    calls.extend([
        (
            "handoff".to_owned(),
            json!({"agent": "helper", "prompt": "Check what notes.txt says."}),
        ),
        (
            "completion-report".to_owned(),
            json!({"status": "complete", "summary": "Read and checked.", "output": "alpha-from-notes"}),
        ),
    ]);
    calls
}

fn helper_calls() -> Vec<(String, Value)> {
    vec![
        ("file_read".to_owned(), json!({"path": "notes.txt"})),
        (
            "completion-report".to_owned(),
            json!({"status": "complete", "summary": "The notes say alpha.", "output": "checked: alpha-from-notes"}),
        ),
    ]
}

/// A workspace whose planner, `lead` and `helper` each run on a provider of
/// `kind` (default transport) at their own fake model.
async fn team(
    client: &mut Client,
    root: &Path,
    kind: pb::ProviderKind,
    urls: [(&str, String); 3],
    model: &str,
) -> pb::Workspace {
    let ws = workspace(client, "roles", root).await;
    for (name, url) in &urls {
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: (*name).into(),
                kind: kind.into(),
                base_url: url.clone(),
                model: model.into(),
                api_key: "dummy-key".into(),
                ..Default::default()
            })
            .await
            .expect("provider");
    }
    add_agent(client, &ws, "lead", &["file.read", "handoff"], "lead-model").await;
    add_agent(client, &ws, "helper", &["file.read"], "helper-model").await;
    client
        .update_workspace(pb::UpdateWorkspaceRequest {
            id: ws.id.clone(),
            system_provider: Some("planner-model".into()),
            ..Default::default()
        })
        .await
        .expect("system provider")
        .into_inner()
}

fn is_status(to: &'static str) -> impl Fn(&pb::TaskEvent) -> bool {
    move |e| e.kind == "status_changed" && data(e)["to"] == to
}

/// Plans the task (a question, answered, then a plan), starts the plan's
/// agent and follows it to the end; the task's whole history.
async fn plan_answer_and_run(client: &mut Client, ws: &pb::Workspace) -> Vec<pb::TaskEvent> {
    let task = client
        .create_task(pb::CreateTaskRequest {
            workspace_id: ws.id.clone(),
            description: "Find out what the notes say, and have it checked.".into(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    client
        .plan_task(pb::PlanTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("plan");
    wait_for(client, &task.id, |e| {
        is_status("awaiting_input")(e) || is_status("failed")(e)
    })
    .await;
    let asking = task_of(client, &task.id).await;
    assert_eq!(
        asking.status, "awaiting_input",
        "the planner asked: {asking:?}"
    );
    let asked: Vec<String> = asking
        .planning
        .expect("planning")
        .questions
        .into_iter()
        .map(|q| q.question)
        .collect();
    assert_eq!(asked, [QUESTION]);
    client
        .submit_answers(pb::SubmitAnswersRequest {
            id: task.id.clone(),
            answers: vec![ANSWER.into()],
            ..Default::default()
        })
        .await
        .expect("answers");
    wait_for(client, &task.id, |e| {
        is_status("planned")(e) || is_status("failed")(e)
    })
    .await;
    let planned = task_of(client, &task.id).await;
    assert_eq!(planned.status, "planned", "{planned:?}");
    assert_eq!(planned.planning.expect("plan").assigned_agent, "lead");
    let started = client
        .start_task(pb::StartTaskRequest {
            task_id: task.id.clone(),
            timeout_secs: 180,
            ..Default::default()
        })
        .await
        .expect("start the plan's agent")
        .into_inner();
    assert_eq!(started.run.expect("run").agent, "lead");
    wait_for(client, &task.id, |e| {
        is_status("completed")(e) || is_status("failed")(e)
    })
    .await;
    chorus_tests::agents::history(client, &task.id).await
}

/// The story every CLI must tell: planned after a question, the lead's read,
/// its three refusals by the CLI, the helper's read and report, the lead's
/// report; completed.
fn assert_every_role_played(events: &[pb::TaskEvent], refused: [&str; 3]) {
    let by_agent = |kind: &str, agent: &str| {
        events
            .iter()
            .filter(|e| e.kind == kind && data(e)["agent"] == agent)
            .map(data)
            .collect::<Vec<_>>()
    };
    let kinds: Vec<String> = chorus_tests::agents::summary(events);
    for step in [
        "planning_questions_returned",
        "answers_submitted",
        "planning_completed",
        "agent_handoff_started",
        "agent_handoff_completed",
        "status_changed completed",
    ] {
        assert!(
            kinds.iter().any(|k| k.starts_with(step)),
            "'{step}' missing from {kinds:#?}"
        );
    }
    for agent in ["lead", "helper"] {
        let reads = by_agent("tool_executed", agent);
        assert!(
            reads
                .iter()
                .any(|d| d["tool"] == "file.read" && d["status"] == "ok"),
            "{agent} read the notes: {reads:#?}"
        );
        let reports = by_agent("completion_report_submitted", agent);
        assert_eq!(reports.len(), 1, "{agent}: {reports:#?}");
    }
    let denied: Vec<(String, String)> = by_agent("tool_denied", "lead")
        .into_iter()
        .map(|d| {
            (
                d["tool"].as_str().unwrap_or_default().to_owned(),
                d["by"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = refused
        .iter()
        .map(|t| ((*t).to_owned(), "cli".to_owned()))
        .collect();
    assert_eq!(denied, expected, "every refusal of the CLI's is recorded");
    let answered = events
        .iter()
        .find(|e| e.kind == "answers_submitted")
        .map(data)
        .unwrap_or_default();
    assert!(answered.to_string().contains(ANSWER), "{answered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_plans_after_a_question_executes_and_helps_over_mcp() {
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let tool = |name: &str, input: Value| Reply::tool(format!("mcp__chorus__{name}"), input);
    let planner = FakeAnthropic::start_scripts(vec![
        (
            ANSWERED,
            vec![tool("planner-output", plan()), Reply::text("Planned.")],
        ),
        (
            "",
            vec![tool("planner-output", questions()), Reply::text("Asked.")],
        ),
    ])
    .await;
    // The lead asks for a tool it was not given (file.write) and for two of
    // the CLI's own built-in tools, which it never gets under MCP.
    let mut lead_script: Vec<Reply> = lead_calls(["file_write", "Bash", "Read"])
        .into_iter()
        .map(|(name, input)| match name.as_str() {
            "Bash" => Reply::tool("Bash", json!({"command": "cat notes.txt"})),
            "Read" => Reply::tool("Read", json!({"file_path": "/etc/passwd"})),
            _ => tool(&name, input),
        })
        .collect();
    lead_script.push(Reply::text("Lead done."));
    let lead = FakeAnthropic::start(lead_script).await;
    let mut helper_script: Vec<Reply> = helper_calls()
        .into_iter()
        .map(|(name, input)| tool(&name, input))
        .collect();
    helper_script.push(Reply::text("Helper done."));
    let helper = FakeAnthropic::start(helper_script).await;

    let orchestrator =
        Orchestrator::with_clis(data_dir.path(), claude, chorus_tests::agents::fake_cli()).await;
    let mut client = orchestrator.client().await;
    let ws = team(
        &mut client,
        root.path(),
        pb::ProviderKind::ClaudeCode,
        [
            ("planner-model", planner.base_url()),
            ("lead-model", lead.base_url()),
            ("helper-model", helper.base_url()),
        ],
        "claude-test-model",
    )
    .await;
    let events = plan_answer_and_run(&mut client, &ws).await;
    assert_every_role_played(&events, ["file.write", "Bash", "Read"]);

    // The planner was offered its tool natively (Claude Code kept the whole
    // list: planner-output's schema is an object), and read the answer.
    let offered: Vec<String> = planner.main_requests()[0]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert!(
        offered.contains(&"mcp__chorus__planner-output".to_owned()),
        "{offered:?}"
    );
    assert!(
        planner
            .main_requests()
            .iter()
            .any(|r| r["messages"].to_string().contains(ANSWER)),
        "the second planning run read the answer"
    );
    let helper_results = lead.tool_results();
    assert!(
        helper_results
            .iter()
            .any(|(text, _)| text.contains("checked: alpha-from-notes")),
        "the helper's report came back to the lead: {helper_results:?}"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_plans_after_a_question_executes_and_helps_over_mcp() {
    let Some(opencode) = real_cli_or_skip("CHORUS_TEST_OPENCODE_BIN", "the OpenCode CLI") else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha-from-notes\n").expect("seed");
    let step = |name: &str, input: Value| Step::tool_call(format!("chorus_{name}"), input);
    // One conversation after the other: the question, then the plan.
    let planner = FakeOpenAi::start(vec![
        step("planner-output", questions()),
        Step::text("Asked."),
        step("planner-output", plan()),
        Step::text("Planned."),
    ])
    .await;
    let mut lead_steps: Vec<Step> = lead_calls(["file_write", "bash", "read"])
        .into_iter()
        .map(|(name, input)| match name.as_str() {
            "bash" => Step::tool_call("bash", json!({"command": "cat notes.txt"})),
            "read" => Step::tool_call("read", json!({"filePath": "/etc/passwd"})),
            _ => step(&name, input),
        })
        .collect();
    lead_steps.push(Step::text("Lead done."));
    let lead = FakeOpenAi::start(lead_steps).await;
    let mut helper_steps: Vec<Step> = helper_calls()
        .into_iter()
        .map(|(name, input)| step(&name, input))
        .collect();
    helper_steps.push(Step::text("Helper done."));
    let helper = FakeOpenAi::start(helper_steps).await;

    let orchestrator =
        Orchestrator::with_clis(data_dir.path(), chorus_tests::agents::fake_cli(), opencode).await;
    let mut client = orchestrator.client().await;
    let ws = team(
        &mut client,
        root.path(),
        pb::ProviderKind::Opencode,
        [
            ("planner-model", planner.base_url()),
            ("lead-model", lead.base_url()),
            ("helper-model", helper.base_url()),
        ],
        "fake-model",
    )
    .await;
    let events = plan_answer_and_run(&mut client, &ws).await;
    assert_every_role_played(&events, ["file.write", "bash", "read"]);
    let offered: Vec<String> = planner
        .requests()
        .iter()
        .find_map(|r| r["tools"].as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect();
    assert!(
        offered.contains(&"chorus_planner-output".to_owned()),
        "{offered:?}"
    );
    orchestrator.stop().await;
}
