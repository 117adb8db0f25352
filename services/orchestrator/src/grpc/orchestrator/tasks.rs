//! Tasks: create, read, list, move through the status table, edit planning, read
//! and watch the history.

use std::pin::Pin;
use std::task::{Context, Poll};

use chorus_proto::orchestrator::v1 as pb;
use tokio_stream::Stream;
use tonic::Status;

use crate::core::tasks as core;
use crate::core::watch::{TaskWatch, TasksWatch};
use crate::domain::feed::{ChangeFilter, FeedCursor};
use crate::domain::{DomainError, Name, Run, Task, TaskStatus};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;
use crate::store::EVENT_PAGE_BYTES;

/// ListTasks page size when the request says 0 (the contract's default).
const DEFAULT_PAGE_SIZE: u32 = 50;
/// GetHistory batch when the request says 0 (the contract's default).
const DEFAULT_HISTORY_LIMIT: u32 = 200;

pub(super) async fn create(
    state: &AppState,
    req: pb::CreateTaskRequest,
) -> Result<pb::Task, ServiceError> {
    let workspace = convert::workspace_id("workspace_id", &req.workspace_id)?;
    let source = convert::source_from(req.source);
    let budget = convert::budget_from(req.budget)?;
    let branch = crate::core::branches::BranchRequest {
        name: convert::non_empty(req.branch),
        base: convert::non_empty(req.base_ref),
        continues: convert::non_empty(req.continue_task_id)
            .map(|id| convert::task_id("continue_task_id", &id))
            .transpose()?,
    };
    let task = core::create(
        state,
        workspace,
        req.description,
        source,
        budget,
        None,
        branch,
    )
    .await?;
    Ok(convert::task(&task))
}

/// UpdateTaskBudget.
pub(super) async fn set_budget(
    state: &AppState,
    req: pb::UpdateTaskBudgetRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_id("task_id", &req.task_id)?;
    let task = core::set_budget(state, id, convert::budget_from(req.budget)?).await?;
    Ok(convert::task(&task))
}

pub(super) async fn get(
    state: &AppState,
    req: pb::GetTaskRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    Ok(convert::task(&state.store.get_task(id).await?))
}

pub(super) async fn list(
    state: &AppState,
    req: pb::ListTasksRequest,
) -> Result<pb::ListTasksResponse, ServiceError> {
    let workspace = convert::non_empty(req.workspace_id)
        .map(|id| convert::workspace_id("workspace_id", &id))
        .transpose()?;
    let status = convert::non_empty(req.status)
        .map(|s| s.parse::<TaskStatus>())
        .transpose()?;
    let page_size = match req.page_size {
        0 => DEFAULT_PAGE_SIZE,
        n => n,
    };
    let (tasks, next) = state
        .store
        .list_tasks(
            workspace,
            status,
            page_size,
            convert::non_empty(req.page_token),
        )
        .await?;
    Ok(pb::ListTasksResponse {
        tasks: tasks.iter().map(convert::task).collect(),
        next_page_token: next.unwrap_or_default(),
    })
}

pub(super) async fn update_status(
    state: &AppState,
    req: pb::UpdateTaskStatusRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    if req.status.is_empty() {
        return Err(DomainError::invalid("status", "must not be empty").into());
    }
    let to = req.status.parse::<TaskStatus>()?;
    let task = core::change_status(state, id, to, convert::non_empty(req.reason)).await?;
    Ok(convert::task(&task))
}

/// Deletes a task that is over, with its history and runs.
pub(super) async fn delete(
    state: &AppState,
    req: pb::DeleteTaskRequest,
) -> Result<pb::DeleteTaskResponse, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    core::delete(state, id).await?;
    Ok(pb::DeleteTaskResponse {})
}

pub(super) async fn update_planning(
    state: &AppState,
    req: pb::UpdatePlanningRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    let planning = convert::planning_from(
        req.planning
            .ok_or_else(|| DomainError::invalid("planning", "must be set"))?,
    )?;
    Ok(convert::task(
        &core::change_planning(state, id, planning).await?,
    ))
}

/// StartTask.
pub(super) async fn start(
    state: &AppState,
    req: pb::StartTaskRequest,
) -> Result<pb::StartTaskResponse, ServiceError> {
    let start = core::Start {
        task: convert::task_id("task_id", &req.task_id)?,
        agent: convert::non_empty(req.agent)
            .map(|name| Name::parse("agent", &name))
            .transpose()?,
        prompt: req.prompt,
        timeout_secs: req.timeout_secs,
    };
    let (task, run) = core::start(state, start).await?;
    Ok(pb::StartTaskResponse {
        task: Some(convert::task(&task)),
        run: Some(convert::run(&run)),
    })
}

/// CancelTask.
pub(super) async fn cancel(
    state: &AppState,
    req: pb::CancelTaskRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    let task = core::cancel(state, id, convert::non_empty(req.reason)).await?;
    Ok(convert::task(&task))
}

/// PlanTask.
pub(super) async fn plan(
    state: &AppState,
    req: pb::PlanTaskRequest,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    planned(core::plan(state, id, req.timeout_secs).await?)
}

/// SubmitAnswers.
pub(super) async fn answer(
    state: &AppState,
    req: pb::SubmitAnswersRequest,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let id = convert::task_of(&req.id, &req.task_id)?;
    planned(core::answer(state, id, req.answers, req.timeout_secs).await?)
}

fn planned((task, run): (Task, Run)) -> Result<pb::PlanTaskResponse, ServiceError> {
    Ok(pb::PlanTaskResponse {
        task: Some(convert::task(&task)),
        run: Some(convert::run(&run)),
    })
}

pub(super) async fn history(
    state: &AppState,
    req: pb::GetHistoryRequest,
) -> Result<pb::GetHistoryResponse, ServiceError> {
    let id = convert::task_id("task_id", &req.task_id)?;
    let limit = match req.limit {
        0 => DEFAULT_HISTORY_LIMIT,
        n => n,
    };
    let events = state
        .store
        .events(id, req.after_sequence, limit, EVENT_PAGE_BYTES)
        .await?;
    Ok(pb::GetHistoryResponse {
        events: events.iter().map(convert::event).collect(),
    })
}

/// Starts a watch (see [`crate::core::watch`]).
pub(super) async fn watch(
    state: &AppState,
    req: pb::WatchTaskRequest,
) -> Result<TaskEventStream, ServiceError> {
    let task = convert::task_id("task_id", &req.task_id)?;
    let watch = crate::core::watch::watch(
        state,
        task,
        req.after_sequence,
        req.follow,
        req.until_needed,
    )
    .await?;
    Ok(TaskEventStream { watch })
}

/// The WatchTask stream: the watch's events and its end, on the wire.
#[derive(Debug)]
pub struct TaskEventStream {
    watch: TaskWatch,
}

impl Stream for TaskEventStream {
    type Item = Result<pb::TaskEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.watch)
            .poll_next(cx)
            .map(|item| item.map(|event| event.map(|e| convert::event(&e)).map_err(Status::from)))
    }
}

/// Starts following many tasks (see [`crate::core::watch::watch_tasks`]).
pub(super) async fn watch_many(
    state: &AppState,
    req: pb::WatchTasksRequest,
) -> Result<TaskChangeStream, ServiceError> {
    let workspace = match req.workspace_id.as_str() {
        "" => None,
        id => Some(convert::workspace_id("workspace_id", id)?),
    };
    let filter = ChangeFilter::new(workspace, &req.kinds, req.needs_you_only)?;
    let after = match req.after_cursor.as_str() {
        "" => None,
        text => Some(FeedCursor::parse("after_cursor", text)?),
    };
    let watch = crate::core::watch::watch_tasks(state, filter, after).await?;
    Ok(TaskChangeStream { watch })
}

/// The WatchTasks stream: the feed's changes and its end, on the wire.
#[derive(Debug)]
pub struct TaskChangeStream {
    watch: TasksWatch,
}

impl Stream for TaskChangeStream {
    type Item = Result<pb::TaskChange, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.watch)
            .poll_next(cx)
            .map(|item| item.map(|item| item.map(|i| convert::feed_item(&i)).map_err(Status::from)))
    }
}
