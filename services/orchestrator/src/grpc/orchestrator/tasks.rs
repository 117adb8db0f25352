//! Tasks: create, read, list, move through the status table, edit planning, read
//! and watch the history.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use chorus_proto::orchestrator::v1 as pb;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::core::tasks as core;
use crate::domain::{DomainError, Event, Name, Run, Task, TaskStatus};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::history::{self, WatchEnd};
use crate::state::AppState;
use crate::store::{EVENT_PAGE_BYTES, StoreError};

/// ListTasks page size when the request says 0 (the contract's default).
const DEFAULT_PAGE_SIZE: u32 = 50;
/// GetHistory batch when the request says 0 (the contract's default).
const DEFAULT_HISTORY_LIMIT: u32 = 200;
/// Events a WatchTask stream buffers before the producer waits for the client.
const WATCH_BUFFER: usize = 64;

pub(super) async fn create(
    state: &AppState,
    req: pb::CreateTaskRequest,
) -> Result<pb::Task, ServiceError> {
    let workspace = convert::workspace_id("workspace_id", &req.workspace_id)?;
    let source = convert::source_from(req.source);
    let task = core::create(state, workspace, req.description, source).await?;
    Ok(convert::task(&task))
}

pub(super) async fn get(
    state: &AppState,
    req: pb::GetTaskRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_id("id", &req.id)?;
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
    let id = convert::task_id("id", &req.id)?;
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
    let id = convert::task_id("id", &req.id)?;
    state.store.delete_task(id).await?;
    Ok(pb::DeleteTaskResponse {})
}

pub(super) async fn update_planning(
    state: &AppState,
    req: pb::UpdatePlanningRequest,
) -> Result<pb::Task, ServiceError> {
    let id = convert::task_id("id", &req.id)?;
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
    let id = convert::task_id("id", &req.id)?;
    let task = core::cancel(state, id, convert::non_empty(req.reason)).await?;
    Ok(convert::task(&task))
}

/// PlanTask.
pub(super) async fn plan(
    state: &AppState,
    req: pb::PlanTaskRequest,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let id = convert::task_id("id", &req.id)?;
    planned(core::plan(state, id, req.timeout_secs).await?)
}

/// SubmitAnswers.
pub(super) async fn answer(
    state: &AppState,
    req: pb::SubmitAnswersRequest,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let id = convert::task_id("id", &req.id)?;
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

/// Starts a watch: NOT_FOUND at once when the task does not exist; otherwise a
/// stream fed by a spawned [`history::watch_task`].
///
/// Who stops what: the producer task ends by itself when the task reaches a final
/// status (unless `follow`); when the client leaves, tonic drops the stream and
/// with it the receiver, which the producer notices (`tx.closed()` / a failed
/// send); on shutdown `state.shutdown` fires, its child token stops the producer,
/// and the stream ends with UNAVAILABLE. Nobody else cancels the producer.
pub(super) async fn watch(
    state: &AppState,
    req: pb::WatchTaskRequest,
) -> Result<TaskEventStream, ServiceError> {
    let task = convert::task_id("task_id", &req.task_id)?;
    let last = state.store.get_task(task).await?.last_sequence;
    // A sequence beyond the last event cannot be waited for: nothing would
    // ever say the caller is ahead.
    if req.after_sequence > last {
        return Err(ServiceError::OutOfRange(format!(
            "after_sequence {} is beyond task {task}'s last event ({last}); watch from {last} or less",
            req.after_sequence
        )));
    }
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let cancel = state.shutdown.child_token();
    let (store, hub) = (state.store.clone(), state.hub.clone());
    let (after, follow) = (req.after_sequence, req.follow);
    let producer = tokio::spawn(async move {
        let _watching = Watching::new();
        history::watch_task(&store, &hub, task, after, follow, tx, cancel).await
    });
    Ok(TaskEventStream {
        events: ReceiverStream::new(rx),
        producer: Some(producer),
    })
}

/// One open WatchTask stream, counted in the `chorus.watchers` metric while
/// its producer lives.
struct Watching;

impl Watching {
    fn new() -> Self {
        chorus_telemetry::metrics().watchers.add(1, &[]);
        Self
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        chorus_telemetry::metrics().watchers.add(-1, &[]);
    }
}

/// The WatchTask stream: the events the producer sends, converted to the wire;
/// when the producer stopped because of shutdown, one last UNAVAILABLE.
#[derive(Debug)]
pub struct TaskEventStream {
    events: ReceiverStream<Result<Event, StoreError>>,
    /// Taken once the event channel has ended and the producer's verdict is read.
    producer: Option<JoinHandle<WatchEnd>>,
}

impl Stream for TaskEventStream {
    type Item = Result<pb::TaskEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(item) = ready!(Pin::new(&mut self.events).poll_next(cx)) {
            return Poll::Ready(Some(match item {
                Ok(event) => Ok(convert::event(&event)),
                Err(e) => Err(ServiceError::from(e).into()),
            }));
        }
        // The channel ended: the producer has returned (or panicked).
        let Some(producer) = self.producer.as_mut() else {
            return Poll::Ready(None);
        };
        let end = ready!(Pin::new(producer).poll(cx));
        self.producer = None;
        Poll::Ready(match end {
            Ok(WatchEnd::Cancelled) => Some(Err(Status::unavailable(
                "the orchestrator is shutting down; watch again from the last sequence you saw",
            ))),
            Ok(_) => None,
            Err(e) => Some(Err(Status::internal(format!("the watch failed: {e}")))),
        })
    }
}
