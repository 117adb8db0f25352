//! `lf.a2a.v1.A2AService` over the core: each method reads the request,
//! calls the core, and answers in A2A's terms.

use chorus_auth::Principal;
use chorus_proto::a2a::v1 as pb;
use pb::a2a_service_server::A2aService;
use std::time::Duration;

use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

use super::convert::{self, Incoming, push_config, push_wire};
use super::errors::{Reason, a2a, from_core};
use super::follow::{Follower, Responses, Until, follow, snapshot};
use crate::core::tasks as core;
use crate::domain::{Task, TaskId, TaskSource, Workspace};
use crate::state::AppState;
use crate::store::TaskQuery;

/// ListTasks page size when the request does not say; its most.
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 100;
/// The request header a resubscribing client names the last event it saw
/// with (a history message's `metadata.chorus.sequence`): the stream
/// replays what came after it, then goes on live.
pub const AFTER_SEQUENCE_HEADER: &str = "chorus-after-sequence";

/// The A2A service of the orchestrator's port.
#[derive(Debug, Clone)]
pub struct A2aFace {
    state: AppState,
}

impl A2aFace {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl A2aService for A2aFace {
    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let wait = blocking_wait(request.metadata());
        let (task, config, secret) = self.accept(request).await?;
        let history = config.history_length;
        let task = if config.return_immediately || convert::pauses(convert::state(&task)) {
            task
        } else {
            // Until it ends or needs the client (its events are read only to
            // know when), or the wait is over: then as it stands.
            let id = task.id;
            let (mut follower, mut events) =
                Follower::start(&self.state, task, Until::Pause).await?;
            // The watch ends once the task ends or needs the client.
            let until_paused = async {
                while let Some(event) = events.next().await {
                    follower.on(event.map_err(|e| from_core(e, false))?).await?;
                    if follower.waits_for_approval() {
                        break;
                    }
                }
                Ok::<(), Status>(())
            };
            if let Ok(followed) = tokio::time::timeout(wait, until_paused).await {
                followed?;
            }
            self.state
                .store
                .get_task(id)
                .await
                .map_err(|e| from_core(e.into(), false))?
        };
        let task = snapshot(&self.state, &task, history).await?.0;
        Ok(with_secret(
            Response::new(pb::SendMessageResponse {
                payload: Some(pb::send_message_response::Payload::Task(task)),
            }),
            secret.as_deref(),
        ))
    }

    type SendStreamingMessageStream = Responses;

    async fn send_streaming_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<Self::SendStreamingMessageStream>, Status> {
        let (task, config, secret) = self.accept(request).await?;
        let (first, after) = snapshot(&self.state, &task, config.history_length).await?;
        Ok(with_secret(
            Response::new(follow(&self.state, task, first, after, Until::Pause).await?),
            secret.as_deref(),
        ))
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.id).await?;
        Ok(Response::new(
            snapshot(&self.state, &task, req.history_length).await?.0,
        ))
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let req = request.into_inner();
        let workspace = match req.tenant.trim() {
            "" => None,
            tenant => Some(workspace(&self.state, tenant).await?.id),
        };
        let page = match req.page_size {
            None => DEFAULT_PAGE,
            Some(n) if (1..=MAX_PAGE as i32).contains(&n) => n as u32,
            Some(n) => {
                return Err(a2a(
                    Reason::InvalidParams,
                    format!("page_size: {n}; from 1 to {MAX_PAGE}"),
                ));
            }
        };
        let wanted = pb::TaskState::try_from(req.status).map_err(|_| {
            a2a(
                Reason::InvalidParams,
                format!("status: unknown task state {}", req.status),
            )
        })?;
        let query = TaskQuery {
            workspace,
            statuses: convert::statuses_of(wanted),
            conversation: Some(req.context_id.trim().to_owned()).filter(|c| !c.is_empty()),
            updated_after_ms: req
                .status_timestamp_after
                .map(|t| t.seconds * 1000 + i64::from(t.nanos / 1_000_000)),
            newest_first: true,
            ..TaskQuery::default()
        };
        if wanted == pb::TaskState::AuthRequired {
            return Ok(Response::new(pb::ListTasksResponse {
                page_size: page as i32,
                ..pb::ListTasksResponse::default()
            }));
        }
        let token = Some(req.page_token).filter(|t| !t.is_empty());
        let (tasks, next, total) = self
            .state
            .store
            .find_tasks(query, page, token)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            // Statuses shared by two states (failed: failed or rejected) are told apart here.
            if wanted != pb::TaskState::Unspecified && convert::state(&task) != wanted {
                continue;
            }
            let history = req.history_length.or(Some(0));
            let (mut a2a_task, _) = snapshot(&self.state, &task, history).await?;
            if !req.include_artifacts.unwrap_or(false) {
                a2a_task.artifacts.clear();
            }
            out.push(a2a_task);
        }
        Ok(Response::new(pb::ListTasksResponse {
            tasks: out,
            next_page_token: next.unwrap_or_default(),
            page_size: page as i32,
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
        }))
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.id).await?;
        if convert::terminal(convert::state(&task)) {
            return Err(a2a(
                Reason::TaskNotCancelable,
                format!(
                    "task {} is {} already; nothing to cancel",
                    task.id, task.status
                ),
            ));
        }
        let task = core::cancel(
            &self.state,
            task.id,
            Some("canceled by an A2A client".to_owned()),
        )
        .await
        .map_err(|e| from_core(e, true))?;
        Ok(Response::new(
            snapshot(&self.state, &task, Some(0)).await?.0,
        ))
    }

    type SubscribeToTaskStream = Responses;

    async fn subscribe_to_task(
        &self,
        request: Request<pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Self::SubscribeToTaskStream>, Status> {
        let after = after_sequence(request.metadata())?;
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.id).await?;
        let over = convert::terminal(convert::state(&task));
        match after {
            // Where the client was: what came after it, then live.
            Some(after) => {
                if after > task.last_sequence {
                    return Err(a2a(
                        Reason::InvalidParams,
                        format!(
                            "{AFTER_SEQUENCE_HEADER}: {after} is beyond task {}'s last event ({})",
                            task.id, task.last_sequence
                        ),
                    ));
                }
                let (first, _) = snapshot(&self.state, &task, Some(0)).await?;
                Ok(Response::new(
                    follow(&self.state, task, first, after, Until::End).await?,
                ))
            }
            None if over => Err(a2a(
                Reason::UnsupportedOperation,
                format!(
                    "task {} is {} (final): nothing more will happen; GetTask reads it, or subscribe with {AFTER_SEQUENCE_HEADER} to replay what came after an event",
                    task.id, task.status
                ),
            )),
            None => {
                let (first, after) = snapshot(&self.state, &task, None).await?;
                Ok(Response::new(
                    follow(&self.state, task, first, after, Until::End).await?,
                ))
            }
        }
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<pb::TaskPushNotificationConfig>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.task_id).await?;
        let config = push_config(task.id, req)?;
        self.check_reachable(&config).await?;
        let secret = config.secret.clone();
        Ok(with_secret(
            Response::new(self.add_push(config).await?),
            secret.as_deref(),
        ))
    }

    async fn get_task_push_notification_config(
        &self,
        request: Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        let with_token = may_change(&request);
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.task_id).await?;
        let configs = self.push_configs(task.id).await?;
        configs
            .into_iter()
            .find(|c| c.id == req.id)
            .map(|c| Response::new(push_wire(&c, with_token)))
            .ok_or_else(|| {
                a2a(
                    Reason::InvalidParams,
                    format!(
                        "task {} has no push notification config '{}'",
                        task.id, req.id
                    ),
                )
            })
    }

    async fn list_task_push_notification_configs(
        &self,
        request: Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        let with_token = may_change(&request);
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.task_id).await?;
        let configs = self.push_configs(task.id).await?;
        Ok(Response::new(pb::ListTaskPushNotificationConfigsResponse {
            configs: configs.iter().map(|c| push_wire(c, with_token)).collect(),
            next_page_token: String::new(),
        }))
    }

    async fn get_extended_agent_card(
        &self,
        request: Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<pb::AgentCard>, Status> {
        let seen_host = request
            .metadata()
            .get(super::card::SEEN_HOST_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let req = request.into_inner();
        let workspace = workspace(&self.state, &req.tenant).await?;
        let agents = self
            .state
            .store
            .list_agents(workspace.id)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        Ok(Response::new(super::card::extended_card(
            &self.state,
            &workspace,
            &agents,
            seen_host.as_deref(),
        )))
    }

    async fn delete_task_push_notification_config(
        &self,
        request: Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<chorus_proto::wkt::Empty>, Status> {
        let req = request.into_inner();
        let task = self.task_of(&req.tenant, &req.task_id).await?;
        self.state
            .store
            .delete_push_config(task.id, req.id)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        Ok(Response::new(chorus_proto::wkt::Empty {}))
    }
}

impl A2aFace {
    /// Reads a SendMessage request and hands it to the core: a new task in
    /// the tenant's workspace (planned, then started by itself), or a reply
    /// to the task it names. With a push config, the new config's signing
    /// secret too. A refused request changes nothing: a reply's push config
    /// is added first and taken back when the reply is refused.
    async fn accept(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<(Task, pb::SendMessageConfiguration, Option<String>), Status> {
        let caller = match request.extensions().get::<Principal>() {
            Some(Principal::Key { name, .. }) => Some(name.clone()),
            _ => None,
        };
        let req = request.into_inner();
        let config = req.configuration.unwrap_or_default();
        // Checked before anything is written; added once the task exists.
        let mut push = config
            .task_push_notification_config
            .clone()
            .map(|wire| push_config(TaskId::new(), wire))
            .transpose()?;
        if let Some(push) = &push {
            self.check_reachable(push).await?;
        }
        let secret = push.as_ref().and_then(|p| p.secret.clone());
        if let Some(n) = config.history_length.filter(|n| *n < 0) {
            return Err(a2a(
                Reason::InvalidParams,
                format!("configuration.history_length: {n}; 0 or more"),
            ));
        }
        let workspace = workspace(&self.state, &req.tenant).await?;
        let Incoming {
            text,
            answers,
            approval,
            skill,
            task,
            context,
            message_id,
        } = convert::incoming(req.message, req.metadata.as_ref())?;
        let task = match task {
            Some(id) => {
                let task = self.task_in(&workspace, id).await?;
                if let Some(context) = context.filter(|c| *c != task.conversation()) {
                    return Err(a2a(
                        Reason::InvalidParams,
                        format!(
                            "message.context_id: task {id} is in context {}, not {context}",
                            task.conversation()
                        ),
                    ));
                }
                let added = match push.take() {
                    Some(mut push) => {
                        push.task_id = id;
                        Some(self.add_push(push).await?.id)
                    }
                    None => None,
                };
                let by = caller.clone().unwrap_or_else(|| "an A2A client".to_owned());
                let approval = Some((approval.unwrap_or_default(), by));
                match core::reply(&self.state, id, text, answers, approval).await {
                    Ok(task) => task,
                    Err(e) => {
                        if let Some(config) = added {
                            self.state
                                .store
                                .delete_push_config(id, config)
                                .await
                                .map_err(|e| from_core(e.into(), false))?;
                        }
                        return Err(from_core(e, false));
                    }
                }
            }
            None => {
                let source = TaskSource {
                    kind: "a2a".to_owned(),
                    user_id: caller,
                    conversation_id: Some(
                        context.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                    ),
                    request_id: Some(message_id),
                };
                core::submit(
                    &self.state,
                    core::Submit {
                        workspace: workspace.id,
                        description: text,
                        source,
                        budget: crate::domain::Budget::default(),
                        agent: skill,
                        push: push.take(),
                    },
                )
                .await
                .map_err(|e| match &e {
                    crate::error::ServiceError::Store(crate::store::StoreError::NotFound {
                        what: "agent",
                        ..
                    }) => a2a(
                        Reason::InvalidParams,
                        format!("metadata.skill: {e} (the skills of the workspace's extended card name its agents)"),
                    ),
                    _ => from_core(e, false),
                })?
            }
        };
        Ok((task, config, secret))
    }

    /// INVALID_PARAMS unless the webhook's host resolves now to addresses a
    /// notification may go to (none of this machine's).
    async fn check_reachable(
        &self,
        config: &crate::domain::push::PushConfig,
    ) -> Result<(), Status> {
        super::push::reachable(&self.state.push_networks, &config.url)
            .await
            .map(|_| ())
            .map_err(|why| a2a(Reason::InvalidParams, format!("url: {why}")))
    }

    async fn add_push(
        &self,
        config: crate::domain::push::PushConfig,
    ) -> Result<pb::TaskPushNotificationConfig, Status> {
        let config = self
            .state
            .store
            .create_push_config(config)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        Ok(push_wire(&config, true))
    }

    async fn push_configs(
        &self,
        task: TaskId,
    ) -> Result<Vec<crate::domain::push::PushConfig>, Status> {
        self.state
            .store
            .list_push_configs(task)
            .await
            .map_err(|e| from_core(e.into(), false))
    }

    /// The task `id` names, in the tenant's workspace when one is named.
    async fn task_of(&self, tenant: &str, id: &str) -> Result<Task, Status> {
        // A2A's ids are opaque: one that is not a Chorus task's names no task.
        let id = TaskId::parse(id)
            .map_err(|_| a2a(Reason::TaskNotFound, format!("task '{id}' not found")))?;
        match tenant.trim() {
            "" => self
                .state
                .store
                .get_task(id)
                .await
                .map_err(|e| from_core(e.into(), false)),
            tenant => {
                let workspace = workspace(&self.state, tenant).await?;
                self.task_in(&workspace, id).await
            }
        }
    }

    /// Task `id` of `workspace`; one of another workspace is not found.
    async fn task_in(&self, workspace: &Workspace, id: TaskId) -> Result<Task, Status> {
        let task = self
            .state
            .store
            .get_task(id)
            .await
            .map_err(|e| from_core(e.into(), false))?;
        if task.workspace_id != workspace.id {
            return Err(a2a(
                Reason::TaskNotFound,
                format!("task '{id}' not found in workspace {}", workspace.name),
            ));
        }
        Ok(task)
    }
}

/// The workspace a tenant names (its name or id).
pub(super) async fn workspace(state: &AppState, tenant: &str) -> Result<Workspace, Status> {
    let tenant = tenant.trim();
    if tenant.is_empty() {
        return Err(a2a(
            Reason::InvalidParams,
            "tenant: name the workspace (the tenant of the agent card's interface: fetch /a2a/<workspace>/.well-known/agent-card.json)",
        ));
    }
    let unknown = || {
        a2a(
            Reason::InvalidParams,
            format!(
                "tenant: no workspace '{tenant}' (the tenant of the agent card's interface, or the workspace of the URL: /a2a/<workspace>)"
            ),
        )
    };
    if let Ok(id) = crate::domain::WorkspaceId::parse(tenant) {
        return match state.store.get_workspace(id).await {
            Err(crate::store::StoreError::NotFound { .. }) => Err(unknown()),
            found => found.map_err(|e| from_core(e.into(), false)),
        };
    }
    let all = state
        .store
        .list_workspaces()
        .await
        .map_err(|e| from_core(e.into(), false))?;
    all.into_iter()
        .find(|w| w.name.as_str() == tenant)
        .ok_or_else(unknown)
}

/// Longest a blocking SendMessage waits for its task before answering it as
/// it stands: below the port's request timeout (30 s by default).
const BLOCKING_WAIT: Duration = Duration::from_secs(20);

/// How long a blocking SendMessage waits: [`BLOCKING_WAIT`], or less when
/// the client's own deadline (`grpc-timeout`) is nearer — it is answered
/// half a second before that.
/// `response` with a new push config's signing secret in its headers.
fn with_secret<T>(mut response: Response<T>, secret: Option<&str>) -> Response<T> {
    if let Some(value) = secret.and_then(|s| tonic::metadata::MetadataValue::try_from(s).ok()) {
        response
            .metadata_mut()
            .insert(super::push::SECRET_HEADER, value);
    }
    response
}

/// Whether the caller may change tasks (and so read a push config's
/// token): anyone but a viewer key.
fn may_change<T>(request: &Request<T>) -> bool {
    !matches!(
        request.extensions().get::<Principal>(),
        Some(Principal::Key {
            role: chorus_auth::Role::Viewer,
            ..
        })
    )
}

fn blocking_wait(metadata: &tonic::metadata::MetadataMap) -> Duration {
    let client = metadata
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
            let n: u64 = digits.parse().ok()?;
            Some(match unit {
                "H" => Duration::from_secs(n.saturating_mul(3600)),
                "M" => Duration::from_secs(n.saturating_mul(60)),
                "S" => Duration::from_secs(n),
                "m" => Duration::from_millis(n),
                "u" => Duration::from_micros(n),
                "n" => Duration::from_nanos(n),
                _ => return None,
            })
        });
    match client {
        Some(deadline) => deadline
            .saturating_sub(Duration::from_millis(500))
            .min(BLOCKING_WAIT),
        None => BLOCKING_WAIT,
    }
}

/// The sequence a resubscribing client gives, if any.
fn after_sequence(metadata: &tonic::metadata::MetadataMap) -> Result<Option<u64>, Status> {
    metadata
        .get(AFTER_SEQUENCE_HEADER)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    a2a(
                        Reason::InvalidParams,
                        format!("{AFTER_SEQUENCE_HEADER}: the sequence of the last event seen (metadata.chorus.sequence), a whole number"),
                    )
                })
        })
        .transpose()
}
