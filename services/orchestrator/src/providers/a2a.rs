//! Agents that are remote A2A agents (provider kind `a2a`): a run sends its
//! message to the remote agent over A2A's gRPC binding, streams the remote
//! task's updates as the run's progress, and ends with a completion report
//! made of the remote task's end — its artifacts as the output when it
//! completed; blocked with the remote agent's question when it asks for
//! input (Chorus answers nothing on its behalf: the run that handed off
//! reads the question and, handing off to the same agent again, answers it:
//! that prompt goes to the waiting remote task); failed otherwise. The run's timeout,
//! cancel and budget apply as to any run: at its end the remote task is
//! canceled. The remote agent calls no Chorus tool: the report is the one
//! call its run makes, through the same checked path as any agent's.

use std::time::Duration;

use chorus_auth::tls::ClientTls;
use chorus_proto::a2a::v1 as pb;
use pb::a2a_service_client::A2aServiceClient;
use pb::stream_response::Payload;
use prost_reflect::{DescriptorPool, DynamicMessage};
use serde_json::json;
use tonic::metadata::MetadataValue;

use super::{Attempt, AttemptEnd, AttemptEnv, AttemptError, Progress, RunContext};
use crate::execution::tools::ToolRouter;

/// Where a remote agent's card is, under its base URL.
const CARD_PATH: &str = "/.well-known/agent-card.json";
/// How long fetching a card, connecting, or canceling the remote task may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a card taken.
const MAX_CARD_BYTES: usize = 1024 * 1024;
/// Most updates of a remote task recorded as the run's progress (each one
/// an event of the task's history): a remote agent cannot make Chorus store
/// without end. The ones after are counted and said once, at the end.
pub const MAX_REMOTE_UPDATES: u32 = 200;
/// Most artifacts of a remote task kept, and most bytes of them, as the
/// run's output; the rest is cut, and the output says so.
pub const MAX_REMOTE_ARTIFACTS: usize = 64;
pub const MAX_REMOTE_OUTPUT_BYTES: usize = 256 * 1024;

/// What Chorus needs of a remote agent's card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCard {
    pub name: String,
    /// Its gRPC interface, as a URL a channel connects to.
    pub endpoint: String,
    pub tenant: String,
}

/// Fetches and checks the card of the remote agent at `base_url`: JSON of
/// an `AgentCard` with a gRPC interface of A2A 1.x that streams.
pub async fn fetch_card(http: &reqwest::Client, base_url: &str) -> Result<RemoteCard, String> {
    let url = format!("{}{CARD_PATH}", base_url.trim_end_matches('/'));
    let answer = http
        .get(&url)
        .timeout(CALL_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("cannot fetch the agent card at {url}: {e}"))?;
    if !answer.status().is_success() {
        return Err(format!(
            "the agent card at {url} answered {}",
            answer.status()
        ));
    }
    let body = answer
        .bytes()
        .await
        .map_err(|e| format!("cannot read the agent card at {url}: {e}"))?;
    if body.len() > MAX_CARD_BYTES {
        return Err(format!("the agent card at {url} is over 1 MiB"));
    }
    let card = parse_card(&body).map_err(|e| format!("the agent card at {url} {e}"))?;
    check_card(&card).map_err(|e| format!("the agent card at {url}: {e}"))
}

/// An agent card from its JSON (proto3 JSON, unknown fields ignored).
fn parse_card(json: &[u8]) -> Result<pb::AgentCard, String> {
    let pool =
        DescriptorPool::decode(chorus_proto::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())?;
    let descriptor = pool
        .get_message_by_name("lf.a2a.v1.AgentCard")
        .ok_or("has no descriptor")?;
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let options = prost_reflect::DeserializeOptions::new().deny_unknown_fields(false);
    let message = DynamicMessage::deserialize_with_options(descriptor, &mut deserializer, &options)
        .map_err(|e| format!("is not an A2A agent card: {e}"))?;
    message
        .transcode_to::<pb::AgentCard>()
        .map_err(|e| format!("is not an A2A agent card: {e}"))
}

fn check_card(card: &pb::AgentCard) -> Result<RemoteCard, String> {
    let interface = card
        .supported_interfaces
        .iter()
        .find(|i| {
            i.protocol_binding.eq_ignore_ascii_case("GRPC")
                && (i.protocol_version.is_empty() || i.protocol_version.starts_with("1."))
        })
        .ok_or_else(|| {
            let offered: Vec<String> = card
                .supported_interfaces
                .iter()
                .map(|i| format!("{} {}", i.protocol_binding, i.protocol_version))
                .collect();
            format!(
                "offers no gRPC interface of A2A 1.x (it offers: {}); Chorus calls remote agents over gRPC",
                if offered.is_empty() { "none".to_owned() } else { offered.join(", ") }
            )
        })?;
    if card.capabilities.as_ref().and_then(|c| c.streaming) != Some(true) {
        return Err(
            "does not stream (capabilities.streaming): Chorus follows a remote task as it goes"
                .to_owned(),
        );
    }
    let endpoint = if interface.url.contains("://") {
        interface.url.clone()
    } else {
        format!("http://{}", interface.url)
    };
    url::Url::parse(&endpoint)
        .map_err(|e| format!("its gRPC interface URL '{}': {e}", interface.url))?;
    Ok(RemoteCard {
        name: card.name.clone(),
        endpoint,
        tenant: interface.tenant.clone(),
    })
}

/// How the remote task ended, as far as the stream told.
#[derive(Debug, Default)]
struct Followed {
    task: Option<String>,
    state: Option<pb::TaskState>,
    /// The last status message's text.
    said: String,
    artifacts: Vec<(String, String)>,
    /// A direct answer (a Message instead of a task).
    answer: Option<String>,
    /// Updates recorded as progress, and those past the most recorded.
    recorded: u32,
    unrecorded: u32,
    /// Artifacts were cut at [`MAX_REMOTE_ARTIFACTS`] or
    /// [`MAX_REMOTE_OUTPUT_BYTES`].
    cut: bool,
}

fn text_of(parts: &[pb::Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            Some(pb::part::Content::Text(t)) => Some(t.clone()),
            Some(pb::part::Content::Data(v)) => {
                Some(chorus_proto::json::from_value(v.clone()).to_string())
            }
            Some(pb::part::Content::Url(u)) => Some(u.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A state as A2A's JSON names it (`input-required`).
fn state_name(state: pb::TaskState) -> &'static str {
    match state {
        pb::TaskState::Submitted => "submitted",
        pb::TaskState::Working => "working",
        pb::TaskState::Completed => "completed",
        pb::TaskState::Failed => "failed",
        pb::TaskState::Canceled => "canceled",
        pb::TaskState::InputRequired => "input-required",
        pb::TaskState::Rejected => "rejected",
        pb::TaskState::AuthRequired => "auth-required",
        pb::TaskState::Unspecified => "unspecified",
    }
}

/// A request to the remote agent: the protocol version, and its key as a
/// bearer when the provider has one.
fn request<T>(message: T, key: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let meta = request.metadata_mut();
    meta.insert(
        "a2a-version",
        MetadataValue::from_static(crate::a2a::PROTOCOL_VERSION),
    );
    if let Some(key) = key
        && let Ok(value) = MetadataValue::try_from(format!("Bearer {key}"))
    {
        meta.insert("authorization", value);
    }
    request
}

impl Followed {
    /// Takes one stream response; its progress, if any: text progress only
    /// up to [`MAX_REMOTE_UPDATES`] (the rest counted).
    fn take(&mut self, response: pb::StreamResponse) -> Option<Progress> {
        match self.read(response)? {
            Progress::Text(_) if self.recorded >= MAX_REMOTE_UPDATES => {
                self.unrecorded += 1;
                None
            }
            Progress::Text(text) => {
                self.recorded += 1;
                Some(Progress::Text(text))
            }
            other => Some(other),
        }
    }

    /// What the updates past the most recorded were, once they end.
    fn unrecorded(&self) -> Option<Progress> {
        (self.unrecorded > 0).then(|| {
            Progress::Text(format!(
                "[remote] {} more updates not recorded: a remote task's first {MAX_REMOTE_UPDATES} are",
                self.unrecorded
            ))
        })
    }

    /// Keeps an artifact's text (appended to the one of its name when
    /// `append`), within [`MAX_REMOTE_ARTIFACTS`] and
    /// [`MAX_REMOTE_OUTPUT_BYTES`].
    fn keep(&mut self, name: String, text: &str, append: bool) {
        let kept: usize = self.artifacts.iter().map(|(_, t)| t.len()).sum();
        let room = MAX_REMOTE_OUTPUT_BYTES.saturating_sub(kept);
        let text = if text.len() > room {
            self.cut = true;
            // The cut's mark (…) is within the room too.
            match room.checked_sub('…'.len_utf8()) {
                Some(room) if room > 0 => crate::providers::cut(text, room),
                _ => return,
            }
        } else {
            text.to_owned()
        };
        let full = self.artifacts.len() >= MAX_REMOTE_ARTIFACTS;
        match self.artifacts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, existing)) if append => existing.push_str(&text),
            _ if full => self.cut = true,
            _ => self.artifacts.push((name, text)),
        }
    }

    fn read(&mut self, response: pb::StreamResponse) -> Option<Progress> {
        match response.payload? {
            Payload::Task(task) => {
                let session = (self.task.is_none()).then(|| Progress::Session(task.id.clone()));
                self.task = Some(task.id);
                if let Some(status) = task.status {
                    self.state = pb::TaskState::try_from(status.state).ok();
                }
                for a in task.artifacts {
                    self.keep(a.name, &text_of(&a.parts), false);
                }
                session
            }
            Payload::StatusUpdate(update) => {
                let status = update.status?;
                let state = pb::TaskState::try_from(status.state).unwrap_or_default();
                self.state = Some(state);
                let said = status
                    .message
                    .map(|m| text_of(&m.parts))
                    .unwrap_or_default();
                if !said.is_empty() {
                    self.said.clone_from(&said);
                }
                Some(Progress::Text(crate::providers::cut(
                    &format!("[remote {}] {said}", state_name(state)),
                    crate::providers::PROGRESS_TEXT_BYTES,
                )))
            }
            Payload::ArtifactUpdate(update) => {
                let artifact = update.artifact?;
                self.keep(
                    artifact.name.clone(),
                    &text_of(&artifact.parts),
                    update.append,
                );
                Some(Progress::Text(format!(
                    "[remote artifact] {}",
                    artifact.name
                )))
            }
            Payload::Message(message) => {
                let text = text_of(&message.parts);
                self.answer = Some(text.clone());
                Some(Progress::Text(crate::providers::cut(
                    &format!("[remote answer] {text}"),
                    crate::providers::PROGRESS_TEXT_BYTES,
                )))
            }
        }
    }

    fn over(&self) -> bool {
        self.answer.is_some()
            || matches!(
                self.state,
                Some(
                    pb::TaskState::Completed
                        | pb::TaskState::Failed
                        | pb::TaskState::Canceled
                        | pb::TaskState::Rejected
                        | pb::TaskState::InputRequired
                        | pb::TaskState::AuthRequired
                )
            )
    }

    /// The completion report the remote task's end makes.
    fn report(&self, remote: &str) -> serde_json::Value {
        let output = match &self.answer {
            Some(answer) => answer.clone(),
            None => self
                .artifacts
                .iter()
                .map(|(name, text)| {
                    if name.is_empty() {
                        text.clone()
                    } else {
                        format!("## {name}\n{text}")
                    }
                })
                .chain(self.cut.then(|| format!(
                    "[cut: a remote task's first {MAX_REMOTE_ARTIFACTS} artifacts and {MAX_REMOTE_OUTPUT_BYTES} bytes are kept]"
                )))
                .collect::<Vec<_>>()
                .join("\n\n"),
        };
        let said = if self.said.is_empty() {
            String::new()
        } else {
            format!(": {}", self.said)
        };
        let (status, summary, blocked) = match (self.answer.is_some(), self.state) {
            (true, _) | (_, Some(pb::TaskState::Completed)) => (
                "complete",
                format!("the remote agent {remote} completed{said}"),
                None,
            ),
            (_, Some(pb::TaskState::InputRequired | pb::TaskState::AuthRequired)) => (
                "blocked",
                format!("the remote agent {remote} needs input"),
                Some(format!(
                    "the remote agent {remote} asks{said} — Chorus answers nothing on its behalf; hand off to it again with the answer as the prompt: it goes to the same remote task"
                )),
            ),
            (_, Some(state)) => (
                "failed",
                format!(
                    "the remote agent {remote} ended {}{said}",
                    state_name(state)
                ),
                None,
            ),
            (_, None) => (
                "failed",
                format!("the remote agent {remote} answered nothing"),
                None,
            ),
        };
        json!({ "status": status, "summary": summary, "output": output, "blocked_reason": blocked })
    }
}

/// One attempt: the message sent (or, resuming, the remote task
/// subscribed to again), its updates followed to its end, the report made.
pub async fn attempt(
    env: AttemptEnv<'_>,
    ctx: &RunContext,
    attempt: &Attempt,
) -> Result<AttemptEnd, AttemptError> {
    let fail = |reason: String, partial: &AttemptEnd| AttemptError::Failed {
        reason,
        partial: partial.clone(),
    };
    let mut end = AttemptEnd::default();
    let base = ctx
        .provider
        .base_url
        .as_deref()
        .ok_or_else(|| fail("the a2a provider has no base URL".to_owned(), &end))?;
    let card = fetch_card(env.facilities.http(), base)
        .await
        .map_err(|e| fail(e, &end))?;
    let channel = tonic::transport::Endpoint::from_shared(card.endpoint.clone())
        .map_err(|e| {
            fail(
                format!("the remote agent's endpoint {}: {e}", card.endpoint),
                &end,
            )
        })?
        .connect_timeout(CALL_TIMEOUT)
        .connect_lazy();
    let mut client = A2aServiceClient::new(channel);
    let key = ctx.provider.api_key.as_deref();
    // The remote task a reply goes to: the one this agent's last run of the
    // task left waiting for input (the parent hands off again with the answer).
    let waiting = match &attempt.resume {
        Some(_) => None,
        None => waiting_remote_task(env.state, ctx).await,
    };
    let opened = match &attempt.resume {
        Some(task) => {
            client
                .subscribe_to_task(request(
                    pb::SubscribeToTaskRequest {
                        tenant: card.tenant.clone(),
                        id: task.clone(),
                    },
                    key,
                ))
                .await
        }
        None => {
            client
                .send_streaming_message(request(
                    pb::SendMessageRequest {
                        tenant: card.tenant.clone(),
                        message: Some(pb::Message {
                            message_id: format!("{}.{}", ctx.run_id, uuid::Uuid::new_v4()),
                            context_id: ctx.task_id.to_string(),
                            task_id: waiting.clone().unwrap_or_default(),
                            role: pb::Role::User as i32,
                            parts: vec![pb::Part {
                                content: Some(pb::part::Content::Text(attempt.message.clone())),
                                media_type: "text/plain".to_owned(),
                                ..pb::Part::default()
                            }],
                            ..pb::Message::default()
                        }),
                        ..pb::SendMessageRequest::default()
                    },
                    key,
                ))
                .await
        }
    };
    let mut stream = opened
        .map_err(|s| {
            fail(
                format!(
                    "the remote agent {} refused the message: {} ({})",
                    card.name,
                    s.message(),
                    s.code()
                ),
                &end,
            )
        })?
        .into_inner();
    let mut followed = Followed::default();
    if let Some(task) = attempt.resume.as_ref().or(waiting.as_ref()) {
        followed.task = Some(task.clone());
        end.session_id = Some(task.clone());
    }
    loop {
        let next = tokio::select! {
            next = stream.message() => next,
            () = ctx.clock.expired() => {
                cancel_remote(&mut client, &card, &followed, key).await;
                return Err(AttemptError::TimedOut {
                    reason: format!("timed out after {} s waiting for the remote agent {}", ctx.timeout.as_secs(), card.name),
                    partial: end,
                });
            }
            () = ctx.stop.cancelled() => {
                cancel_remote(&mut client, &card, &followed, key).await;
                return Err(AttemptError::Stopped { partial: end });
            }
        };
        match next {
            Ok(Some(response)) => {
                if let Some(progress) = followed.take(response) {
                    if let Progress::Session(id) = &progress {
                        end.session_id = Some(id.clone());
                    }
                    let _ = env.progress.send(progress);
                }
                if followed.over() {
                    break;
                }
            }
            Ok(None) => break,
            Err(s) => {
                return Err(fail(
                    format!(
                        "the remote agent {}'s stream failed: {} ({})",
                        card.name,
                        s.message(),
                        s.code()
                    ),
                    &end,
                ));
            }
        }
    }
    if let Some(unrecorded) = followed.unrecorded() {
        let _ = env.progress.send(unrecorded);
    }
    let report = followed.report(&card.name);
    end.output = report["output"].as_str().map(str::to_owned);
    let config = env.facilities.config();
    let tls = ClientTls {
        ca: config.tls_ca.clone(),
        ..ClientTls::default()
    };
    let router = ToolRouter::new(&ctx.tools_addr, &ctx.orchestrator_addr, &ctx.token, &tls)
        .map_err(|e| fail(e, &end))?;
    router
        .call("completion-report", report)
        .await
        .map_err(|e| {
            fail(
                format!(
                    "the report of the remote agent's end was refused: {}",
                    e.message
                ),
                &end,
            )
        })?;
    Ok(end)
}

/// The remote task the last run of this agent on this task ended blocked
/// on (the remote agent asked for input), if the run before this one did.
async fn waiting_remote_task(state: &crate::state::AppState, ctx: &RunContext) -> Option<String> {
    let runs = state.store.list_runs(ctx.task_id).await.ok()?;
    let last = runs
        .iter()
        .filter(|r| r.agent == ctx.agent && r.id != ctx.run_id && r.finished_ms.is_some())
        .max_by_key(|r| r.started_ms)?;
    let blocked = last
        .completion_report
        .as_ref()
        .is_some_and(|r| r.status == chorus_catalog::args::ReportStatus::Blocked);
    blocked.then(|| last.session_id.clone()).flatten()
}

/// Cancels the remote task, if it is known, within [`CALL_TIMEOUT`]; what
/// the remote agent answers changes nothing here.
async fn cancel_remote(
    client: &mut A2aServiceClient<tonic::transport::Channel>,
    card: &RemoteCard,
    followed: &Followed,
    key: Option<&str>,
) {
    let Some(task) = &followed.task else { return };
    let cancel = client.cancel_task(request(
        pb::CancelTaskRequest {
            tenant: card.tenant.clone(),
            id: task.clone(),
            metadata: None,
        },
        key,
    ));
    if let Ok(Err(status)) = tokio::time::timeout(CALL_TIMEOUT, cancel).await {
        tracing::info!(remote = %card.name, task, error = %status, "the remote agent did not cancel its task");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn working(n: usize) -> pb::StreamResponse {
        pb::StreamResponse {
            payload: Some(Payload::StatusUpdate(pb::TaskStatusUpdateEvent {
                task_id: "r1".into(),
                status: Some(pb::TaskStatus {
                    state: pb::TaskState::Working.into(),
                    message: Some(pb::Message {
                        parts: vec![pb::Part {
                            content: Some(pb::part::Content::Text(format!("step {n}"))),
                            ..pb::Part::default()
                        }],
                        ..pb::Message::default()
                    }),
                    ..pb::TaskStatus::default()
                }),
                ..pb::TaskStatusUpdateEvent::default()
            })),
        }
    }

    fn artifact(name: &str, bytes: usize, append: bool) -> pb::StreamResponse {
        pb::StreamResponse {
            payload: Some(Payload::ArtifactUpdate(pb::TaskArtifactUpdateEvent {
                task_id: "r1".into(),
                artifact: Some(pb::Artifact {
                    name: name.into(),
                    parts: vec![pb::Part {
                        content: Some(pb::part::Content::Text("a".repeat(bytes))),
                        ..pb::Part::default()
                    }],
                    ..pb::Artifact::default()
                }),
                append,
                ..pb::TaskArtifactUpdateEvent::default()
            })),
        }
    }

    #[test]
    fn a_remote_agent_cannot_make_chorus_record_its_updates_without_end() {
        let mut followed = Followed::default();
        let recorded = (0..5000).filter_map(|n| followed.take(working(n))).count();
        assert_eq!(recorded, MAX_REMOTE_UPDATES as usize);
        let Some(Progress::Text(said)) = followed.unrecorded() else {
            panic!("the updates not recorded are said");
        };
        assert!(said.contains("4800 more updates"), "{said}");
        // The last status is still known, recorded or not.
        assert_eq!(followed.said, "step 4999");
    }

    #[test]
    fn a_remote_tasks_artifacts_are_kept_within_their_bounds_and_the_cut_is_said() {
        let mut followed = Followed::default();
        for n in 0..100 {
            followed.take(artifact(&format!("a{n}"), 10, false));
        }
        assert_eq!(followed.artifacts.len(), MAX_REMOTE_ARTIFACTS);
        let mut big = Followed::default();
        for _ in 0..100 {
            big.take(artifact("log", 64 * 1024, true));
        }
        let kept: usize = big.artifacts.iter().map(|(_, t)| t.len()).sum();
        assert!(kept <= MAX_REMOTE_OUTPUT_BYTES, "{kept}");
        big.state = Some(pb::TaskState::Completed);
        let output = big.report("remote")["output"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            output.contains("[cut:"),
            "{}",
            &output[output.len() - 200..]
        );
    }
}
