//! StartTask and CancelTask.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_run_token::RunGrant;
use tokio::time::Instant;
use tracing::info;

use crate::domain::{AgentKind, Name, ProviderKind, Task, TaskStatus, now_ms, policy};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::providers::prompt::{Invocation, system_prompt};
use crate::providers::{ProviderSettings, RunContext};
use crate::state::AppState;

/// How long a run token outlives the run's timeout (the end is recorded after
/// the processes are stopped).
const TOKEN_MARGIN: Duration = Duration::from_secs(60);

/// Starts an agent on a task: checks everything that can be checked first
/// (agent, provider, status), then in one transaction moves the task to active
/// and opens the run (spawning); the driver takes it from there.
pub async fn start_task(
    state: &AppState,
    req: pb::StartTaskRequest,
) -> Result<pb::StartTaskResponse, ServiceError> {
    let runner = Arc::clone(&state.runner);
    let task_id = convert::task_id("task_id", &req.task_id)?;
    let task = state.store.get_task(task_id).await?;
    task.status.check_transition(TaskStatus::Active)?;
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let agent_name = match convert::non_empty(req.agent) {
        Some(name) => Name::parse("agent", &name)?,
        None => task.planning.assigned_agent.clone().ok_or_else(|| {
            ServiceError::Invalid(
                "agent: name the agent to run, or assign one in the task's plan (UpdatePlanning)"
                    .to_owned(),
            )
        })?,
    };
    let agent = state
        .store
        .get_agent(workspace.id, agent_name.clone())
        .await?;
    let provider_name = match agent.kind {
        AgentKind::UserDefined => agent.provider.clone(),
        AgentKind::Internal => workspace.system_provider.clone(),
    }
    .ok_or_else(|| {
        ServiceError::Precondition(match agent.kind {
            AgentKind::UserDefined => format!(
                "agent '{agent_name}' has no provider; give it one with UpdateAgent"
            ),
            AgentKind::Internal => format!(
                "workspace '{}' has no system provider to run '{agent_name}'; set one with UpdateWorkspace",
                workspace.name
            ),
        })
    })?;
    let provider = state
        .store
        .get_provider(workspace.id, provider_name.clone())
        .await?;
    let api_key = state
        .store
        .provider_api_key(workspace.id, provider_name.clone())
        .await?;
    let model = agent.model.clone().or_else(|| provider.model.clone());
    if provider.kind != ProviderKind::OpenaiCompatible {
        runner
            .config()
            .validate()
            .map_err(ServiceError::Precondition)?;
    }
    if provider.kind != ProviderKind::OpenaiCompatible && state.addresses.tool_exec.is_empty() {
        return Err(ServiceError::Precondition(
            "no tool-exec is configured, so a CLI agent could not use its tools; run the orchestrator with its embedded tool-exec or --tool-exec-addr".to_owned(),
        ));
    }
    let timeout = match req.timeout_secs {
        0 => runner.config().run_timeout,
        secs => Duration::from_secs(u64::from(secs)),
    };
    let tools = agent.granted_tools()?;
    let chorus_tools = runner.config().chorus_tools.display().to_string();
    let invocation = match provider.kind {
        ProviderKind::OpenaiCompatible => Invocation::Functions,
        ProviderKind::ClaudeCode | ProviderKind::Opencode => Invocation::Cli(&chorus_tools),
    };
    let prompt = system_prompt(
        agent.kind,
        &agent.instructions,
        &agent.allowed_tools,
        invocation,
    );
    let message = task_message(&task, req.prompt.trim());

    let (run, task, events) = state
        .store
        .create_run_with(task_id, agent_name.clone(), None, tools.clone(), |task| {
            Ok(vec![policy::change_status(task, TaskStatus::Active, None)?])
        })
        .await?;
    state.publish(&events);

    let grant = RunGrant {
        run_id: run.id.to_string(),
        task_id: task_id.to_string(),
        agent: agent_name.to_string(),
        tools: tools.clone(),
        root: workspace.root.clone(),
    };
    let ctx = RunContext {
        run_id: run.id,
        task_id,
        agent: agent_name,
        agent_kind: agent.kind,
        provider: ProviderSettings {
            name: provider.name.clone(),
            kind: provider.kind,
            base_url: provider.base_url.clone(),
            api_key,
        },
        model,
        tools,
        system_prompt: prompt,
        token: state.signer.mint(&grant, timeout + TOKEN_MARGIN),
        tools_addr: state.addresses.tool_exec.clone(),
        orchestrator_addr: state.addresses.orchestrator.clone(),
        workspace_root: workspace.root.clone(),
        run_dir: runner.config().runs_dir.join(run.id.to_string()),
        deadline: Instant::now() + timeout,
        timeout,
        stop: state.shutdown.child_token(),
    };
    info!(run_id = %run.id, task_id = %task_id, agent = %ctx.agent, provider = %provider.name, kind = provider.kind.as_str(), "starting agent");
    runner.launch(state.clone(), ctx, message);
    Ok(pb::StartTaskResponse {
        task: Some(convert::task(&task)),
        run: Some(convert::run(&run)),
    })
}

/// The first message of a run: the task and what its plan says.
fn task_message(task: &Task, extra: &str) -> String {
    let mut out = format!("Task {}: {}\n", task.id, task.description.trim());
    let planning = &task.planning;
    if let Some(summary) = planning.summary.as_deref().filter(|s| !s.trim().is_empty()) {
        let _ = write!(out, "\nSummary: {}\n", summary.trim());
    }
    for (title, items) in [
        ("Requirements", &planning.requirements),
        ("Acceptance criteria", &planning.acceptance_criteria),
        ("Plan", &planning.plan),
    ] {
        if !items.is_empty() {
            let _ = write!(out, "\n{title}:\n");
            for item in items {
                let _ = writeln!(out, "- {}", item.trim());
            }
        }
    }
    if !extra.is_empty() {
        let _ = write!(out, "\n{extra}\n");
    }
    out
}

/// Cancels a task: in one transaction it goes canceled and its unfinished runs
/// end with `run_canceled` (so nothing they still try is accepted); then every
/// live run of the task is stopped and its processes killed before this returns.
pub async fn cancel_task(
    state: &AppState,
    req: pb::CancelTaskRequest,
) -> Result<pb::Task, ServiceError> {
    let task_id = convert::task_id("id", &req.id)?;
    let reason = convert::non_empty(req.reason).unwrap_or_else(|| "canceled".to_owned());
    let now = now_ms();
    let (task, _runs, events) = state
        .store
        .change_task_runs(task_id, move |task, runs| {
            policy::cancel_task(task, runs, &reason, now)
        })
        .await?;
    state.publish(&events);
    state.runner.stop(Some(task_id)).await;
    info!(task_id = %task_id, "task canceled");
    Ok(convert::task(&task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Planning, TaskSource};

    #[test]
    fn the_message_carries_the_task_and_its_plan() {
        let mut task = Task {
            id: crate::domain::TaskId::new(),
            workspace_id: crate::domain::WorkspaceId::new(),
            description: "Fix the bug".to_owned(),
            source: TaskSource::default(),
            status: TaskStatus::Planned,
            status_reason: None,
            stage: crate::domain::Stage::Backlog,
            planning: Planning::default(),
            current_agent: None,
            created_ms: 0,
            updated_ms: 0,
            last_sequence: 0,
        };
        task.planning = Planning {
            summary: Some("A crash on start".to_owned()),
            requirements: vec!["no crash".to_owned()],
            acceptance_criteria: vec!["starts".to_owned()],
            plan: vec!["read main.rs".to_owned(), "fix it".to_owned()],
            ..Planning::default()
        };
        let message = task_message(&task, "Be brief.");
        assert!(message.starts_with(&format!("Task {}: Fix the bug\n", task.id)));
        for part in [
            "Summary: A crash on start",
            "Requirements:\n- no crash",
            "Acceptance criteria:\n- starts",
            "Plan:\n- read main.rs\n- fix it",
            "Be brief.",
        ] {
            assert!(message.contains(part), "{part} missing from {message}");
        }
    }
}
