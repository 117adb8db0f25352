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
use tracing::Instrument as _;

use crate::domain::{DomainError, Event, EventKind, TaskStatus, policy};
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
    // The task's trace: its runs' spans continue this one (which continues the
    // caller's trace when the call carried one).
    let span = tracing::info_span!(
        "task",
        otel.name = "task",
        chorus.workspace_id = %workspace,
        chorus.task_id = tracing::field::Empty,
    );
    let trace = chorus_telemetry::propagation::traceparent(&span);
    let (task, _) = state
        .store
        .create_traced_task(
            workspace,
            req.description,
            convert::source_from(req.source),
            trace,
        )
        .instrument(span.clone())
        .await?;
    span.record("chorus.task_id", task.id.to_string());
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
    let reason = convert::non_empty(req.reason);
    if let Some(reason) = &reason {
        policy::check_status_reason(reason)?;
    }
    // A task whose runs are still going is not moved by hand: CancelTask ends
    // them with it (checked in the same transaction as the change).
    let (task, _runs, _) = state
        .store
        .change_task_runs(id, move |task, runs| {
            policy::check_no_live_runs(task, runs)?;
            Ok(vec![policy::change_status(task, to, reason)?])
        })
        .await?;
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
    if let Some(agent) = &planning.assigned_agent {
        // The assigned agent must be one of the task's workspace.
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
    Ok(convert::task(&task))
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
