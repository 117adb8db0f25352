//! End to end: the orchestrator with its embedded tool-exec, a run opened over
//! gRPC, and the real chorus-tools binary calling file and orchestration tools
//! with the run's token. History shows every call by name; once the run is
//! finished its token can do nothing and leaves no trace.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::orchestrator::Orchestrator;
use chorus_tests::{ToolsEnv, chorus_tools};
use serde_json::{Value, json};

fn database_url(data: &std::path::Path) -> String {
    data.join("chorus.db").display().to_string()
}

type Client = chorus_tests::agents::Client;

/// A workspace rooted at `root` and one task in it.
async fn workspace_with_task(
    client: &mut Client,
    name: &str,
    root: &std::path::Path,
    description: &str,
) -> (pb::Workspace, pb::Task) {
    let workspace = client
        .create_workspace(pb::CreateWorkspaceRequest {
            name: name.into(),
            root: root.display().to_string(),
        })
        .await
        .expect("workspace")
        .into_inner();
    let task = client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: workspace.id.clone(),
            description: description.into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    (workspace, task)
}

async fn history(client: &mut chorus_tests::agents::Client, task: &str) -> Vec<pb::TaskEvent> {
    client
        .get_history(pb::GetHistoryRequest {
            task_id: task.to_owned(),
            after_sequence: 0,
            limit: 0,
        })
        .await
        .expect("history")
        .into_inner()
        .events
}

fn tool_of(event: &pb::TaskEvent) -> String {
    let data = Value::Object(chorus_proto::json::from_struct(
        event.data.clone().unwrap_or_default(),
    ));
    format!(
        "{} {} {}",
        event.kind,
        data["tool"].as_str().unwrap_or_default(),
        data["status"].as_str().unwrap_or_default()
    )
    .trim()
    .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_calls_tools_through_chorus_tools_and_history_records_each_by_name() {
    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    std::fs::write(root.path().join("notes.txt"), "alpha\nbeta\n").expect("seed");
    let orchestrator = Orchestrator::start(&database_url(data.path()), data.path()).await;
    let mut client = orchestrator.client().await;

    let (workspace, task) =
        workspace_with_task(&mut client, "demo", root.path(), "summarise the notes").await;
    client
        .create_agent(pb::CreateAgentRequest {
            workspace_id: workspace.id.clone(),
            name: "dev".into(),
            instructions: "do the work".into(),
            allowed_tools: vec!["@developer".into()],
            ..Default::default()
        })
        .await
        .expect("agent");
    for status in ["planning", "planned", "active"] {
        client
            .update_task_status(pb::UpdateTaskStatusRequest {
                id: task.id.clone(),
                status: status.into(),
                reason: String::new(),
                ..Default::default()
            })
            .await
            .expect(status);
    }
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "dev".into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner();
    // OpenRun hands out the whole environment of an agent process.
    assert_eq!(opened.tools_addr, orchestrator.tool_exec_addr.to_string());
    assert_eq!(opened.orchestrator_addr, orchestrator.addr.to_string());
    let env = ToolsEnv {
        token: Some(opened.token.clone()),
        tools_addr: Some(opened.tools_addr.clone()),
        orchestrator_addr: Some(opened.orchestrator_addr.clone()),
    };
    let call = |value: Value| value.to_string();

    let read = chorus_tools(
        &env,
        &[&call(json!({"tool": "file.read", "path": "notes.txt"}))],
    )
    .await;
    assert_eq!(read.output()["total_lines"], 2);
    let created = chorus_tools(
        &env,
        &[&call(
            json!({"tool": "file.create", "path": "summary.md", "content": "two notes\n"}),
        )],
    )
    .await;
    assert_eq!(created.output()["bytes_written"], 10);
    let denied = chorus_tools(
        &env,
        &[&call(
            json!({"tool": "handoff", "agent": "writer", "prompt": "help"}),
        )],
    )
    .await;
    denied.expect_failure(3, "permission_denied");
    let commented = chorus_tools(
        &env,
        &[&call(
            json!({"tool": "task.comment", "text": "read the notes"}),
        )],
    )
    .await;
    assert_eq!(commented.output()["task_id"], task.id);
    let got = chorus_tools(&env, &[&call(json!({"tool": "task.get"}))]).await;
    assert_eq!(got.output()["task"]["description"], "summarise the notes");
    let staged = chorus_tools(
        &env,
        &[&call(
            json!({"tool": "task.update_stage", "stage": "research"}),
        )],
    )
    .await;
    assert_eq!(staged.output()["stage"], "research");
    let skipped = chorus_tools(
        &env,
        &[&call(json!({"tool": "task.update_stage", "stage": "done"}))],
    )
    .await;
    skipped.expect_failure(1, "failed_precondition");
    let report = json!({"tool": "completion-report", "status": "complete", "summary": "summarised", "output": "two notes"});
    assert_eq!(
        chorus_tools(&env, &[&call(report.clone())]).await.output()["status"],
        "complete"
    );
    chorus_tools(&env, &[&call(report)])
        .await
        .expect_failure(1, "already_exists");

    let done = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    assert_eq!(
        done.status, "completed",
        "the root run's report settles the task"
    );

    let calls: Vec<String> = history(&mut client, &task.id)
        .await
        .iter()
        .filter(|e| e.kind == "tool_executed" || e.kind == "tool_denied")
        .map(tool_of)
        .collect();
    assert_eq!(
        calls,
        [
            "tool_executed file.read ok",
            "tool_executed file.create ok",
            "tool_denied handoff",
            "tool_executed task.comment ok",
            "tool_executed task.get ok",
            "tool_executed task.update_stage ok",
            "tool_executed task.update_stage failed_precondition",
            "tool_executed completion-report ok",
            "tool_executed completion-report already_exists",
        ]
    );

    // Other gRPC callers use AgentTools directly with the run token.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", orchestrator.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut agent_tools = pb::agent_tools_client::AgentToolsClient::new(channel);
    let mut request = tonic::Request::new(pb::CallToolRequest {
        tool: "help".into(),
        arguments: None,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", opened.token).parse().expect("ascii"),
    );
    let help = chorus_proto::json::from_value(
        agent_tools
            .call_tool(request)
            .await
            .expect("help")
            .into_inner()
            .output
            .expect("output"),
    );
    let names: Vec<&str> = help["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"task.comment")
            && names.contains(&"file.patch")
            && !names.contains(&"handoff"),
        "{names:?}"
    );

    // Once the run has ended, its token does nothing and leaves nothing.
    client
        .finish_run(pb::FinishRunRequest {
            id: opened.run.expect("run").id,
            reason: "done".into(),
        })
        .await
        .expect("finish");
    let before = history(&mut client, &task.id).await.len();
    let late_write = chorus_tools(
        &env,
        &[&call(
            json!({"tool": "file.create", "path": "late.md", "content": "x"}),
        )],
    )
    .await;
    let message = late_write.expect_failure(1, "failed_precondition");
    assert!(message.contains("has ended"), "{message}");
    chorus_tools(
        &env,
        &[&call(json!({"tool": "task.comment", "text": "late"}))],
    )
    .await
    .expect_failure(1, "failed_precondition");
    assert!(!root.path().join("late.md").exists());
    assert_eq!(
        history(&mut client, &task.id).await.len(),
        before,
        "refused calls leave no history"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_data_keeps_everything() {
    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    let url = database_url(data.path());
    let first = Orchestrator::start(&url, data.path()).await;
    let mut client = first.client().await;
    let (workspace, task) =
        workspace_with_task(&mut client, "kept", root.path(), "survive a restart").await;
    client
        .update_task_status(pb::UpdateTaskStatusRequest {
            id: task.id.clone(),
            status: "planning".into(),
            reason: String::new(),
            ..Default::default()
        })
        .await
        .expect("planning");
    drop(client);
    first.stop().await;

    let second = Orchestrator::start(&url, data.path()).await;
    let mut client = second.client().await;
    let again = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    assert_eq!(
        (
            again.description.as_str(),
            again.status.as_str(),
            again.last_sequence
        ),
        ("survive a restart", "planning", 2)
    );
    let agents = client
        .list_agents(pb::ListAgentsRequest {
            workspace_id: workspace.id.clone(),
        })
        .await
        .expect("agents")
        .into_inner()
        .agents;
    assert_eq!(agents.len(), 7);
    assert_eq!(history(&mut client, &task.id).await.len(), 2);
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_separate_tool_exec_checks_runs_with_the_orchestrator() {
    use chorus_tool_exec::gate::{OrchestratorGate, RunGate};
    use std::sync::Arc;

    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    let signer = chorus_run_token::load_or_create_signer(data.path()).expect("key pair");
    let orchestrator = Orchestrator::start_with(&database_url(data.path()), signer, false).await;
    // tool-exec as its own service: the orchestrator's public key, the orchestrator as gate.
    let service_key = chorus_tests::credentials::make_key(
        &database_url(data.path()),
        "tool-exec",
        chorus_auth::Role::ToolExec,
    )
    .await;
    let gate: Arc<dyn RunGate> = Arc::new(
        OrchestratorGate::new(
            &orchestrator.addr.to_string(),
            Some(&service_key),
            &Default::default(),
            chorus_tool_exec::gate::pool::DEFAULT_CONNECTIONS,
        )
        .expect("gate"),
    );
    let same_key = chorus_run_token::load_or_create_signer(data.path()).expect("same key pair");
    let tool_exec = chorus_tests::ToolExec::start_with_gate(
        chorus_tool_exec::Limits::default(),
        same_key,
        Some(gate),
    )
    .await;

    let mut client = orchestrator.client().await;
    let (_workspace, task) =
        workspace_with_task(&mut client, "split", root.path(), "two processes").await;
    chorus_tests::agents::mark_planned(&mut client, &task.id).await;
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "writer".into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner();
    let env = ToolsEnv {
        token: Some(opened.token),
        tools_addr: Some(tool_exec.addr.to_string()),
        orchestrator_addr: Some(orchestrator.addr.to_string()),
    };
    let created = chorus_tools(
        &env,
        &[&json!({"tool": "file.create", "path": "a.md", "content": "a"}).to_string()],
    )
    .await;
    assert_eq!(created.output()["bytes_written"], 1);
    let denied = chorus_tools(
        &env,
        &[&json!({"tool": "bash", "command": "true"}).to_string()],
    )
    .await;
    denied.expect_failure(3, "permission_denied");
    let calls: Vec<String> = history(&mut client, &task.id)
        .await
        .iter()
        .filter(|e| e.kind.starts_with("tool_"))
        .map(tool_of)
        .collect();
    assert_eq!(calls, ["tool_executed file.create ok", "tool_denied bash"]);
    tool_exec.stop().await;
    orchestrator.stop().await;
}
