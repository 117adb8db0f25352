//! Push-notification configs and the outbox of status changes to push (the
//! `push_notifications` migration). A status change enters the outbox in
//! the transaction that makes it; replicas claim, deliver and delete.

use diesel::prelude::*;

use super::connection::AnyConnection;
use super::schema::{push_configs, push_outbox};
use super::tasks::lock_task;
use super::{Db, Store, StoreError};
use crate::domain::push::{MAX_PUSH_CONFIGS, PushAuth, PushConfig};
use crate::domain::{DomainError, Event, EventKind, TaskId, now_ms};

/// What a config's sealed values are bound to: its own row.
fn bound_to(id: &str) -> Vec<u8> {
    format!("push_configs:{id}").into_bytes()
}

/// A claimed notification: its config, and the status change to send.
#[derive(Debug, Clone)]
pub struct PushDelivery {
    pub outbox_id: i64,
    pub config: PushConfig,
    pub sequence: u64,
    /// Attempts made before this one.
    pub attempts: i32,
}

/// Waiting notifications looked at per claim (the oldest first).
const WINDOW: i64 = 1024;

type ConfigRow = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
);

impl Store {
    /// Adds `config` to its task (at most [`MAX_PUSH_CONFIGS`]): its token
    /// and credentials are sealed. ALREADY_EXISTS for an id the task has.
    pub async fn create_push_config(&self, config: PushConfig) -> Result<PushConfig, StoreError> {
        let secrets = self.secrets.clone();
        self.write(move |conn| {
            lock_task(conn, config.task_id)?;
            let task = config.task_id.to_string();
            let existing: Vec<String> = push_configs::table
                .filter(push_configs::task_id.eq(&task))
                .select(push_configs::id)
                .load(conn)
                .db()?;
            if existing.contains(&config.id) {
                return Err(StoreError::AlreadyExists {
                    what: "push notification config",
                    key: config.id.clone(),
                });
            }
            if existing.len() >= MAX_PUSH_CONFIGS {
                return Err(DomainError::invalid(
                    "push notification config",
                    format!(
                        "task {task} has {MAX_PUSH_CONFIGS} configs, the most it may have; delete one first"
                    ),
                )
                .into());
            }
            let bound = bound_to(&config.id);
            diesel::insert_into(push_configs::table)
                .values((
                    push_configs::id.eq(&config.id),
                    push_configs::task_id.eq(&task),
                    push_configs::url.eq(config.url.as_str()),
                    push_configs::token.eq(secrets.seal(&config.token, &bound)),
                    push_configs::auth_scheme
                        .eq(config.authentication.as_ref().map(|a| a.scheme.clone())),
                    push_configs::auth_credentials.eq(config
                        .authentication
                        .as_ref()
                        .map(|a| secrets.seal(&a.credentials, &bound))),
                    push_configs::created_ms.eq(config.created_ms),
                    push_configs::signing_secret
                        .eq(config.secret.as_ref().map(|s| secrets.seal(s, &bound))),
                ))
                .execute(conn)
                .db()?;
            Ok(config)
        })
        .await
    }

    /// The task's configs, oldest first.
    pub async fn list_push_configs(&self, task: TaskId) -> Result<Vec<PushConfig>, StoreError> {
        let secrets = self.secrets.clone();
        self.with_conn(move |conn| {
            let rows: Vec<ConfigRow> = push_configs::table
                .filter(push_configs::task_id.eq(task.to_string()))
                .order((push_configs::created_ms.asc(), push_configs::id.asc()))
                .load(conn)
                .db()?;
            rows.into_iter().map(|r| config_of(&secrets, r)).collect()
        })
        .await
    }

    /// Deletes config `id` of `task` (its notifications not yet sent go with it).
    pub async fn delete_push_config(&self, task: TaskId, id: String) -> Result<(), StoreError> {
        self.write(move |conn| {
            let deleted = diesel::delete(
                push_configs::table
                    .filter(push_configs::task_id.eq(task.to_string()))
                    .filter(push_configs::id.eq(&id)),
            )
            .execute(conn)
            .db()?;
            if deleted == 0 {
                return Err(StoreError::not_found("push notification config", id));
            }
            Ok(())
        })
        .await
    }

    /// Claims up to `limit` notifications that are due: each is pushed back
    /// by `lease_ms`, so no other replica takes it while this one tries.
    pub async fn claim_pushes(
        &self,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<PushDelivery>, StoreError> {
        let secrets = self.secrets.clone();
        self.write(move |conn| {
            let now = now_ms();
            // A config's notifications go in order: only its oldest waiting
            // one may be sent, once due (a later one waits behind its retries).
            let waiting: Vec<(i64, String, i64, i32, i64)> = push_outbox::table
                .select((
                    push_outbox::id,
                    push_outbox::config_id,
                    push_outbox::sequence,
                    push_outbox::attempts,
                    push_outbox::due_ms,
                ))
                .order(push_outbox::id.asc())
                .limit(WINDOW)
                .load(conn)
                .db()?;
            let mut firsts: Vec<(i64, String, i64, i32, i64)> = Vec::new();
            for row in waiting {
                if !firsts.iter().any(|f| f.1 == row.1) {
                    firsts.push(row);
                }
            }
            let due: Vec<_> = firsts
                .into_iter()
                .filter(|row| row.4 <= now)
                .take(usize::try_from(limit).unwrap_or(0))
                .collect();
            let mut claimed = Vec::new();
            for (id, config_id, sequence, attempts, was_due) in due {
                // Taken only if no other replica took it first.
                let took = diesel::update(
                    push_outbox::table
                        .filter(push_outbox::id.eq(id))
                        .filter(push_outbox::due_ms.eq(was_due)),
                )
                .set(push_outbox::due_ms.eq(now + lease_ms))
                .execute(conn)
                .db()?;
                if took == 0 {
                    continue;
                }
                let row: Option<ConfigRow> = push_configs::table
                    .find(&config_id)
                    .first(conn)
                    .optional()
                    .db()?;
                let Some(row) = row else { continue };
                claimed.push(PushDelivery {
                    outbox_id: id,
                    config: config_of(&secrets, row)?,
                    sequence: u64::try_from(sequence).unwrap_or_default(),
                    attempts,
                });
            }
            Ok(claimed)
        })
        .await
    }

    /// A notification delivered (or given up on): gone from the outbox.
    pub async fn push_done(&self, outbox_id: i64) -> Result<(), StoreError> {
        self.write(move |conn| {
            diesel::delete(push_outbox::table.find(outbox_id))
                .execute(conn)
                .db()?;
            Ok(())
        })
        .await
    }

    /// A failed attempt: tried again at `due_ms`.
    pub async fn push_failed(
        &self,
        outbox_id: i64,
        attempts: i32,
        due_ms: i64,
        error: String,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            diesel::update(push_outbox::table.find(outbox_id))
                .set((
                    push_outbox::attempts.eq(attempts),
                    push_outbox::due_ms.eq(due_ms),
                    push_outbox::last_error.eq(error),
                ))
                .execute(conn)
                .db()?;
            Ok(())
        })
        .await
    }
}

fn config_of(
    secrets: &crate::secrets::SecretBox,
    row: ConfigRow,
) -> Result<PushConfig, StoreError> {
    let (id, task_id, url, token, scheme, credentials, created_ms, secret) = row;
    let bound = bound_to(&id);
    let open = |sealed: &str| {
        secrets
            .open(sealed, &bound)
            .map_err(|e| StoreError::Database(format!("push notification config {id}: {e}")))
    };
    Ok(PushConfig {
        task_id: TaskId::parse(&task_id)
            .map_err(|e| StoreError::Database(format!("push_configs.task_id: {e}")))?,
        url: url::Url::parse(&url)
            .map_err(|e| StoreError::Database(format!("push_configs.url: {e}")))?,
        token: open(&token)?,
        secret: secret.as_deref().map(open).transpose()?,
        authentication: match (scheme, credentials) {
            (Some(scheme), Some(credentials)) => Some(PushAuth {
                scheme,
                credentials: open(&credentials)?,
            }),
            _ => None,
        },
        created_ms,
        id,
    })
}

/// Puts each status change among `events` — a call that starts or stops
/// waiting for approval changes the A2A state too — in the outbox once per
/// config of its task, in the transaction that records it.
pub(super) fn enqueue(conn: &mut AnyConnection, events: &[Event]) -> Result<(), StoreError> {
    for event in events.iter().filter(|e| {
        matches!(
            e.kind,
            EventKind::StatusChanged | EventKind::ApprovalRequested | EventKind::ApprovalAnswered
        )
    }) {
        let configs: Vec<String> = push_configs::table
            .filter(push_configs::task_id.eq(event.task_id.to_string()))
            .select(push_configs::id)
            .load(conn)
            .db()?;
        for config in configs {
            diesel::insert_into(push_outbox::table)
                .values((
                    push_outbox::config_id.eq(config),
                    push_outbox::task_id.eq(event.task_id.to_string()),
                    push_outbox::sequence.eq(i64::try_from(event.sequence).unwrap_or(i64::MAX)),
                    push_outbox::attempts.eq(0),
                    push_outbox::due_ms.eq(event.at_ms),
                ))
                .execute(conn)
                .db()?;
        }
    }
    Ok(())
}
