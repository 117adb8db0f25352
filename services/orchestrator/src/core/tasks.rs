//! Tasks through their life: created, planned (the planner asks, the user
//! answers), started on an agent, moved by hand, canceled. Each function is
//! one use case of every face, in domain types.

use tracing::{Instrument as _, info};

use crate::domain::policy::planning;
use crate::domain::{
    AutoStart, EventKind, Name, Planning, Run, RunId, TASK_VALIDATOR, Task, TaskId, TaskSource,
    TaskStatus, WorkspaceId, now_ms, policy,
};
use crate::error::ServiceError;
use crate::runner::Launch;
use crate::runner::plan::planner_message;
use crate::runner::start::{
    MAX_RUN_TIMEOUT, before, bounded_timeout, check_prompt, task_message, wait_calls_stopped,
    wait_released,
};
use crate::state::AppState;
use crate::store::StoreError;

/// Creates a task in `workspace`. Its trace begins here (continuing the
/// caller's, when the call carried one): its runs' spans continue it.
pub async fn create(
    state: &AppState,
    workspace: WorkspaceId,
    description: String,
    source: TaskSource,
    budget: crate::domain::Budget,
    auto_start: Option<AutoStart>,
    branch: super::branches::BranchRequest,
) -> Result<Task, ServiceError> {
    let place = state.store.get_workspace(workspace).await?;
    let (branch, branch_note) = super::branches::plan(state, &place, branch).await?;
    let span = tracing::info_span!(
        "task",
        otel.name = "task",
        chorus.workspace_id = %workspace,
        chorus.task_id = tracing::field::Empty,
    );
    let trace = chorus_telemetry::propagation::traceparent(&span);
    let (task, _) = state
        .store
        .create_traced_task(crate::store::NewTask {
            workspace,
            description,
            source,
            trace_context: trace,
            budget,
            auto_start,
            branch,
            branch_note,
        })
        .instrument(span.clone())
        .await?;
    span.record("chorus.task_id", task.id.to_string());
    Ok(task)
}

/// Moves a task to `to` by hand (with `reason`): refused while its runs
/// still go (CancelTask ends them with it), checked in the same transaction.
pub async fn change_status(
    state: &AppState,
    id: TaskId,
    to: TaskStatus,
    reason: Option<String>,
) -> Result<Task, ServiceError> {
    if let Some(reason) = &reason {
        policy::check_status_reason(reason)?;
    }
    let (task, _runs, _) = state
        .store
        .change_task_runs(id, move |task, runs| {
            policy::check_no_live_runs(task, runs)?;
            Ok(vec![policy::change_status(task, to, reason)?])
        })
        .await?;
    Ok(task)
}

/// Replaces a task's planning; an assigned agent must be one of its
/// workspace.
pub async fn change_planning(
    state: &AppState,
    id: TaskId,
    planning: Planning,
) -> Result<Task, ServiceError> {
    if let Some(agent) = &planning.assigned_agent {
        let task = state.store.get_task(id).await?;
        state
            .store
            .get_agent(task.workspace_id, agent.clone())
            .await?;
    }
    let data = serde_json::to_value(&planning)
        .map_err(|e| StoreError::Database(format!("planning is not JSON: {e}")))?;
    let (task, _) = state
        .store
        .change_task(id, move |task| {
            policy::check_planning_editable(task)?;
            task.planning = planning;
            Ok(vec![(EventKind::PlanningUpdated, data)])
        })
        .await?;
    Ok(task)
}

/// Deletes a task that is over with its history and runs; its worktree and
/// the branch it made go with it.
pub async fn delete(state: &AppState, id: TaskId) -> Result<(), ServiceError> {
    let task = state.store.get_task(id).await?;
    state.store.delete_task(id).await?;
    super::branches::forget(state, &task).await;
    Ok(())
}

/// What StartTask asks.
#[derive(Debug, Clone)]
pub struct Start {
    pub task: TaskId,
    /// The agent to run; None: the one the task's plan assigns.
    pub agent: Option<Name>,
    /// Said to the agent after the task and its plan.
    pub prompt: String,
    /// 0: the default run timeout.
    pub timeout_secs: u32,
}

/// Starts an agent on a task: checks everything that can be checked first
/// (agent, provider, status), then in one transaction moves the task to active
/// and opens the run (spawning); the driver takes it from there.
pub async fn start(state: &AppState, req: Start) -> Result<(Task, Run), ServiceError> {
    let task_id = req.task;
    let task = state.store.get_task(task_id).await?;
    task.status.check_transition(TaskStatus::Active)?;
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    super::branches::check_startable(&task)?;
    let agent_name = match req.agent {
        Some(name) => name,
        None => task.planning.assigned_agent.clone().ok_or_else(|| {
            ServiceError::Invalid(
                "agent: name the agent to run, or assign one in the task's plan (UpdatePlanning)"
                    .to_owned(),
            )
        })?,
    };
    let timeout = bounded_timeout(
        req.timeout_secs,
        state.runner.config().run_timeout,
        MAX_RUN_TIMEOUT,
    )?;
    check_prompt(&req.prompt)?;
    let agent = super::runs::user_defined_agent(state, workspace.id, &agent_name, "start").await?;
    // The limits it starts with: its own, else the agent's, else the workspace's.
    let defaults = agent.budget.or(workspace.limits.task_budget);
    policy::start_within_spending(state.store.spend_of(workspace.id).await?)?;
    let launch = Launch::prepare_agent(state, workspace.clone(), agent, timeout).await?;
    // Everything else checked: its worktree is made (its first start).
    let opened = super::branches::open(state, task, &workspace).await?;
    let launch = launch.in_root(opened.root);
    let task = opened.task;
    let extra = match opened.note {
        Some(note) => format!("{note}\n\n{}", req.prompt.trim()),
        None => req.prompt.trim().to_owned(),
    };
    let message = task_message(&task, extra.trim());
    let new = launch.new_run(task_id, None);
    let (run, task, events) = state
        .store
        .create_run_with(new, move |task| {
            policy::start_within_budget(task, defaults)?;
            Ok(vec![policy::change_status(task, TaskStatus::Active, None)?])
        })
        .await?;
    launch.start(state, &run, &task, message, before(&events));
    Ok((task, run))
}

/// Sets a task's own budget; the limits in force follow at once: a limit
/// raised lets a task stopped by it start again, and a limit set below what
/// a running task has spent stops it as if its last call had reached it.
pub async fn set_budget(
    state: &AppState,
    task_id: TaskId,
    own: crate::domain::Budget,
) -> Result<Task, ServiceError> {
    crate::domain::check_budget(&own)?;
    let task = state.store.get_task(task_id).await?;
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    // The defaults of the agent it last started with, over the workspace's.
    let runs = state.store.list_runs(task_id).await?;
    let agent_budget = match runs.iter().rev().find(|r| r.parent.is_none()) {
        Some(root) => match state
            .store
            .get_agent(workspace.id, root.agent.clone())
            .await
        {
            Ok(agent) => agent.budget,
            Err(crate::store::StoreError::NotFound { .. }) => crate::domain::Budget::default(),
            Err(e) => return Err(e.into()),
        },
        None => crate::domain::Budget::default(),
    };
    let defaults = agent_budget.or(workspace.limits.task_budget);
    // A limit set below what a running task has spent stops it now.
    let now = now_ms();
    let (task, _, _) = state
        .store
        .change_task_runs(task_id, move |task, runs| {
            let mut events = policy::set_budget(task, own, defaults)?;
            events.extend(policy::spend(task, runs, None, now)?);
            Ok(events)
        })
        .await?;
    Ok(task)
}

/// Cancels a task: in one transaction it goes canceled and its unfinished runs
/// end with `run_canceled` (so nothing they still try is accepted); the
/// replicas driving them read that and kill their processes, and this
/// returns once each has released its runs (or, for a replica that is gone,
/// once its lease ran out and a live replica released them).
pub async fn cancel(
    state: &AppState,
    task_id: TaskId,
    reason: Option<String>,
) -> Result<Task, ServiceError> {
    let reason = reason.unwrap_or_else(|| "canceled".to_owned());
    policy::check_status_reason(&reason)?;
    let now = now_ms();
    let (task, runs, _) = state
        .store
        .change_task_runs(task_id, move |task, runs| {
            policy::cancel_task(task, runs, &reason, now)
        })
        .await?;
    let ended: Vec<RunId> = runs
        .iter()
        .filter(|r| r.finished_ms == Some(now))
        .map(|r| r.id)
        .collect();
    wait_released(state, task_id, None).await?;
    wait_calls_stopped(state, task_id, ended, now).await?;
    // No process of it is left: its worktree goes, its work kept on its branch.
    super::branches::keep(state, task_id, "the task was canceled").await;
    info!(task_id = %task_id, "task canceled");
    Ok(task)
}

/// Plans a pending or planned task.
pub async fn plan(
    state: &AppState,
    task_id: TaskId,
    timeout_secs: u32,
) -> Result<(Task, Run), ServiceError> {
    let task = state.store.get_task(task_id).await?;
    if task.status == TaskStatus::AwaitingInput {
        return Err(ServiceError::Precondition(
            "the planner asked questions: answer them with SubmitAnswers, which plans the task again"
                .to_owned(),
        ));
    }
    task.status.check_transition(TaskStatus::Planning)?;
    launch_planner(state, task, timeout_secs, None).await
}

/// Answers the planner's questions and plans again.
pub async fn answer(
    state: &AppState,
    task_id: TaskId,
    answers: Vec<String>,
    timeout_secs: u32,
) -> Result<(Task, Run), ServiceError> {
    let task = state.store.get_task(task_id).await?;
    // Checked again in the transaction; this answers before anything is resolved.
    planning::submit_answers(&mut task.clone(), answers.clone())?;
    launch_planner(state, task, timeout_secs, Some(answers)).await
}

/// Resolves the planner, opens its run (with the answers, if any, and the move
/// to planning in the same transaction) and starts it.
async fn launch_planner(
    state: &AppState,
    task: Task,
    timeout_secs: u32,
    answers: Option<Vec<String>>,
) -> Result<(Task, Run), ServiceError> {
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let planner = Name::parse("agent", TASK_VALIDATOR)?;
    let agents = state.store.list_agents(workspace.id).await?;
    let timeout = bounded_timeout(
        timeout_secs,
        state.runner.config().run_timeout,
        MAX_RUN_TIMEOUT,
    )?;
    let launch = Launch::prepare(state, workspace.clone(), &planner, timeout).await?;
    super::branches::check_startable(&task)?;
    let opened = super::branches::open(state, task, &workspace).await?;
    let (task, launch) = (opened.task, launch.in_root(opened.root));
    let new = launch.new_run(task.id, None);
    let (run, task, events) = state
        .store
        .open_run(new, move |task, run, _parent| {
            let mut events = match answers {
                Some(answers) => planning::submit_answers(task, answers)?,
                None => Vec::new(),
            };
            events.extend(planning::begin_planning(task, run)?);
            Ok(events)
        })
        .await?;
    launch.start(
        state,
        &run,
        &task,
        planner_message(&task, &agents),
        before(&events),
    );
    Ok((task, run))
}

/// What a caller asks that hands a task over whole (an A2A message): create
/// it, plan it, and start it once planned, with no one to start it.
#[derive(Debug, Clone)]
pub struct Submit {
    pub workspace: WorkspaceId,
    pub description: String,
    pub source: TaskSource,
    pub budget: crate::domain::Budget,
    /// The agent to start; None: the one the plan assigns.
    pub agent: Option<Name>,
    /// Where its status changes are pushed, from the first (its `task_id`
    /// is set once the task exists).
    pub push: Option<crate::domain::push::PushConfig>,
}

/// Creates a task that starts by itself once planned, and plans it. A named
/// agent is checked before anything is written (INVALID_ARGUMENT or
/// NOT_FOUND, nothing created). When the planner cannot be launched (no
/// provider for it, a workspace over its spending limit), the task is
/// refused: it fails with the reason, no agent having worked on it, and is
/// answered as it stands.
///
/// A request made again (its source's `request_key`: the same id from the
/// same caller) makes no second task: the first one's task is answered, as
/// it stands, and nothing of the second is applied.
pub async fn submit(state: &AppState, req: Submit) -> Result<Task, ServiceError> {
    let request = req.source.request_key();
    if let Some(key) = &request
        && let Some(task) = state
            .store
            .task_of_request(req.workspace, key.clone())
            .await?
    {
        return Ok(task);
    }
    if let Some(agent) = &req.agent {
        super::runs::user_defined_agent(state, req.workspace, agent, "start").await?;
    }
    let created = create(
        state,
        req.workspace,
        req.description,
        req.source,
        req.budget,
        Some(AutoStart { agent: req.agent }),
        super::branches::BranchRequest::default(),
    )
    .await;
    let task = match (created, request) {
        // The same request, made at the same time: one of them made it.
        (
            Err(ServiceError::Store(StoreError::AlreadyExists {
                what: crate::store::TASK_REQUEST,
                ..
            })),
            Some(key),
        ) => {
            return state
                .store
                .task_of_request(req.workspace, key.clone())
                .await?
                .ok_or_else(|| StoreError::not_found(crate::store::TASK_REQUEST, key).into());
        }
        (created, _) => created?,
    };
    if let Some(mut push) = req.push {
        push.task_id = task.id;
        state.store.create_push_config(push).await?;
    }
    let refused = match policy::start_within_spending(state.store.spend_of(req.workspace).await?) {
        Err(e) => ServiceError::from(e),
        Ok(()) => match plan(state, task.id, 0).await {
            Ok((task, _run)) => return Ok(task),
            Err(e) if refusal(&e) => e,
            Err(e) => return Err(e),
        },
    };
    refuse(state, task.id, &refused).await
}

/// Starts a planned task that starts by itself (the planner's run having
/// just ended with a plan); a refusal (no agent to run, a budget or spending
/// limit reached, no provider) fails it with the reason. Nothing happens to
/// a task someone else moved first.
pub async fn start_planned(state: &AppState, task_id: TaskId) {
    let task = match state.store.get_task(task_id).await {
        Ok(task) => task,
        Err(e) => {
            tracing::warn!(task_id = %task_id, error = %e, "cannot read a planned task to start it");
            return;
        }
    };
    let Some(auto) = task.auto_start.clone() else {
        return;
    };
    if task.status != TaskStatus::Planned {
        return;
    }
    let started = start(
        state,
        Start {
            task: task_id,
            agent: auto.agent,
            prompt: String::new(),
            timeout_secs: 0,
        },
    )
    .await;
    match started {
        Ok(_) => info!(task_id = %task_id, "planned task started by itself"),
        Err(e) if refusal(&e) => {
            if let Err(e) = refuse(state, task_id, &e).await {
                tracing::warn!(task_id = %task_id, error = %e, "cannot record that a planned task could not start");
            }
        }
        Err(e) => tracing::warn!(task_id = %task_id, error = %e, "a planned task could not start"),
    }
}

/// Starts each task that starts by itself once its plan is recorded (the
/// runner sends it), and every `period` those left planned a lease or more
/// (their replica stopped before starting them; none from `draining` on),
/// until `stop`.
pub async fn keep_starting(
    state: AppState,
    period: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
    draining: tokio_util::sync::CancellationToken,
) {
    let Some(mut planned) = state.planned.take() else {
        return;
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            Some(task) = planned.recv() => start_planned(&state, task).await,
            _ = tick.tick() => if !draining.is_cancelled() {
                start_stranded(&state, state.store.replica().lease).await;
            },
        }
    }
}

/// Starts the planned tasks that start by themselves and were left planned
/// for longer than `grace` (the replica that recorded their plan stopped
/// before starting them): at most 16 at a time, oldest first. Every replica
/// looks; a task one of them started is left alone by the others.
pub async fn start_stranded(state: &AppState, grace: std::time::Duration) {
    let before = now_ms().saturating_sub(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX));
    let query = crate::store::TaskQuery {
        statuses: vec![TaskStatus::Planned],
        updated_before_ms: Some(before),
        starts_by_itself: true,
        ..crate::store::TaskQuery::default()
    };
    match state.store.find_tasks(query, 16, None).await {
        Ok((tasks, _, _)) => {
            for task in tasks {
                info!(task_id = %task.id, "starting a planned task left unstarted");
                start_planned(state, task.id).await;
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot look for planned tasks left unstarted"),
    }
}

/// What a caller's reply to a task does (an A2A message naming it): answers
/// the planner's questions when it asked some (`answers`, else the whole
/// `text` as the answer to the first question: the planner reads them all),
/// starts it again with `text` as the prompt when it waits or is planned;
/// anything else is refused, saying what the task is doing.
pub async fn reply(
    state: &AppState,
    task_id: TaskId,
    text: String,
    answers: Option<Vec<String>>,
    approval: Option<(super::approvals::Reply, String)>,
) -> Result<Task, ServiceError> {
    let task = state.store.get_task(task_id).await?;
    // A call that waits for a person is what a reply answers first.
    if task.approvals.pending().next().is_some() {
        let (reply, by) = approval.unwrap_or_default();
        super::approvals::reply(state, &task, &text, reply, by).await?;
        return Ok(state.store.get_task(task_id).await?);
    }
    match task.status {
        TaskStatus::AwaitingInput => {
            let answers = answers.unwrap_or_else(|| vec![text]);
            Ok(answer(state, task_id, answers, 0).await?.0)
        }
        TaskStatus::Waiting | TaskStatus::Planned => {
            let agent = task.auto_start.and_then(|a| a.agent);
            let req = Start {
                task: task_id,
                agent,
                prompt: text,
                timeout_secs: 0,
            };
            Ok(start(state, req).await?.0)
        }
        TaskStatus::Pending | TaskStatus::Planning | TaskStatus::Active => {
            Err(ServiceError::Precondition(format!(
                "task {task_id} is {}: it takes a reply only when it needs one (its planner's questions, or a stop that waits for you); watch it until then",
                task.status
            )))
        }
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Canceled => {
            Err(ServiceError::Precondition(format!(
                "task {task_id} is {} and takes no more messages; send a new message in its conversation (the same context) for more work",
                task.status
            )))
        }
    }
}

/// Whether a refusal to plan or start is the task's (it cannot go on as it
/// is) rather than the service's (try again).
fn refusal(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::Invalid(_)
            | ServiceError::Precondition(_)
            | ServiceError::Domain(_)
            | ServiceError::Store(StoreError::NotFound { .. } | StoreError::Domain(_))
    )
}

/// Fails a task that was refused before any agent worked on it, with why.
async fn refuse(
    state: &AppState,
    task_id: TaskId,
    why: &ServiceError,
) -> Result<Task, ServiceError> {
    let why = why.to_string();
    let (task, _) = state
        .store
        .change_task(task_id, move |task| policy::refuse(task, &why))
        .await?;
    Ok(task)
}
