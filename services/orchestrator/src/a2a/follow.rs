//! A task as A2A streams it: a snapshot (the task, its latest events as
//! messages, its artifacts), then its events after it as updates, from the
//! task's own watch (nothing missed, nothing twice, in order) until it ends
//! or needs the client. The watch says when: once the task is final and its
//! runs have ended, or waits for a person after the events that say so —
//! so a stream carries every event GetTask shows, the tail after the final
//! status too.

use std::pin::Pin;
use std::str::FromStr as _;

use chorus_proto::a2a::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::Status;

use super::convert;
use super::errors::{Reason, a2a, from_core};
use crate::domain::{Event, EventKind, Task, TaskStatus};
use crate::state::AppState;
use crate::store::{EVENT_PAGE_BYTES, MAX_EVENTS};

/// Events of a task's history a Task carries when the request does not say.
const DEFAULT_HISTORY: u32 = 100;
/// Stream responses buffered before the producer waits for the client.
const STREAM_BUFFER: usize = 32;

/// A stream of A2A responses, as the face answers it.
pub type Responses = Pin<Box<dyn Stream<Item = Result<pb::StreamResponse, Status>> + Send>>;

/// A task as A2A gives it, with the latest `history` events (None: the
/// default) that fit, and its artifacts; and the sequence of the last event
/// it carries or stands for (a stream goes on after it: nothing missed if
/// the history had to be cut).
pub(super) async fn snapshot(
    state: &AppState,
    task: &Task,
    history: Option<i32>,
) -> Result<(pb::Task, u64), Status> {
    let want = match history {
        None => DEFAULT_HISTORY,
        Some(n) if n < 0 => {
            return Err(a2a(
                Reason::InvalidParams,
                format!("history_length: {n}; 0 or more"),
            ));
        }
        Some(n) => (n as u32).min(MAX_EVENTS),
    };
    let mut events = Vec::new();
    let mut carried = task.last_sequence;
    if want > 0 {
        let after = task.last_sequence.saturating_sub(u64::from(want));
        events = state
            .store
            .events(task.id, after, want, EVENT_PAGE_BYTES)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        events.retain(|e| e.sequence <= task.last_sequence);
        carried = events.last().map_or(after, |e| e.sequence);
    }
    let artifacts = artifacts(state, task).await?;
    Ok((convert::task(task, &events, artifacts), carried))
}

/// A task's artifacts: the files its agents changed, and — once completed —
/// the completion report of its last top-level run.
async fn artifacts(state: &AppState, task: &Task) -> Result<Vec<pb::Artifact>, Status> {
    let mut out = Vec::new();
    if task.status == TaskStatus::Completed {
        let runs = state
            .store
            .list_runs(task.id)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        let last = runs
            .iter()
            .rev()
            .find_map(|r| match (&r.parent, &r.completion_report) {
                (None, Some(report)) => Some((r.id, report)),
                _ => None,
            });
        if let Some((run, report)) = last {
            out.push(convert::report_artifact(&run.to_string(), report));
        }
    }
    let files = state
        .store
        .changed_files(task.id)
        .await
        .map_err(|e| from_core(e.into(), false))?;
    if !files.is_empty() {
        out.push(convert::files_artifact(task, &files));
    }
    if let Some(change) = crate::core::branches::whole_change(state, task).await {
        out.push(convert::change_artifact(task, &change));
    }
    Ok(out)
}

/// When a stream of a task ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// When it ends or needs the client (SendStreamingMessage).
    Pause,
    /// When it ends (SubscribeToTask).
    End,
}

/// Sends `first`, then the task's events after `after` as A2A updates,
/// until `until`; the task's own watch gives them (nothing missed, nothing
/// twice, in order).
pub(super) async fn follow(
    state: &AppState,
    task: Task,
    first: pb::Task,
    after: u64,
    until: Until,
) -> Result<Responses, Status> {
    let (mut follower, mut events) = Follower::start_after(state, task, after, until).await?;
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    tokio::spawn(async move {
        if tx
            .send(Ok(convert::stream(pb::stream_response::Payload::Task(
                first,
            ))))
            .await
            .is_err()
        {
            return;
        }
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    let _ = tx.send(Err(from_core(e, false))).await;
                    return;
                }
            };
            match follower.on(event).await {
                Ok(responses) => {
                    for response in responses {
                        if tx.send(Ok(response)).await.is_err() {
                            return;
                        }
                    }
                    // A call waits for the client's answer: the stream
                    // pauses, as at any input-required.
                    if until == Until::Pause && follower.waits_for_approval() {
                        return;
                    }
                }
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// Turns a task's events into A2A updates, keeping its status.
pub(super) struct Follower {
    state: AppState,
    task: Task,
    /// An agent worked on it (it went active): a failure is no refusal.
    worked: bool,
    /// The approvals its calls wait for now.
    waiting: std::collections::BTreeSet<String>,
}

impl Follower {
    pub(super) async fn start(
        state: &AppState,
        task: Task,
        until: Until,
    ) -> Result<(Self, crate::core::watch::TaskWatch), Status> {
        let after = task.last_sequence;
        Self::start_after(state, task, after, until).await
    }

    async fn start_after(
        state: &AppState,
        task: Task,
        after: u64,
        until: Until,
    ) -> Result<(Self, crate::core::watch::TaskWatch), Status> {
        let events = crate::core::watch::watch(state, task.id, after, false, until == Until::Pause)
            .await
            .map_err(|e| from_core(e, false))?;
        let follower = Self {
            state: state.clone(),
            worked: !task.never_started(),
            waiting: task.approvals.pending().map(|a| a.id.clone()).collect(),
            task,
        };
        Ok((follower, events))
    }

    /// The updates for `event`.
    pub(super) async fn on(&mut self, event: Event) -> Result<Vec<pb::StreamResponse>, Status> {
        let mut out = Vec::new();
        match event.kind {
            EventKind::StatusChanged => {
                let to = event.data["to"]
                    .as_str()
                    .and_then(|s| TaskStatus::from_str(s).ok());
                if let Some(to) = to {
                    self.worked |= to == TaskStatus::Active;
                    self.task.status = to;
                    self.task.status_reason = event.data["reason"].as_str().map(str::to_owned);
                    self.task.updated_ms = event.at_ms;
                    if to == TaskStatus::Completed {
                        let files = self
                            .state
                            .store
                            .changed_files(self.task.id)
                            .await
                            .map_err(|e| from_core(e.into(), false))?;
                        if !files.is_empty() {
                            out.push(convert::artifact_update(
                                &self.task,
                                &event,
                                convert::files_artifact(&self.task, &files),
                                true,
                            ));
                        }
                        // The branch as it stands now (the task is read
                        // again: the stream's copy has no branch news).
                        let now = self.now().await?;
                        if let Some(change) =
                            crate::core::branches::whole_change(&self.state, &now).await
                        {
                            out.push(convert::artifact_update(
                                &self.task,
                                &event,
                                convert::change_artifact(&self.task, &change),
                                true,
                            ));
                        }
                    }
                }
                let state = self.current();
                let mut update = convert::status_update(&self.task, &event, state);
                if to == Some(TaskStatus::AwaitingInput) {
                    // What it waits for: the questions, read as they stand now.
                    let task = self.now().await?;
                    convert::lead_with(&mut update, convert::status(&task).message);
                }
                out.push(update);
                self.task.last_sequence = event.sequence;
                return Ok(out);
            }
            EventKind::ApprovalRequested | EventKind::ApprovalAnswered => {
                let id = event.data["approval_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if event.kind == EventKind::ApprovalRequested {
                    self.waiting.insert(id);
                } else {
                    self.waiting.remove(&id);
                }
                let mut update = convert::status_update(&self.task, &event, self.current());
                if !self.waiting.is_empty() {
                    // What it waits for: the calls, read as they stand now.
                    let task = self.now().await?;
                    if let Some(message) = convert::approvals_message(&task) {
                        convert::lead_with(&mut update, Some(message));
                    }
                }
                out.push(update);
                self.task.last_sequence = event.sequence;
                return Ok(out);
            }
            EventKind::CompletionReportSubmitted => {
                if let Some(artifact) = self.report(&event).await? {
                    out.push(convert::artifact_update(
                        &self.task, &event, artifact, false,
                    ));
                    self.task.last_sequence = event.sequence;
                    return Ok(out);
                }
            }
            _ => {}
        }
        out.push(convert::status_update(&self.task, &event, self.current()));
        self.task.last_sequence = event.sequence;
        Ok(out)
    }

    fn current(&self) -> pb::TaskState {
        convert::with_approvals(
            convert::state_of(
                self.task.status,
                self.task.auto_start.is_some(),
                !self.worked,
            ),
            !self.waiting.is_empty(),
        )
    }

    /// The task as it stands now (the stream's copy knows only its status).
    async fn now(&self) -> Result<Task, Status> {
        self.state
            .store
            .get_task(self.task.id)
            .await
            .map_err(|e| from_core(e.into(), false))
    }

    /// Whether a call of the task waits for the client's approval (the
    /// task's own watch does not pause there: its status is active).
    pub(super) fn waits_for_approval(&self) -> bool {
        !self.waiting.is_empty() && self.current() == pb::TaskState::InputRequired
    }

    /// The report a top-level run submitted, as an artifact; None for a
    /// handoff's run (its parent's work goes on).
    async fn report(&self, event: &Event) -> Result<Option<pb::Artifact>, Status> {
        let Some(run_id) = event.data["run_id"]
            .as_str()
            .and_then(|id| crate::domain::RunId::parse(id).ok())
        else {
            return Ok(None);
        };
        let run = self
            .state
            .store
            .get_run(run_id)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        Ok(match (&run.parent, &run.completion_report) {
            (None, Some(report)) => Some(convert::report_artifact(&run.id.to_string(), report)),
            _ => None,
        })
    }
}
