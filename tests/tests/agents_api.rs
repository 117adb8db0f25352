//! Agents on an OpenAI-compatible API, with a scripted fake server in place of
//! the model: the orchestrator runs the tool loop and sends every tool call down
//! the same path as chorus-tools (tool-exec or AgentTools, with the run's token),
//! so permission, execution and history are the same as for CLI agents.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{data, ends_run, planned_task, start, summary, team, wait_for};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

async fn orchestrator(data_dir: &Path) -> Orchestrator {
    Orchestrator::for_api_agents(data_dir).await
}

fn function_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t.pointer("/function/name")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_agent_runs_its_tool_loop_through_the_services_and_completes() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("seed");
    let model = FakeOpenAi::start(vec![
        Step::Status(429),
        Step::tool_call("file_read", json!({"path": "notes.txt"})),
        Step::tool_call("file_write", json!({"path": "notes.txt", "content": "x"})),
        Step::tool_call(
            "completion-report",
            json!({"status": "complete", "summary": "Read the notes.", "output": "alpha"}),
        ),
    ])
    .await;
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "sk-test",
        "fake-model",
        &["file.read"],
        "You read notes and report.",
    )
    .await;
    let task = planned_task(&mut client, &team.workspace, "Read the notes.").await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let kinds = summary(&events);
    for step in [
        "agent_started",
        "tool_executed file.read ok",
        "tool_denied file.write",
        "completion_report_submitted complete",
        "status_changed completed",
        "tool_executed completion-report ok",
    ] {
        assert!(
            kinds.iter().any(|k| k == step),
            "'{step}' missing from {kinds:#?}"
        );
    }
    // The 429 and the wait before the retry are in the history.
    let retry = events
        .iter()
        .find(|e| e.kind == "agent_progress" && data(e)["kind"] == "model_retry")
        .map(data)
        .unwrap_or_else(|| panic!("no model_retry in {kinds:#?}"));
    assert!(
        retry["reason"].as_str().is_some_and(|r| r.contains("429")),
        "{retry}"
    );
    assert_eq!(retry["retry"], 1, "{retry}");
    assert!(retry["wait_ms"].as_u64().is_some(), "{retry}");
    let end = data(events.last().expect("end"));
    assert_eq!(end["reason"], "completed");
    // 3 answered calls of 11 prompt and 7 completion tokens (the 429 has none).
    assert_eq!(end["usage"]["input_tokens"], 33);
    assert_eq!(end["usage"]["output_tokens"], 21);

    let requests = model.requests();
    assert_eq!(
        requests.len(),
        4,
        "one retry after the 429, then three turns"
    );
    assert!(
        model
            .authorization()
            .iter()
            .all(|a| a.as_deref() == Some("Bearer sk-test"))
    );
    assert_eq!(requests[1]["model"], "fake-model");
    assert_eq!(
        function_names(&requests[1]),
        ["file_read", "help", "completion-report"]
    );
    let messages = requests[3]["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with("You read notes and report.")
    );
    assert!(
        messages[1]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("Read the notes.")
    );
    let tool_results: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(tool_results.len(), 2);
    assert!(tool_results[0].contains("alpha"), "{}", tool_results[0]);
    assert!(
        tool_results[1].contains("permission_denied"),
        "{}",
        tool_results[1]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_agent_that_stops_without_reporting_is_reminded_with_its_whole_conversation() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let model = FakeOpenAi::start(vec![
        Step::text("I think I am done."),
        Step::tool_call(
            "completion-report",
            json!({"status": "blocked", "summary": "Need access.", "output": "", "blocked_reason": "no credentials"}),
        ),
    ])
    .await;
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "",
        "fake-model",
        &[],
        "You try.",
    )
    .await;
    let task = planned_task(&mut client, &team.workspace, "Deploy it.").await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert!(summary(&events).contains(&"agent_progress reminder".to_owned()));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let roles: Vec<&str> = requests[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(
        model.authorization().iter().all(Option::is_none),
        "no key, no header"
    );
    let task = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    assert_eq!(
        (task.status.as_str(), task.status_reason.as_str()),
        ("waiting", "no credentials")
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_that_keeps_failing_fails_the_task_with_its_answer() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let model = FakeOpenAi::start(vec![Step::Status(503); 10]).await;
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "",
        "m",
        &[],
        "i",
    )
    .await;
    let task = planned_task(&mut client, &team.workspace, "t").await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(events.last().expect("end").kind, "run_failed");
    assert_eq!(model.requests().len(), 5, "the first try and 4 retries");
    let task = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    assert_eq!(task.status, "failed");
    assert!(
        task.status_reason.contains("503 Service Unavailable")
            && task.status_reason.ends_with("(gave up after 4 retries)"),
        "{}",
        task.status_reason
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_agent_hands_off_to_a_cli_agent_and_gets_its_report_in_the_tool_result() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let child_script = [
        chorus_tests::agents::call(
            &json!({"tool": "file.create", "path": "part.txt", "content": "done by the CLI"}),
        ),
        chorus_tests::agents::report("complete", "part written"),
        "fake: say Part written.".to_owned(),
    ]
    .join("\n");
    let model = FakeOpenAi::start(vec![
        Step::tool_call(
            "handoff",
            json!({"agent": "helper", "prompt": child_script}),
        ),
        Step::tool_call(
            "completion-report",
            json!({"status": "complete", "summary": "delegated", "output": "part.txt"}),
        ),
    ])
    .await;
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key pair");
    let orchestrator = Orchestrator::start_configured(
        &data_dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| config.runner.claude_bin = chorus_tests::agents::fake_cli(),
    )
    .await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "",
        "fake-model",
        &["handoff"],
        "You delegate.",
    )
    .await;
    chorus_tests::agents::cli_helper(&mut client, &team.workspace, &["file.create"]).await;
    let task = planned_task(&mut client, &team.workspace, "Get the part written.").await;
    let run = start(&mut client, &task, &team.agent, 0)
        .await
        .run
        .expect("run")
        .id;
    let events = wait_for(&mut client, &task.id, |e| {
        chorus_tests::agents::ends(e, &run)
    })
    .await;
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    assert_eq!(
        std::fs::read_to_string(root.path().join("part.txt")).expect("part"),
        "done by the CLI"
    );
    // The model got the child's output and report as the handoff's result.
    let requests = model.requests();
    let result = requests[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .expect("the handoff's tool result");
    let result: Value = serde_json::from_str(&result).expect("json");
    assert_eq!(result["agent"], "helper", "{result}");
    assert_eq!(result["output"], "Part written.", "{result}");
    assert_eq!(
        result["completion_report"]["summary"], "part written",
        "{result}"
    );
    assert!(
        function_names(&requests[0]).contains(&"handoff".to_owned()),
        "{:?}",
        function_names(&requests[0])
    );
    orchestrator.stop().await;
}
