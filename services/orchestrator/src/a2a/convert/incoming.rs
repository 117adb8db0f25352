//! What an A2A client's message asks of the core: its text, the answers
//! or the approval a reply carries, the agent it names, the task and
//! context it belongs to — checked, each refusal naming its field.

use chorus_proto::a2a::v1 as pb;
use pb::part::Content;
use serde_json::Value as Json;
use tonic::Status;

use super::super::errors::{Reason, a2a};
use super::INPUT_MODES;
use crate::domain::{Name, TaskId};

/// What an A2A message asks of the core.
#[derive(Debug)]
pub struct Incoming {
    /// Its text and data parts, in order (data as JSON).
    pub text: String,
    /// A data part's `answers`, one per question.
    pub answers: Option<Vec<String>>,
    /// A data part's answer to a call that waits for approval
    /// (`{"approve": bool, "approvalId"?, "forTask"?, "reason"?}`).
    pub approval: Option<crate::core::approvals::Reply>,
    /// The agent to run: the `skill` of its (or the request's) metadata.
    pub skill: Option<Name>,
    pub task: Option<TaskId>,
    pub context: Option<String>,
    /// The message's id: the same one again (a client retrying) makes no
    /// second task.
    pub message_id: String,
}

/// A data part answering a call that waits for approval.
fn approval_of(i: usize, data: &Json) -> Result<crate::core::approvals::Reply, Status> {
    let invalid = |m: String| a2a(Reason::InvalidParams, format!("message.parts[{i}]: {m}"));
    let approve = data["approve"]
        .as_bool()
        .ok_or_else(|| invalid("approve: true or false".to_owned()))?;
    let text = |key: &str| -> Result<Option<String>, Status> {
        match &data[key] {
            Json::Null => Ok(None),
            Json::String(s) => Ok(Some(s.clone())),
            _ => Err(invalid(format!("{key}: a string"))),
        }
    };
    let for_task = match &data["forTask"] {
        Json::Null => false,
        Json::Bool(b) => *b,
        _ => return Err(invalid("forTask: true or false".to_owned())),
    };
    Ok(crate::core::approvals::Reply {
        approve: Some(approve),
        approval_id: text("approvalId")?,
        for_task,
        reason: text("reason")?,
    })
}

/// Largest context id, and message id, taken.
const MAX_CONTEXT_BYTES: usize = 256;

/// Reads a request's message: from the user, with an id, with at least one
/// part, every part text or data; raw bytes and URLs are refused with
/// CONTENT_TYPE_NOT_SUPPORTED (Chorus works on the workspace's files, not
/// on uploads); anything else malformed with INVALID_PARAMS naming the field.
pub fn incoming(
    message: Option<pb::Message>,
    request_metadata: Option<&chorus_proto::wkt::Struct>,
) -> Result<Incoming, Status> {
    let invalid = |m: String| a2a(Reason::InvalidParams, m);
    let message = message.ok_or_else(|| invalid("message: required".to_owned()))?;
    if message.message_id.trim().is_empty() {
        return Err(invalid(
            "message.message_id: required (any id unique to this message)".to_owned(),
        ));
    }
    if message.role == pb::Role::Agent as i32 {
        return Err(invalid(
            "message.role: a message to Chorus comes from its user (ROLE_USER)".to_owned(),
        ));
    }
    if message.parts.is_empty() {
        return Err(invalid(
            "message.parts: at least one part (text or data)".to_owned(),
        ));
    }
    let mut texts = Vec::new();
    let mut answers = None;
    let mut approval = None;
    for (i, part) in message.parts.into_iter().enumerate() {
        match part.content {
            Some(Content::Text(text)) => texts.push(text),
            Some(Content::Data(value)) => {
                let data = chorus_proto::json::from_value(value);
                if let Some(list) = data.get("answers") {
                    answers = Some(answers_of(i, list)?);
                } else if data.get("approve").is_some() {
                    approval = Some(approval_of(i, &data)?);
                } else {
                    texts.push(data.to_string());
                }
            }
            Some(Content::Raw(_)) | Some(Content::Url(_)) => {
                return Err(a2a(
                    Reason::ContentTypeNotSupported,
                    format!(
                        "message.parts[{i}]: file parts (raw bytes or a URL) are not taken; send text or data parts ({}) — an agent works on the workspace's own files",
                        INPUT_MODES.join(", ")
                    ),
                ));
            }
            None => return Err(invalid(format!("message.parts[{i}]: has no content"))),
        }
    }
    let text = texts.join("\n\n");
    let skill = [message.metadata.as_ref(), request_metadata]
        .into_iter()
        .flatten()
        .find_map(|m| m.fields.get("skill"))
        .map(|v| match &v.kind {
            Some(chorus_proto::wkt::value::Kind::StringValue(s)) => {
                Name::parse("skill", s).map_err(|e| invalid(format!("metadata.skill: {e}")))
            }
            _ => Err(invalid(
                "metadata.skill: the name of an agent of the workspace (a skill id of its card)"
                    .to_owned(),
            )),
        })
        .transpose()?;
    let task = match message.task_id.trim() {
        "" => None,
        // A2A's ids are opaque: one that is not a Chorus task's names no task.
        id => Some(TaskId::parse(id).map_err(|_| {
            a2a(
                Reason::TaskNotFound,
                format!("message.task_id: task '{id}' not found"),
            )
        })?),
    };
    let context = match message.context_id.trim() {
        "" => None,
        c if c.len() > MAX_CONTEXT_BYTES => {
            return Err(invalid(format!(
                "message.context_id: {} bytes, at most {MAX_CONTEXT_BYTES}",
                c.len()
            )));
        }
        c => Some(c.to_owned()),
    };
    if text.trim().is_empty() && answers.is_none() && approval.is_none() {
        return Err(invalid(
            "message.parts: no text (every part is empty)".to_owned(),
        ));
    }
    let message_id = message.message_id.trim();
    if message_id.len() > MAX_CONTEXT_BYTES {
        return Err(invalid(format!(
            "message.message_id: {} bytes, at most {MAX_CONTEXT_BYTES}",
            message_id.len()
        )));
    }
    Ok(Incoming {
        text,
        answers,
        approval,
        skill,
        task,
        context,
        message_id: message_id.to_owned(),
    })
}

fn answers_of(i: usize, list: &Json) -> Result<Vec<String>, Status> {
    let bad = || {
        a2a(
            Reason::InvalidParams,
            format!(
                "message.parts[{i}].data.answers: a list of strings, one per question, in order"
            ),
        )
    };
    list.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|a| a.as_str().map(str::to_owned).ok_or_else(bad))
        .collect()
}
