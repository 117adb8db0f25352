//! Chorus's domain in A2A's terms: a task's state, its history as messages
//! and status updates, its completion report and changed files as
//! artifacts; and an A2A message as what the core takes.

use chorus_catalog::args::CompletionReport;
use chorus_proto::a2a::v1 as pb;
use chorus_proto::json::{to_struct, to_value};
use pb::part::Content;
use serde_json::{Map, Value as Json, json};
use tonic::Status;

mod incoming;

pub use incoming::{Incoming, incoming};

use super::errors::{Reason, a2a};
use crate::domain::{Event, EventKind, Task, TaskId, TaskStatus};

/// The media types a message's parts may have, and those answers have.
pub const INPUT_MODES: [&str; 2] = ["text/plain", "application/json"];
pub const OUTPUT_MODES: [&str; 2] = ["text/plain", "application/json"];

/// The A2A state of a task: planned counts as working when it starts by
/// itself; a task that failed before any agent worked on it was rejected;
/// a task that waits for a person (its planner's questions, a stop, a plan
/// to start) requires input.
pub fn state(task: &Task) -> pb::TaskState {
    with_approvals(
        state_of(task.status, task.auto_start.is_some(), task.never_started()),
        task.approvals.pending().next().is_some(),
    )
}

/// A working task one of whose calls waits for a person's approval
/// requires input.
pub fn with_approvals(state: pb::TaskState, waiting: bool) -> pb::TaskState {
    if waiting && state == pb::TaskState::Working {
        pb::TaskState::InputRequired
    } else {
        state
    }
}

/// What a status says of the calls that wait for approval: a line each and
/// how to reply, and the calls as data.
pub fn approvals_message(task: &Task) -> Option<pb::Message> {
    let waiting: Vec<_> = task.approvals.pending().collect();
    if waiting.is_empty() {
        return None;
    }
    let mut text = String::new();
    for a in &waiting {
        text.push_str(&format!(
            "{} asks to run {} with {} (rule '{}', approval {}).\n",
            a.agent, a.tool, a.arguments, a.rule, a.id
        ));
    }
    text.push_str(&format!(
        "To answer the first, {}.",
        crate::core::approvals::REPLY_HELP
    ));
    let calls: Vec<Json> = waiting
        .iter()
        .map(|a| {
            json!({
                "approvalId": a.id, "runId": a.run_id, "agent": a.agent, "tool": a.tool,
                "arguments": a.arguments, "rule": a.rule.to_string(), "ruleAgent": a.rule_agent,
                "deadlineMs": a.deadline_ms,
            })
        })
        .collect();
    Some(pb::Message {
        message_id: format!("{}.approval.{}", task.id, task.last_sequence),
        context_id: task.conversation(),
        task_id: task.id.to_string(),
        role: pb::Role::Agent as i32,
        parts: vec![text_part(text), data_part(json!({ "approvals": calls }))],
        ..pb::Message::default()
    })
}

/// [`state`] from a status and the two facts about the task it needs.
pub fn state_of(status: TaskStatus, auto_start: bool, never_started: bool) -> pb::TaskState {
    use pb::TaskState as S;
    match status {
        TaskStatus::Pending => S::Submitted,
        TaskStatus::Planning | TaskStatus::Active => S::Working,
        TaskStatus::Planned if auto_start => S::Working,
        TaskStatus::Planned | TaskStatus::AwaitingInput | TaskStatus::Waiting => S::InputRequired,
        TaskStatus::Completed => S::Completed,
        TaskStatus::Failed if never_started => S::Rejected,
        TaskStatus::Failed => S::Failed,
        TaskStatus::Canceled => S::Canceled,
    }
}

/// Whether nothing more happens without the client: a final state, or one
/// that waits for its reply.
pub fn pauses(state: pb::TaskState) -> bool {
    use pb::TaskState as S;
    matches!(
        state,
        S::Completed | S::Failed | S::Canceled | S::Rejected | S::InputRequired | S::AuthRequired
    )
}

/// Whether the task is over.
pub fn terminal(state: pb::TaskState) -> bool {
    use pb::TaskState as S;
    matches!(state, S::Completed | S::Failed | S::Canceled | S::Rejected)
}

/// The A2A state named by a ListTasks filter, as the Chorus statuses that
/// can have it (UNSPECIFIED: any).
pub fn statuses_of(state: pb::TaskState) -> Vec<TaskStatus> {
    use pb::TaskState as S;
    match state {
        S::Unspecified => Vec::new(),
        S::Submitted => vec![TaskStatus::Pending],
        S::Working => vec![
            TaskStatus::Planning,
            TaskStatus::Planned,
            TaskStatus::Active,
        ],
        S::InputRequired => vec![
            TaskStatus::AwaitingInput,
            TaskStatus::Planned,
            TaskStatus::Waiting,
        ],
        S::Completed => vec![TaskStatus::Completed],
        S::Failed | S::Rejected => vec![TaskStatus::Failed],
        S::Canceled => vec![TaskStatus::Canceled],
        // No Chorus task waits for credentials.
        S::AuthRequired => vec![],
    }
}

/// Milliseconds since the epoch as a protobuf timestamp.
pub fn timestamp(ms: i64) -> chorus_proto::wkt::Timestamp {
    chorus_proto::wkt::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// What Chorus adds to an A2A object: where it is in the task's history.
fn chorus_metadata(event: &Event) -> chorus_proto::wkt::Struct {
    let mut map = Map::new();
    map.insert(
        "chorus".to_owned(),
        json!({ "sequence": event.sequence, "kind": event.kind.as_str() }),
    );
    to_struct(map)
}

/// [`chorus_metadata`] of an update derived from an event whose own update
/// follows it (the files changed, before the status change to completed).
fn derived_metadata(event: &Event) -> chorus_proto::wkt::Struct {
    let mut map = Map::new();
    map.insert(
        "chorus".to_owned(),
        json!({ "sequence": event.sequence, "kind": event.kind.as_str(), "derived": true }),
    );
    to_struct(map)
}

/// One event of the history as an A2A message: a line for people, the
/// event itself as data, its place in the history as metadata. Its id is
/// the task's id and the event's sequence: the same event is the same
/// message wherever it is read.
pub fn event_message(task: &Task, event: &Event) -> pb::Message {
    let role = match event.kind {
        EventKind::TaskCreated | EventKind::AnswersSubmitted => pb::Role::User,
        _ => pb::Role::Agent,
    };
    pb::Message {
        message_id: format!("{}.{}", task.id, event.sequence),
        context_id: task.conversation(),
        task_id: task.id.to_string(),
        role: role as i32,
        parts: vec![
            text_part(event_text(event)),
            data_part(json!({
                "kind": event.kind.as_str(),
                "sequence": event.sequence,
                "atMs": event.at_ms,
                "data": event.data,
            })),
        ],
        metadata: Some(chorus_metadata(event)),
        ..pb::Message::default()
    }
}

fn text_part(text: String) -> pb::Part {
    pb::Part {
        content: Some(Content::Text(text)),
        media_type: "text/plain".to_owned(),
        ..pb::Part::default()
    }
}

fn data_part(data: Json) -> pb::Part {
    pb::Part {
        content: Some(Content::Data(to_value(data))),
        media_type: "application/json".to_owned(),
        ..pb::Part::default()
    }
}

/// A line saying what an event is.
fn event_text(event: &Event) -> String {
    let d = &event.data;
    let s = |key: &str| d.get(key).and_then(Json::as_str).unwrap_or_default();
    match event.kind {
        EventKind::TaskCreated => s("description").to_owned(),
        EventKind::StatusChanged => match d.get("reason").and_then(Json::as_str) {
            Some(reason) => format!("{} → {}: {reason}", s("from"), s("to")),
            None => format!("{} → {}", s("from"), s("to")),
        },
        EventKind::PlanningQuestionsReturned => {
            let questions: Vec<&str> = d
                .get("questions")
                .and_then(Json::as_array)
                .map(|q| q.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            questions_text(&questions)
        }
        EventKind::AnswersSubmitted => "answers given".to_owned(),
        EventKind::ToolExecuted => format!("{} ran {}: {}", s("agent"), s("tool"), s("status")),
        EventKind::ToolDenied => {
            format!("{} was denied {}: {}", s("agent"), s("tool"), s("reason"))
        }
        EventKind::CompletionReportSubmitted => {
            format!("{} reported: {}", s("agent"), s("summary"))
        }
        EventKind::PlanningCompleted => format!("planned: {}", s("summary")),
        EventKind::CommentAdded => s("text").to_owned(),
        kind => {
            let detail = ["reason", "message", "summary", "agent"]
                .iter()
                .map(|k| s(k))
                .find(|v| !v.is_empty());
            match detail {
                Some(detail) => format!("{}: {detail}", kind.as_str()),
                None => kind.as_str().to_owned(),
            }
        }
    }
}

/// The planner's questions, numbered, and how to answer them.
fn questions_text(questions: &[&str]) -> String {
    let mut out = String::from("The planner asks:\n");
    for (i, q) in questions.iter().enumerate() {
        out.push_str(&format!("{}. {}\n", i + 1, q.trim()));
    }
    out.push_str(
        "Reply with a message on this task: its text answers them, or a data part {\"answers\": [...]} gives one answer per question, in order.",
    );
    out
}

/// The task's status as A2A says it: its state, why (the status reason, the
/// questions it waits on), and when it last changed.
pub fn status(task: &Task) -> pb::TaskStatus {
    let state = state(task);
    if let Some(message) = approvals_message(task)
        .filter(|_| state == pb::TaskState::InputRequired && task.status == TaskStatus::Active)
    {
        return pb::TaskStatus {
            state: state as i32,
            message: Some(message),
            timestamp: Some(timestamp(task.updated_ms)),
        };
    }
    let text = match task.status {
        TaskStatus::AwaitingInput => {
            let mut planning = task.planning.clone();
            let open: Vec<String> = planning
                .open_questions()
                .map(|q| q.question.clone())
                .collect();
            Some(questions_text(
                &open.iter().map(String::as_str).collect::<Vec<_>>(),
            ))
        }
        _ => task.status_reason.clone().or_else(|| {
            task.needs_you()
                .map(|action| format!("{} — {action}", task.status))
        }),
    };
    pb::TaskStatus {
        state: state as i32,
        message: text.map(|text| pb::Message {
            message_id: format!("{}.status.{}", task.id, task.last_sequence),
            context_id: task.conversation(),
            task_id: task.id.to_string(),
            role: pb::Role::Agent as i32,
            parts: vec![text_part(text)],
            ..pb::Message::default()
        }),
        timestamp: Some(timestamp(task.updated_ms)),
    }
}

/// A task as A2A gives it: its status, `history` as messages, `artifacts`.
pub fn task(task: &Task, history: &[Event], artifacts: Vec<pb::Artifact>) -> pb::Task {
    let mut metadata = Map::new();
    metadata.insert(
        "chorus".to_owned(),
        json!({
            "workspaceId": task.workspace_id.to_string(),
            "status": task.status.as_str(),
            "lastSequence": task.last_sequence,
            "createdMs": task.created_ms,
        }),
    );
    pb::Task {
        id: task.id.to_string(),
        context_id: task.conversation(),
        status: Some(status(task)),
        artifacts,
        history: history.iter().map(|e| event_message(task, e)).collect(),
        metadata: Some(to_struct(metadata)),
    }
}

/// A status update for `event` with the task's state after it.
pub fn status_update(task: &Task, event: &Event, state: pb::TaskState) -> pb::StreamResponse {
    let message = event_message(task, event);
    stream(pb::stream_response::Payload::StatusUpdate(
        pb::TaskStatusUpdateEvent {
            task_id: task.id.to_string(),
            context_id: task.conversation(),
            status: Some(pb::TaskStatus {
                state: state as i32,
                message: Some(message),
                timestamp: Some(timestamp(event.at_ms)),
            }),
            metadata: Some(chorus_metadata(event)),
        },
    ))
}

/// Puts the text of `lead` (a status's own message) first in a status
/// update's message: what the client must do comes before the event.
pub fn lead_with(update: &mut pb::StreamResponse, lead: Option<pb::Message>) {
    let Some(pb::stream_response::Payload::StatusUpdate(update)) = &mut update.payload else {
        return;
    };
    let (Some(message), Some(lead)) = (
        update.status.as_mut().and_then(|s| s.message.as_mut()),
        lead,
    ) else {
        return;
    };
    let mut parts = lead.parts;
    parts.extend(message.parts.drain(1..));
    message.parts = parts;
}

/// An artifact update for `event` (a report); `derived` when the event's
/// own update follows (the files changed, before the status change).
pub fn artifact_update(
    task: &Task,
    event: &Event,
    artifact: pb::Artifact,
    derived: bool,
) -> pb::StreamResponse {
    let metadata = if derived {
        derived_metadata(event)
    } else {
        chorus_metadata(event)
    };
    stream(pb::stream_response::Payload::ArtifactUpdate(
        pb::TaskArtifactUpdateEvent {
            task_id: task.id.to_string(),
            context_id: task.conversation(),
            artifact: Some(artifact),
            append: false,
            last_chunk: true,
            metadata: Some(metadata),
        },
    ))
}

pub fn stream(payload: pb::stream_response::Payload) -> pb::StreamResponse {
    pb::StreamResponse {
        payload: Some(payload),
    }
}

/// The completion report of the task's run `run_id` as an artifact: its
/// summary and output as text, the whole report as data.
pub fn report_artifact(run_id: &str, report: &CompletionReport) -> pb::Artifact {
    let text = format!("{}\n\n{}", report.summary.trim(), report.output.trim());
    pb::Artifact {
        artifact_id: format!("report.{run_id}"),
        name: "completion-report".to_owned(),
        description: "The agent's completion report: what was done, and the result".to_owned(),
        parts: vec![
            text_part(text.trim().to_owned()),
            data_part(serde_json::to_value(report).unwrap_or(Json::Null)),
        ],
        ..pb::Artifact::default()
    }
}

/// The files the task's agents changed with file tools, one data part each.
pub fn files_artifact(task: &Task, files: &[crate::store::ChangedFile]) -> pb::Artifact {
    pb::Artifact {
        artifact_id: format!("files.{}", task.id),
        name: "files-changed".to_owned(),
        description:
            "Files the task's agents created, wrote, patched or deleted (paths in the workspace)"
                .to_owned(),
        parts: files
            .iter()
            .map(|f| {
                let mut part = data_part(json!({
                    "path": f.path,
                    "lastTool": f.tool,
                    "deleted": f.deleted,
                    "atMs": f.at_ms,
                }));
                part.filename = f.path.clone();
                part
            })
            .collect(),
        ..pb::Artifact::default()
    }
}

/// A task's change on its own branch as one patch (a unified diff of every
/// file against where the branch left its base), with its branch and
/// commits as data.
pub fn change_artifact(task: &Task, change: &crate::core::branches::WholeChange) -> pb::Artifact {
    let mut patch = text_part(change.patch.clone());
    patch.media_type = "text/x-diff".to_owned();
    patch.filename = format!("{}.patch", change.branch.replace('/', "-"));
    pb::Artifact {
        artifact_id: format!("change.{}", task.id),
        name: "change".to_owned(),
        description: format!(
            "The task's change on branch {} against {}, as a patch{}",
            change.branch,
            change.base,
            if change.truncated {
                " (cut at its size limit: GetTaskChange pages the rest)"
            } else {
                ""
            }
        ),
        parts: vec![
            patch,
            data_part(json!({
                "branch": change.branch,
                "base": change.base,
                "baseCommit": change.base_commit,
                "headCommit": change.head_commit,
                "files": change.files,
                "truncated": change.truncated,
            })),
        ],
        ..pb::Artifact::default()
    }
}

/// A push config from the wire, checked: its URL (its form; where it leads
/// is checked apart, see `push::reachable`), the client's token as given
/// (none: none is sent), credentials only with a scheme, and a new signing
/// secret of its own.
pub fn push_config(
    task: TaskId,
    wire: pb::TaskPushNotificationConfig,
) -> Result<crate::domain::push::PushConfig, Status> {
    let invalid = |m: String| a2a(Reason::InvalidParams, m);
    let url =
        crate::domain::push::check_push_url(wire.url.trim()).map_err(|e| invalid(e.to_string()))?;
    let id = match wire.id.trim() {
        "" => uuid::Uuid::new_v4().to_string(),
        id if id.len() > 128 => return Err(invalid("id: at most 128 bytes".to_owned())),
        id => id.to_owned(),
    };
    let token = match wire.token.trim() {
        t if t.len() > 1024 => return Err(invalid("token: at most 1024 bytes".to_owned())),
        t if t.contains(|c: char| c.is_control()) => {
            return Err(invalid("token: one line".to_owned()));
        }
        t => t.to_owned(),
    };
    let authentication = match wire.authentication {
        None => None,
        Some(auth)
            if auth.scheme.trim().is_empty()
                || auth.scheme.trim().contains(char::is_whitespace) =>
        {
            return Err(invalid(
                "authentication.scheme: one word, such as Bearer".to_owned(),
            ));
        }
        Some(auth) if auth.credentials.len() > 4096 || auth.credentials.contains(['\r', '\n']) => {
            return Err(invalid(
                "authentication.credentials: one line of at most 4096 bytes".to_owned(),
            ));
        }
        Some(auth) => Some(crate::domain::push::PushAuth {
            scheme: auth.scheme.trim().to_owned(),
            credentials: auth.credentials,
        }),
    };
    Ok(crate::domain::push::PushConfig {
        id,
        task_id: task,
        url,
        token,
        secret: Some(super::push::new_secret()),
        authentication,
        created_ms: crate::domain::now_ms(),
    })
}

/// A push config as the wire gives it back: its credentials and signing
/// secret never (the scheme says there are credentials), its token only to
/// a caller who may change the task (never to a viewer).
pub fn push_wire(
    config: &crate::domain::push::PushConfig,
    with_token: bool,
) -> pb::TaskPushNotificationConfig {
    pb::TaskPushNotificationConfig {
        tenant: String::new(),
        id: config.id.clone(),
        task_id: config.task_id.to_string(),
        url: config.url.to_string(),
        token: if with_token {
            config.token.clone()
        } else {
            String::new()
        },
        authentication: config
            .authentication
            .as_ref()
            .map(|a| pb::AuthenticationInfo {
                scheme: a.scheme.clone(),
                credentials: String::new(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::TaskState as S;

    #[test]
    fn every_status_has_the_state_an_a2a_client_expects() {
        assert_eq!(state_of(TaskStatus::Pending, true, true), S::Submitted);
        assert_eq!(state_of(TaskStatus::Planning, true, true), S::Working);
        assert_eq!(state_of(TaskStatus::Planned, true, true), S::Working);
        assert_eq!(state_of(TaskStatus::Planned, false, true), S::InputRequired);
        assert_eq!(
            state_of(TaskStatus::AwaitingInput, true, true),
            S::InputRequired
        );
        assert_eq!(state_of(TaskStatus::Waiting, true, false), S::InputRequired);
        assert_eq!(state_of(TaskStatus::Failed, true, true), S::Rejected);
        assert_eq!(state_of(TaskStatus::Failed, true, false), S::Failed);
        assert_eq!(state_of(TaskStatus::Completed, true, false), S::Completed);
        assert_eq!(state_of(TaskStatus::Canceled, true, false), S::Canceled);
        for status in TaskStatus::ALL {
            let s = state_of(status, true, false);
            assert!(statuses_of(s).contains(&status), "{status} → {s:?}");
        }
    }

    fn message(parts: Vec<pb::Part>) -> pb::Message {
        pb::Message {
            message_id: "m1".to_owned(),
            role: pb::Role::User as i32,
            parts,
            ..pb::Message::default()
        }
    }

    fn code_and_reason(status: &Status) -> (tonic::Code, String) {
        use tonic_types::StatusExt as _;
        let reason = status
            .get_details_error_info()
            .map(|i| i.reason)
            .unwrap_or_default();
        (status.code(), reason)
    }

    #[test]
    fn a_message_is_read_as_text_answers_and_a_skill() {
        let mut m = message(vec![
            text_part("Write a poem".to_owned()),
            data_part(json!({ "lines": 4 })),
        ]);
        m.metadata = Some(to_struct(
            [("skill".to_owned(), json!("writer"))]
                .into_iter()
                .collect(),
        ));
        let got = incoming(Some(m), None).expect("read");
        assert_eq!(got.text, "Write a poem\n\n{\"lines\":4}");
        assert_eq!(got.skill.expect("skill").as_str(), "writer");
        let got = incoming(
            Some(message(vec![data_part(
                json!({ "answers": ["yes", "no"] }),
            )])),
            None,
        )
        .expect("answers");
        assert_eq!(got.answers, Some(vec!["yes".to_owned(), "no".to_owned()]));
    }

    #[test]
    fn a_malformed_message_is_refused_with_the_field_and_the_a2a_reason() {
        let refused =
            |m: Option<pb::Message>| code_and_reason(&incoming(m, None).expect_err("refused"));
        let invalid = (tonic::Code::InvalidArgument, "INVALID_PARAMS".to_owned());
        assert_eq!(refused(None), invalid);
        assert_eq!(refused(Some(message(vec![]))), invalid);
        let mut no_id = message(vec![text_part("x".to_owned())]);
        no_id.message_id.clear();
        assert_eq!(refused(Some(no_id)), invalid);
        assert_eq!(refused(Some(message(vec![pb::Part::default()]))), invalid);
        assert_eq!(
            refused(Some(message(vec![data_part(json!({ "answers": [1] }))]))),
            invalid
        );
        let raw = pb::Part {
            content: Some(Content::Raw(vec![1, 2])),
            ..pb::Part::default()
        };
        assert_eq!(
            refused(Some(message(vec![raw]))),
            (
                tonic::Code::InvalidArgument,
                "CONTENT_TYPE_NOT_SUPPORTED".to_owned()
            )
        );
        // A2A's ids are opaque: one that is not a Chorus task's names none.
        let mut bad_task = message(vec![text_part("x".to_owned())]);
        bad_task.task_id = "nope".to_owned();
        assert_eq!(
            refused(Some(bad_task)),
            (tonic::Code::NotFound, "TASK_NOT_FOUND".to_owned())
        );
        let mut long_id = message(vec![text_part("x".to_owned())]);
        long_id.message_id = "m".repeat(257);
        assert_eq!(refused(Some(long_id)), invalid);
    }
}
