//! What agent runs use, whatever face they come through: the orchestration
//! tools (executed here for the run whose token is the credential), the
//! allow-list decision for every tool call (tool-exec asks it before each
//! workspace tool), and the recording of calls in the task's history.
//!
//! Every run token is checked claim by claim against its stored run
//! ([`crate::auth::runs::run_of_token`]). A call from an unknown,
//! still-starting, waiting or ended run is refused with
//! [`DomainError::RunNotActive`] and leaves no trace in history (only a
//! warning log). A tool outside the run's allow-list is refused with
//! [`DomainError::NotAllowed`] and recorded as `tool_denied`.

use std::time::Instant;

use chorus_catalog::{Executor, args, outputs};
use chorus_run_token::VerifiedToken;
use chorus_tool_exec::record::ToolCallRecord;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{info, warn};

use super::approvals;
use crate::auth::runs::{self, run_of_token};
use crate::domain::approval::Decision;
use crate::domain::policy::{self, Reporter};
use crate::domain::{
    AgentKind, DomainError, Run, RunId, RunState, Task, TaskId, TaskStatus, now_ms,
};
use crate::error::ServiceError;
use crate::state::AppState;
use crate::store::StoreError;

/// A call of an orchestration tool that ran: its output and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Called {
    pub output: Value,
    pub duration_ms: u64,
}

/// The orchestration tools of agent runs.
#[derive(Debug, Clone)]
pub struct AgentTools {
    state: AppState,
}

impl AgentTools {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    /// Calls `tool` for `run` (the run of the caller's token): checked
    /// against the run's allow-list and its approval rules (`while_waiting`:
    /// what the face does if it waits for a person), executed, recorded in
    /// its history whether it succeeded or not.
    pub async fn call(
        &self,
        run: &Run,
        tool: &str,
        arguments: Value,
        while_waiting: approvals::WhileWaiting,
    ) -> Result<Called, ServiceError> {
        let spec = chorus_catalog::get(tool).ok_or_else(|| {
            ServiceError::Invalid(format!(
                "unknown tool '{tool}'; call help to list the tools"
            ))
        })?;
        // help is answered here too (tool-exec answers it for chorus-tools).
        if spec.executor != Executor::Orchestrator && spec.name != "help" {
            return Err(ServiceError::Invalid(format!(
                "'{tool}' is not executed by the orchestrator; chorus-tools sends it to tool-exec"
            )));
        }
        authorize(&self.state, run, tool).await?;
        let call = approvals::ToolCall {
            arguments: arguments.clone(),
            while_waiting,
            ..approvals::ToolCall::default()
        };
        approvals::check(&self.state, run, tool, &call).await?;
        let started = Instant::now();
        let result = self.execute(run, tool, arguments.clone()).await;
        let elapsed = started.elapsed();
        let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let (status, output) = match &result {
            Ok(output) => ("ok", output.to_string()),
            Err(e) => (chorus_proto::code_name(e.code()), e.to_string()),
        };
        chorus_telemetry::metrics().tool_call(tool, status, elapsed.as_secs_f64());
        info!(run_id = %run.id, agent = %run.agent, tool = %tool, status = %status, "orchestration tool called");
        let call = ToolCallRecord::new(tool, &arguments, status, duration_ms, &output);
        record(&self.state, run, call).await?;
        Ok(Called {
            output: result?,
            duration_ms,
        })
    }

    /// Executes one orchestration tool for `run`.
    async fn execute(
        &self,
        run: &Run,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, ServiceError> {
        match tool {
            "task.get" => {
                let a: args::TaskGet = parse(tool, arguments)?;
                let task = self.task_in_workspace(run, a.task_id.as_deref()).await?;
                Ok(to_json(&outputs::TaskGet {
                    task: task_view(&task),
                }))
            }
            "task.list" => self.task_list(run, parse(tool, arguments)?).await,
            "task.update_stage" => self.update_stage(run, parse(tool, arguments)?).await,
            "task.comment" => self.comment(run, parse(tool, arguments)?).await,
            "completion-report" => self.report(run, parse(tool, arguments)?).await,
            "planner-output" => self.planner_output(run, parse(tool, arguments)?).await,
            "help" => help(run, parse(tool, arguments)?),
            "handoff" => Err(ServiceError::Invalid(
                "handoff streams its agent's progress: call the Handoff RPC with the run token (chorus-tools does)"
                    .to_owned(),
            )),
            other => Err(ServiceError::Invalid(format!(
                "'{other}' is not an orchestration tool"
            ))),
        }
    }

    /// task.list: the tasks of the run's workspace.
    async fn task_list(&self, run: &Run, a: args::TaskList) -> Result<Value, ServiceError> {
        let status = a
            .status
            .as_deref()
            .map(str::parse::<TaskStatus>)
            .transpose()?;
        let store = &self.state.store;
        let own = store.get_task(run.task_id).await?;
        let (tasks, _) = store
            .list_tasks(Some(own.workspace_id), status, 500, None)
            .await?;
        Ok(to_json(&outputs::TaskList {
            tasks: tasks.iter().map(task_view).collect(),
        }))
    }

    /// task.update_stage: moves the run's task to another stage.
    async fn update_stage(
        &self,
        run: &Run,
        a: args::TaskUpdateStage,
    ) -> Result<Value, ServiceError> {
        let by = run.clone();
        let (task, _) = self
            .state
            .store
            .change_task(run.task_id, move |task| {
                Ok(vec![policy::change_stage(task, a.stage, Some(&by))?])
            })
            .await?;
        Ok(to_json(&outputs::TaskStage {
            task_id: task.id.to_string(),
            stage: task.stage,
        }))
    }

    /// task.comment: a note in the task's history.
    async fn comment(&self, run: &Run, a: args::TaskComment) -> Result<Value, ServiceError> {
        let event = policy::comment(run, &a.text)?;
        let events = self
            .state
            .store
            .append_events(run.task_id, vec![event])
            .await?;
        let sequence = events.last().map_or(0, |e| e.sequence);
        Ok(to_json(&outputs::TaskComment {
            task_id: run.task_id.to_string(),
            sequence,
        }))
    }

    /// completion-report: the run's report, which ends its work.
    async fn report(
        &self,
        run: &Run,
        report: args::CompletionReport,
    ) -> Result<Value, ServiceError> {
        let status = report.status;
        // A task's report carries its change as it stands (its own branch).
        let change = match run.parent {
            None => super::branches::summary(&self.state, run.task_id).await,
            Some(_) => None,
        };
        self.state
            .store
            .change_run(run.id, move |run, task| {
                policy::apply_completion_report(run, task, report, change)
            })
            .await?;
        Ok(to_json(&outputs::CompletionReportAccepted { status }))
    }

    /// planner-output: the planner's plan, questions or error.
    async fn planner_output(
        &self,
        run: &Run,
        output: args::PlannerOutput,
    ) -> Result<Value, ServiceError> {
        if let args::PlannerOutput::Plan {
            assigned_agent: Some(assigned),
            ..
        } = &output
            && !assigned.trim().is_empty()
        {
            self.check_assignable(run, assigned).await?;
        }
        let kind = match &output {
            args::PlannerOutput::Plan { .. } => "plan",
            args::PlannerOutput::Questions { .. } => "questions",
            args::PlannerOutput::Error { .. } => "error",
        };
        self.state
            .store
            .change_run(run.id, move |run, _task| {
                policy::apply_planner_output(run, output)
            })
            .await?;
        Ok(to_json(&outputs::PlannerOutputAccepted {
            kind: kind.to_owned(),
        }))
    }

    /// Refuses a plan whose assigned agent is not a user-defined agent of the
    /// run's workspace, naming the ones it could be, so the planner can fix it.
    async fn check_assignable(&self, run: &Run, assigned: &str) -> Result<(), ServiceError> {
        let own = self.state.store.get_task(run.task_id).await?;
        let agents = self.state.store.list_agents(own.workspace_id).await?;
        let assignable: Vec<&str> = agents
            .iter()
            .filter(|a| a.kind == AgentKind::UserDefined)
            .map(|a| a.name.as_str())
            .collect();
        if assignable.contains(&assigned) {
            return Ok(());
        }
        Err(ServiceError::Invalid(format!(
            "assigned_agent '{assigned}' is not an agent this task can be assigned to; choose one of: {} (or leave it out)",
            assignable.join(", ")
        )))
    }

    /// The run's own task, or another task of the same workspace.
    async fn task_in_workspace(
        &self,
        run: &Run,
        task_id: Option<&str>,
    ) -> Result<Task, ServiceError> {
        let own = self.state.store.get_task(run.task_id).await?;
        let Some(id) = task_id else { return Ok(own) };
        let id = TaskId::parse(id)?;
        let task = self.state.store.get_task(id).await?;
        if task.workspace_id != own.workspace_id {
            // Tasks of other workspaces do not exist for this run.
            return Err(crate::store::StoreError::NotFound {
                what: "task",
                key: id.to_string(),
            }
            .into());
        }
        Ok(task)
    }
}

/// The parent of a handoff made with a run's token (`verified`): that run,
/// which must be allowed to hand off now — its allow-list, then its
/// approval rules on the handoff's `arguments` (an ask waits here).
pub async fn handoff_parent(
    state: &AppState,
    verified: &VerifiedToken,
    arguments: Value,
) -> Result<Run, ServiceError> {
    let parent = run_of_token(state, verified).await?;
    authorize(state, &parent, "handoff").await?;
    let call = approvals::ToolCall {
        arguments,
        ..approvals::ToolCall::default()
    };
    if approvals::check(state, &parent, "handoff", &call).await? {
        // Read again: it may have ended while it waited.
        let parent = run_of_token(state, verified).await?;
        policy::check_tool_call(&parent, "handoff")?;
        return Ok(parent);
    }
    Ok(parent)
}

/// For a handoff's stream re-opened with a run's token (`verified`): that
/// run, which may be waiting for that very handoff (its first stream
/// broke), but must not have ended and must hold the handoff tool.
pub async fn handoff_follower(
    state: &AppState,
    verified: &VerifiedToken,
) -> Result<Run, ServiceError> {
    let run = run_of_token(state, verified).await?;
    match run.state {
        RunState::Finished => Err(DomainError::RunNotActive(format!(
            "run {} has ended; it can do nothing more",
            run.id
        ))
        .into()),
        RunState::Spawning | RunState::AwaitingHandoff | RunState::Active => {
            if !run.tools.iter().any(|t| t == "handoff") {
                return Err(DomainError::NotAllowed(format!(
                    "run {} may not call handoff",
                    run.id
                ))
                .into());
            }
            Ok(run)
        }
    }
}

/// Records one finished tool call of `run` as `tool_executed`, bounded by the
/// history's rule whoever reported it.
pub(crate) async fn record(
    state: &AppState,
    run: &Run,
    call: ToolCallRecord,
) -> Result<(), ServiceError> {
    state
        .store
        .append_events(run.task_id, vec![policy::tool_executed(run, call)])
        .await?;
    Ok(())
}

/// tool-exec's question before, and while, a workspace tool call runs: the
/// run of `token` is active and may call `tool` with `call`'s arguments
/// (the allow-list, then the approval rules: an `ask` waits here for its
/// answer). The answer is the call's fence (see [`fence_of`]). A call with
/// processes, asked about the first time (`call_id`), is noted in flight
/// until its record — noted before the run is read, so that an end committed
/// meanwhile either sees the note and waits for the call, or is seen here
/// and refuses it. A call that waits for approval is not in flight while it
/// waits: noted again, and its run read again, once approved.
pub(crate) async fn authorize_reported(
    state: &AppState,
    token: &str,
    tool: &str,
    call_id: Option<String>,
    call: Option<&approvals::ToolCall>,
) -> Result<Authorization, ServiceError> {
    let verified = state.verifier.verify_token(token)?;
    let note = || async {
        match (&call_id, RunId::parse(&verified.grant.run_id)) {
            (Some(id), Ok(run)) => {
                state.store.call_started(id.clone(), run).await?;
                Ok::<_, ServiceError>(Some(id.clone()))
            }
            _ => Ok(None),
        }
    };
    let forget = |noted: Option<String>| async move {
        if let Some(id) = noted
            && let Err(e) = state.store.call_ended(id).await
        {
            warn!(error = %e, "cannot forget a call that was refused; it is forgotten a lease after its run ends");
        }
    };
    let noted = note().await?;
    let decided = async {
        let run = run_of_token(state, &verified).await?;
        authorize(state, &run, tool).await?;
        // Asked again while the call runs: it was decided.
        let ruling = match call {
            Some(call) => approvals::ruling(state, &run, tool, call).await?,
            None => None,
        };
        Ok::<_, ServiceError>((run, ruling))
    }
    .await;
    let (run, ruling) = match decided {
        Ok(decided) => decided,
        Err(e) => {
            forget(noted).await;
            return Err(e);
        }
    };
    let network_asks = run.rules.mention(chorus_catalog::NETWORK);
    let authorization = |fence_in_ms| Authorization {
        fence_in_ms,
        network_asks,
    };
    match ruling {
        None => {}
        Some(ruling) if ruling.decision == Decision::Allow => {}
        Some(ruling) if ruling.decision == Decision::Deny => {
            forget(noted).await;
            return approvals::deny(state, &run, tool, &ruling)
                .await
                .map(|()| authorization(0));
        }
        Some(ruling) => {
            forget(noted).await;
            let call = call.cloned().unwrap_or_default();
            approvals::ask(state, &run, tool, &call, ruling).await?;
            let noted = note().await?;
            let answer = async {
                let run = run_of_token(state, &verified).await?;
                policy::check_tool_call(&run, tool)?;
                fence_of(state, &run)
            }
            .await;
            if answer.is_err() {
                forget(noted).await;
            }
            return answer.map(authorization);
        }
    }
    let answer = fence_of(state, &run);
    if answer.is_err() {
        forget(noted).await;
    }
    answer.map(authorization)
}

/// The answer to tool-exec's question about a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Authorization {
    /// For how long its processes may run (see [`fence_of`]).
    pub fence_in_ms: i64,
    /// Whether the run's rules decide connections of the network grant.
    pub network_asks: bool,
}

/// tool-exec's report of a finished call: no longer in flight (its
/// processes are gone), and recorded in the run's task history, in one
/// transaction that reads the run under its task's lock — unless the call
/// began after the run's end or the run never held the tool
/// ([`policy::check_recordable`]). A call reported by a driver that lost the
/// run to a takeover is recorded as interrupted; a token whose claims are
/// not its run's records nothing (UNAUTHENTICATED).
pub(crate) async fn report(
    state: &AppState,
    token: &str,
    call: ToolCallRecord,
    call_id: Option<String>,
) -> Result<(), ServiceError> {
    let verified = state.verifier.verify_token(token)?;
    let (run_id, task_id) = runs::ids_of(&verified)?;
    if let Some(id) = call_id {
        state.store.call_ended(id).await?;
    }
    let recorded = state
        .store
        .change_task_run(task_id, run_id, move |run, _| {
            let by = runs::reporter(run, &verified)?;
            policy::check_recordable(run, &call, now_ms())?;
            if by == Reporter::LostDriver {
                info!(run_id = %run.id, tool = %call.tool, status = %call.status, "a call of a driver that lost the run is recorded as interrupted");
            }
            Ok(vec![policy::reported_call(run, call, by)])
        })
        .await;
    match recorded {
        Ok(_) => Ok(()),
        Err(StoreError::NotFound { .. }) => {
            Err(DomainError::RunNotActive(format!("run {run_id} is unknown")).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// For how long the processes of a call of `run` may run without another
/// answer (see [`Run::fence_in`]); refused when the run's driver has let
/// its lease lapse.
pub(crate) fn fence_of(state: &AppState, run: &Run) -> Result<i64, ServiceError> {
    Ok(run.fence_in(state.store.replica().lease, now_ms())?)
}

/// Checks `run` may call `tool` now; records a denial as `tool_denied`.
pub(crate) async fn authorize(state: &AppState, run: &Run, tool: &str) -> Result<(), ServiceError> {
    match policy::check_tool_call(run, tool) {
        Ok(()) => Ok(()),
        Err(DomainError::NotAllowed(reason)) => {
            state
                .store
                .append_events(run.task_id, policy::denied_events(run, tool, &reason))
                .await?;
            warn!(run_id = %run.id, agent = %run.agent, tool, "tool denied");
            Err(DomainError::NotAllowed(reason).into())
        }
        Err(e) => {
            warn!(run_id = %run.id, agent = %run.agent, tool, error = %e, "tool call from a run that is not active");
            Err(e.into())
        }
    }
}

/// help: the run's granted tools (or one of them), with their arguments.
fn help(run: &Run, a: args::Help) -> Result<Value, ServiceError> {
    let granted = chorus_catalog::granted_names(&run.tools);
    if let Some(only) = a.tool.as_deref().filter(|only| !granted.contains(only)) {
        return Err(ServiceError::Invalid(format!(
            "tool '{only}' is not available to this run; available: {}",
            granted.join(", ")
        )));
    }
    Ok(to_json(&chorus_catalog::help_for(
        granted,
        a.tool.as_deref(),
    )))
}

fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ServiceError> {
    serde_json::from_value(arguments)
        .map_err(|e| ServiceError::Invalid(format!("invalid arguments for {tool}: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value)
        .unwrap_or_else(|e| Value::String(format!("unserializable output: {e}")))
}

/// A task as agents see it.
fn task_view(t: &Task) -> outputs::Task {
    outputs::Task {
        id: t.id.to_string(),
        description: t.description.clone(),
        status: t.status.as_str().to_owned(),
        stage: t.stage,
        summary: t.planning.summary.clone(),
        requirements: t.planning.requirements.clone(),
        acceptance_criteria: t.planning.acceptance_criteria.clone(),
        plan: t.planning.plan.clone(),
        assigned_agent: t.planning.assigned_agent.as_ref().map(ToString::to_string),
        current_agent: t.current_agent.as_ref().map(ToString::to_string),
        created_ms: t.created_ms,
        updated_ms: t.updated_ms,
    }
}
