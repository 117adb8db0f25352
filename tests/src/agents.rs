//! Helpers for tests that run agents: a workspace with a provider and an agent,
//! a planned task, and waiting on its history.

use std::path::Path;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use serde_json::Value;
use tokio_stream::StreamExt;

/// A client of the management API presenting a credential.
pub type Client = pb::orchestrator_client::OrchestratorClient<crate::credentials::AuthChannel>;

/// The fake CLI built with this crate.
pub fn fake_cli() -> std::path::PathBuf {
    crate::built_bin("fake-agent-cli", "chorus-tests")
}

/// A workspace at `root` with a provider of `kind` and an agent using it.
pub struct Team {
    pub workspace: pb::Workspace,
    pub agent: String,
}

/// Creates a workspace, a provider (`kind`, optional base URL, key and model)
/// and an agent with `tools` and `instructions`.
#[allow(clippy::too_many_arguments)]
pub async fn team(
    client: &mut Client,
    root: &Path,
    kind: pb::ProviderKind,
    base_url: &str,
    api_key: &str,
    model: &str,
    tools: &[&str],
    instructions: &str,
) -> Team {
    let workspace = workspace(client, "team", root).await;
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: workspace.id.clone(),
            name: "model".into(),
            kind: kind.into(),
            base_url: base_url.into(),
            model: model.into(),
            api_key: api_key.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    client
        .create_agent(pb::CreateAgentRequest {
            budget: None,
            workspace_id: workspace.id.clone(),
            name: "worker".into(),
            instructions: instructions.into(),
            allowed_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            provider: "model".into(),
            model: String::new(),
            egress: Vec::new(),
            approval_rules: Vec::new(),
        })
        .await
        .expect("agent");
    Team {
        workspace,
        agent: "worker".into(),
    }
}

/// [`team`] on the fake OpenAI-compatible model at `model` (`fake-model`,
/// key `sk-test`): an API agent `worker` with `tools`.
pub async fn api_team(
    client: &mut Client,
    root: &Path,
    model: &crate::fake_openai::FakeOpenAi,
    tools: &[&str],
    instructions: &str,
) -> Team {
    team(
        client,
        root,
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "sk-test",
        "fake-model",
        tools,
        instructions,
    )
    .await
}

/// [`team`] on a Claude Code provider with no base URL, key or model (the
/// orchestrator runs the fake CLI as Claude Code in tests and benchmarks).
pub async fn fake_cli_team(
    client: &mut Client,
    root: &Path,
    tools: &[&str],
    instructions: &str,
) -> Team {
    team(
        client,
        root,
        pb::ProviderKind::ClaudeCode,
        "",
        "",
        "",
        tools,
        instructions,
    )
    .await
}

/// Creates workspace `name` at `root` (with the default agents), first giving
/// `root` to the test user: agents act as the workspace's owner, never root.
pub async fn workspace(client: &mut Client, name: &str, root: &Path) -> pb::Workspace {
    chorus_sandbox::testing::give_to_test_user(root);
    client
        .create_workspace(pb::CreateWorkspaceRequest {
            name: name.into(),
            root: root.display().to_string(),
        })
        .await
        .expect("workspace")
        .into_inner()
}

/// The task's own branch; a failure naming why it has none.
pub fn branch_of(task: &pb::Task) -> pb::TaskBranch {
    task.branch
        .clone()
        .unwrap_or_else(|| panic!("task {} has no branch: {}", task.id, task.branch_note))
}

/// The task as it is now.
pub async fn task_of(client: &mut Client, id: &str) -> pb::Task {
    client
        .get_task(pb::GetTaskRequest {
            id: id.to_owned(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner()
}

/// The task's whole history (up to 1000 events).
pub async fn history(client: &mut Client, task: &str) -> Vec<pb::TaskEvent> {
    client
        .get_history(pb::GetHistoryRequest {
            task_id: task.to_owned(),
            after_sequence: 0,
            limit: 1000,
        })
        .await
        .expect("history")
        .into_inner()
        .events
}

/// A task moved by hand to planned, ready for StartTask.
pub async fn planned_task(
    client: &mut Client,
    workspace: &pb::Workspace,
    description: &str,
) -> pb::Task {
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
    mark_planned(client, &task.id).await;
    task
}

/// Moves a pending task by hand to planned, as a planner would (OpenRun and
/// StartTask take only planned, waiting or active tasks).
pub async fn mark_planned(client: &mut Client, task_id: &str) {
    for status in ["planning", "planned"] {
        client
            .update_task_status(pb::UpdateTaskStatusRequest {
                id: task_id.to_owned(),
                status: status.into(),
                reason: String::new(),
                ..Default::default()
            })
            .await
            .expect("status");
    }
}

/// A task moved by hand to active, with a run of `agent` opened on it (no
/// process: OpenRun); returns the run.
pub async fn opened_run(
    client: &mut Client,
    workspace: &pb::Workspace,
    agent: &str,
    description: &str,
) -> pb::OpenRunResponse {
    let task = planned_task(client, workspace, description).await;
    client
        .update_task_status(pb::UpdateTaskStatusRequest {
            id: task.id.clone(),
            status: "active".into(),
            reason: String::new(),
            ..Default::default()
        })
        .await
        .expect("status");
    client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: agent.into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner()
}

/// Starts `agent` on the task.
pub async fn start(
    client: &mut Client,
    task: &pb::Task,
    agent: &str,
    timeout_secs: u32,
) -> pb::StartTaskResponse {
    client
        .start_task(pb::StartTaskRequest {
            task_id: task.id.clone(),
            agent: agent.into(),
            prompt: String::new(),
            timeout_secs,
        })
        .await
        .expect("start task")
        .into_inner()
}

/// An event's data as JSON.
pub fn data(event: &pb::TaskEvent) -> Value {
    Value::Object(chorus_proto::json::from_struct(
        event.data.clone().unwrap_or_default(),
    ))
}

/// Follows the task's history from the start until `done` says an event is the
/// one awaited; returns every event up to it. Fails after two minutes rather
/// than hang (a safety net, not a timing assertion).
pub async fn wait_for(
    client: &mut Client,
    task: &str,
    done: impl Fn(&pb::TaskEvent) -> bool,
) -> Vec<pb::TaskEvent> {
    let mut stream = client
        .watch_task(pb::WatchTaskRequest {
            task_id: task.to_owned(),
            after_sequence: 0,
            follow: true,
            until_needed: false,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut seen = Vec::new();
    let result = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(event) = stream.next().await {
            let event = event.expect("event");
            let last = done(&event);
            seen.push(event);
            if last {
                return;
            }
        }
    })
    .await;
    assert!(
        result.is_ok(),
        "the awaited event never came; history: {:#?}",
        seen.iter()
            .map(|e| (e.kind.clone(), data(e)))
            .collect::<Vec<_>>()
    );
    seen
}

/// CancelTask of `task` with `reason`; the task as it returns it.
pub async fn cancel(client: &mut Client, task: &str, reason: &str) -> pb::Task {
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.to_owned(),
            reason: reason.into(),
            ..Default::default()
        })
        .await
        .expect("cancel")
        .into_inner()
}

/// Follows the task's history until it is settled (completed, failed or
/// canceled, every run ended); returns the task then. Fails after four
/// minutes rather than hang (a safety net, not a timing assertion).
pub async fn settled(client: &mut Client, task: &str) -> pb::Task {
    tokio::time::timeout(Duration::from_secs(240), async {
        let mut stream = client
            .watch_task(pb::WatchTaskRequest {
                task_id: task.to_owned(),
                after_sequence: 0,
                follow: false,
                until_needed: false,
            })
            .await
            .expect("watch")
            .into_inner();
        while stream.next().await.is_some() {}
    })
    .await
    .expect("the task settles");
    task_of(client, task).await
}

/// Whether an event ends a run (agent_completed, run_failed, run_canceled,
/// run_interrupted).
/// `agent`'s run ended completed: its last model call is recorded (its task
/// may complete, by its report, a moment before).
pub fn completed_by(agent: &'static str) -> impl Fn(&pb::TaskEvent) -> bool {
    move |e| e.kind == "agent_completed" && data(e)["agent"] == agent
}

pub fn ends_run(event: &pb::TaskEvent) -> bool {
    matches!(
        event.kind.as_str(),
        "agent_completed" | "run_failed" | "run_canceled" | "run_interrupted"
    )
}

/// `kind tool status` of each event, for compact assertions.
pub fn summary(events: &[pb::TaskEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let d = data(e);
            let mut s = e.kind.clone();
            for key in ["tool", "status", "to", "kind"] {
                if let Some(v) = d[key].as_str() {
                    s.push(' ');
                    s.push_str(v);
                }
            }
            s
        })
        .collect()
}

/// A fake CLI step calling a tool through chorus-tools.
pub fn call(call: &Value) -> String {
    format!("fake: call {call}")
}

/// A fake CLI step handing off to `agent`, whose script is `child` (one step per
/// line; the prompt carries them as its lines).
pub fn handoff(agent: &str, child: &[String]) -> String {
    call(&serde_json::json!({ "tool": "handoff", "agent": agent, "prompt": child.join("\n") }))
}

/// A fake CLI step submitting a completion report.
pub fn report(status: &str, summary: &str) -> String {
    call(&serde_json::json!({
        "tool": "completion-report",
        "status": status,
        "summary": summary,
        "output": summary,
    }))
}

/// Creates agent `name` with `tools` on `provider`.
pub async fn add_agent(
    client: &mut Client,
    workspace: &pb::Workspace,
    name: &str,
    tools: &[&str],
    provider: &str,
) {
    client
        .create_agent(pb::CreateAgentRequest {
            budget: None,
            workspace_id: workspace.id.clone(),
            name: name.into(),
            instructions: format!("You are {name}."),
            allowed_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            provider: provider.into(),
            model: String::new(),
            egress: Vec::new(),
            approval_rules: Vec::new(),
        })
        .await
        .expect("agent");
}

/// A Claude Code provider `cli` with no base URL, key or model (the
/// orchestrator runs the fake CLI as Claude Code in tests) and an agent
/// `helper` on it with `tools`: a handoff's target.
pub async fn cli_helper(client: &mut Client, workspace: &pb::Workspace, tools: &[&str]) {
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: workspace.id.clone(),
            name: "cli".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            ..Default::default()
        })
        .await
        .expect("cli provider");
    add_agent(client, workspace, "helper", tools, "cli").await;
}

/// Sets how the team's provider's CLI agents reach the tools
/// (UNSPECIFIED keeps the default, MCP).
pub async fn use_transport(client: &mut Client, team: &Team, transport: pb::ToolTransport) {
    let agent = client
        .get_agent(pb::GetAgentRequest {
            workspace_id: team.workspace.id.clone(),
            name: team.agent.clone(),
        })
        .await
        .expect("agent")
        .into_inner();
    client
        .update_provider(pb::UpdateProviderRequest {
            workspace_id: team.workspace.id.clone(),
            name: agent.provider,
            tool_transport: transport.into(),
            ..Default::default()
        })
        .await
        .expect("transport");
}

/// Gives existing agents (e.g. the seeded ones) a provider.
pub async fn use_provider(
    client: &mut Client,
    workspace: &pb::Workspace,
    agents: &[&str],
    provider: &str,
) {
    for agent in agents {
        client
            .update_agent(pb::UpdateAgentRequest {
                workspace_id: workspace.id.clone(),
                name: (*agent).into(),
                provider: Some(provider.into()),
                ..Default::default()
            })
            .await
            .expect("update agent");
    }
}

/// The task's runs of `agent` (every agent's when empty), in the order they started.
pub async fn runs_of(client: &mut Client, task: &str, agent: &str) -> Vec<pb::Run> {
    client
        .list_runs(pb::ListRunsRequest {
            task_id: task.to_owned(),
        })
        .await
        .expect("list runs")
        .into_inner()
        .runs
        .into_iter()
        .filter(|r| agent.is_empty() || r.agent == agent)
        .collect()
}

/// True for the event that ends run `run_id`.
pub fn ends(event: &pb::TaskEvent, run_id: &str) -> bool {
    ends_run(event) && data(event)["run_id"] == run_id
}

/// What a fake CLI's `save` step wrote.
pub fn saved(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("saved call")).expect("json")
}

/// Every message of a handoff's stream, re-opened by its run id, to its end.
pub async fn reopen_handoff(client: &mut Client, run_id: &str) -> Vec<pb::handoff_event::Event> {
    client
        .handoff(pb::HandoffRequest {
            run_id: run_id.to_owned(),
            ..Default::default()
        })
        .await
        .expect("re-open the handoff")
        .into_inner()
        .map(|m| m.expect("message").event.expect("event"))
        .collect()
        .await
}
