//! The one module that owns the database (diesel, on SQLite or PostgreSQL).
//!
//! Callers see domain types and [`StoreError`]; no diesel type leaves this module.
//! Every call runs its queries on the blocking pool (`spawn_blocking`) — on SQLite
//! a task read before is answered from memory (`task_cache`), and a run read by
//! its id runs on the calling thread when a connection is idle
//! (`Store::point_read`) —, every write
//! is one transaction, and every change to a task writes its history events in the
//! same transaction, numbered 1, 2, 3, ... per task without gaps
//! ([`Store::change_task`], [`Store::change_run`]).
//!
//! Files: `connection` (backends, pool, migrations, transactions), `schema` and
//! `rows` (tables and row ↔ domain conversions), `kept` (statements kept
//! prepared), `task_cache`, `call_record` (a tool call's record in one
//! statement on PostgreSQL), then one file per concept.

mod agents;
mod api_keys;
mod call_record;
mod calls;
mod changed_files;
mod connection;
mod feed;
mod kept;
mod lease_thread;
mod provider_keys;
mod providers;
mod push;
mod replicas;
mod rows;
mod run_token_keys;
mod runs;
mod schema;
mod spend;
mod task_cache;
mod tasks;
mod usage;
mod workspaces;

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::domain::{DomainError, Event, EventKind, Run, Task};
use crate::history::hub::EventHub;
use crate::secrets::SecretBox;

/// What a write that commits events answers, with them.
pub trait Committed {
    /// The events the write committed, in order.
    fn committed(&self) -> &[Event];
}

impl Committed for Vec<Event> {
    fn committed(&self) -> &[Event] {
        self
    }
}

impl Committed for (Task, Vec<Event>) {
    fn committed(&self) -> &[Event] {
        &self.1
    }
}

impl Committed for (Run, Task, Vec<Event>) {
    fn committed(&self) -> &[Event] {
        &self.2
    }
}

impl Committed for (Task, Vec<Run>, Vec<Event>) {
    fn committed(&self) -> &[Event] {
        &self.2
    }
}

pub use agents::{AgentChanges, NewAgent};
pub use changed_files::ChangedFile;
pub use feed::{ChangesPage, FEED_CHANNEL};
pub use providers::{NewProvider, ProviderChanges};
pub use push::PushDelivery;
pub use replicas::{Claim, HANDED_ON_CHANNEL, Heartbeat, ReplicaIdentity, ReplicaRecord};
pub use run_token_keys::KEYS_CHANNEL;
pub use runs::NewRun;
pub use tasks::{
    DEFAULT_PAGE_SIZE, EVENT_PAGE_BYTES, EventDraft, FOLLOW_PAGE_BYTES, MAX_EVENTS, MAX_PAGE_SIZE,
    NewTask, TASK_CHANNEL, TASK_PAGE_BYTES, TASK_REQUEST, TaskQuery, parse_task_notice,
};
pub use usage::CallId;

use connection::{AnyConnection, ConnectionPool, Target};

/// Why a store call failed. gRPC mapping: `NotFound` → NOT_FOUND, `AlreadyExists` →
/// ALREADY_EXISTS, `ProviderInUse`, `WorkspaceInUse`, `AgentInUse`, `LastAdminKey` and
/// `Undecryptable` → FAILED_PRECONDITION,
/// `Domain` → as the domain error says, `Corrupt` and `Database` → INTERNAL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{what} '{key}' not found")]
    NotFound { what: &'static str, key: String },
    #[error("{what} '{key}' already exists")]
    AlreadyExists { what: &'static str, key: String },
    /// A provider cannot be deleted while agents or the workspace use it.
    #[error("{}", provider_in_use(provider, agents, *system_provider))]
    ProviderInUse {
        provider: String,
        /// Agents whose provider it is.
        agents: Vec<String>,
        /// Whether it is the workspace's system provider.
        system_provider: bool,
    },
    /// A workspace cannot be deleted while it has tasks: they are its history.
    #[error(
        "workspace '{workspace}' has {tasks} task(s); a workspace with tasks cannot be deleted: delete them with DeleteTask (cancel the ones still open with CancelTask first)"
    )]
    WorkspaceInUse { workspace: String, tasks: u64 },
    /// The last admin key that is not revoked cannot be revoked: no one could
    /// administer the service (or make another key) until a restart.
    #[error(
        "api key '{id}' is the last admin key that is not revoked; revoking it would lock every administrator out: create another admin key (CreateApiKey with role admin), then revoke this one"
    )]
    LastAdminKey { id: String },
    /// An agent cannot be deleted while a run of it goes on: the run could
    /// not be resumed or driven to its end without it.
    #[error(
        "agent '{agent}' has a run going (run {run} of task {task}); cancel the task with CancelTask or wait for the run to end, then delete the agent"
    )]
    AgentInUse {
        agent: String,
        run: String,
        task: String,
    },
    /// A provider's stored API key does not open with the secrets key in use.
    #[error(
        "the API key of provider '{provider}' cannot be decrypted: {reason}; start the orchestrator with the secrets key it was stored with (--secrets-key-file or CHORUS_SECRETS_KEY), or set the key again with UpdateProvider"
    )]
    Undecryptable { provider: String, reason: String },
    /// A domain rule refused the change; nothing was written.
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// A stored value no longer parses as its domain type.
    #[error("stored {what} '{key}' cannot be read: {reason}")]
    Corrupt {
        what: &'static str,
        key: String,
        reason: String,
    },
    /// Another process holds this replica's id now (it was started with the
    /// same `--replica-id` after this one lost the database).
    #[error(
        "replica '{id}' is held by another orchestrator process now; this one stops driving runs"
    )]
    ReplicaTaken { id: String },
    /// The database failed in a way no caller can fix.
    #[error("database error: {0}")]
    Database(String),
    /// A PostgreSQL server could not be connected to (down, unreachable,
    /// refusing the credentials): it may answer later.
    #[error("{0}")]
    Unreachable(String),
}

fn provider_in_use(provider: &str, agents: &[String], system_provider: bool) -> String {
    let mut users = Vec::new();
    if !agents.is_empty() {
        users.push(format!("by agent(s) {}", agents.join(", ")));
    }
    if system_provider {
        users.push("as the workspace's system provider".to_owned());
    }
    if users.is_empty() {
        return format!("provider '{provider}' is in use; give its users another provider first");
    }
    format!(
        "provider '{provider}' is in use {}; give them another provider first",
        users.join(" and ")
    )
}

impl StoreError {
    pub(crate) fn not_found(what: &'static str, key: impl fmt::Display) -> Self {
        Self::NotFound {
            what,
            key: key.to_string(),
        }
    }
}

/// Turns diesel's errors into [`StoreError::Database`] (`.db()?`), so no `From`
/// impl exposes a diesel type.
trait Db<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> Db<T> for Result<T, diesel::result::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Database(e.to_string()))
    }
}

/// Maps a foreign-key violation (a row it points to was deleted since it was
/// checked) to `NotFound { what, key }`.
fn or_missing<T>(
    result: Result<T, diesel::result::Error>,
    what: &'static str,
    key: impl fmt::Display,
) -> Result<T, StoreError> {
    use diesel::result::{DatabaseErrorKind, Error};
    match result {
        Err(Error::DatabaseError(DatabaseErrorKind::ForeignKeyViolation, _)) => {
            Err(StoreError::not_found(what, key))
        }
        other => other.db(),
    }
}

/// Maps a unique violation on insert to `AlreadyExists { what, key }`.
fn or_exists<T>(
    result: Result<T, diesel::result::Error>,
    what: &'static str,
    key: impl fmt::Display,
) -> Result<T, StoreError> {
    use diesel::result::{DatabaseErrorKind, Error};
    match result {
        Err(Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
            Err(StoreError::AlreadyExists {
                what,
                key: key.to_string(),
            })
        }
        other => other.db(),
    }
}

/// Which database a store writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The orchestrator's state of record. Cheap to clone (a pool handle).
#[derive(Clone)]
pub struct Store {
    pool: ConnectionPool,
    /// The heartbeat's own connection, on its own thread (see
    /// `connection::Pools`, `lease_thread`).
    leases: Arc<lease_thread::LeaseThread>,
    /// Places for calls on `pool`: as many as it has connections. A call
    /// waits for one here, in turn, before it takes a blocking thread: calls
    /// a busy replica queues wait as tasks, not as threads parked on the
    /// pool, so the blocking pool stays free for everything else.
    places: Arc<tokio::sync::Semaphore>,
    backend: Backend,
    /// Seals and opens provider API keys.
    secrets: SecretBox,
    /// A SQLite file and its identity when opened (see [`Store::ping`]).
    sqlite_file: Option<(PathBuf, FileId)>,
    /// Notified when a call fails on the database.
    failures: Arc<Notify>,
    /// Which replica this process is, and how long its leases last.
    replica: Arc<ReplicaIdentity>,
    /// The database URL (PostgreSQL: the replicas' listener connects to it).
    url: Arc<str>,
    /// Tasks as last read (SQLite only; see `task_cache`).
    tasks: Arc<task_cache::TaskCache>,
    /// Where committed events are announced to this process's watchers:
    /// every write that commits events publishes them here itself (see
    /// [`Store::write_events`]), so no caller can forget to.
    hub: Arc<EventHub>,
}

/// A file's device and inode.
type FileId = (u64, u64);

fn file_id(path: &Path) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// How long [`Store::ping`] waits for a connection.
const PING_TIMEOUT: Duration = Duration::from_secs(3);

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .field("connections", &self.pool.state().connections)
            .finish()
    }
}

impl Store {
    /// Opens the database `url` names and brings its schema up to date.
    ///
    /// `postgres://...` or `postgresql://...` is PostgreSQL (libpq URL); anything
    /// else is a SQLite file path, optionally written `sqlite://path`, whose parent
    /// directory is created (owner-only, as the file and its `-wal`/`-shm`
    /// files are). A new file gets its schema on first open. Provider API keys
    /// are sealed and opened with `secrets`.
    pub async fn open(url: &str, secrets: SecretBox) -> Result<Self, StoreError> {
        let target = Target::parse(url)?;
        let full_url: Arc<str> = Arc::from(url);
        let backend = match target {
            Target::Sqlite(_) => Backend::Sqlite,
            Target::Postgres(_) => Backend::Postgres,
        };
        let sqlite_path = match &target {
            Target::Sqlite(path) => Some(PathBuf::from(path)),
            Target::Postgres(_) => None,
        };
        let connection::Pools { main: pool, leases } =
            blocking(move || connection::open_pools(target)).await?;
        let sqlite_file = match sqlite_path {
            Some(path) => {
                let id = file_id(&path).map_err(|e| {
                    StoreError::Database(format!("cannot read {}: {e}", path.display()))
                })?;
                Some((path, id))
            }
            None => None,
        };
        let places = Arc::new(tokio::sync::Semaphore::new(
            usize::try_from(pool.max_size()).unwrap_or(1),
        ));
        let leases = lease_thread::LeaseThread::start(leases).map_err(|e| {
            StoreError::Database(format!("cannot start the thread of the leases: {e}"))
        })?;
        Ok(Self {
            pool,
            leases: Arc::new(leases),
            places,
            backend,
            secrets,
            sqlite_file,
            failures: Arc::new(Notify::new()),
            replica: Arc::new(ReplicaIdentity::default()),
            url: full_url,
            tasks: Arc::new(match backend {
                Backend::Sqlite => task_cache::TaskCache::enabled(task_cache::CACHE_BYTES),
                Backend::Postgres => task_cache::TaskCache::disabled(),
            }),
            hub: Arc::new(EventHub::new()),
        })
    }

    /// Where this store announces the events it commits (and the replicas'
    /// relay, the events other replicas committed).
    pub fn hub(&self) -> &Arc<EventHub> {
        &self.hub
    }

    /// The same store, acting as replica `identity` (the default: the single
    /// replica `local` with 30-second leases).
    #[must_use]
    pub fn as_replica(mut self, identity: ReplicaIdentity) -> Self {
        self.replica = Arc::new(identity);
        self
    }

    /// Which replica this process is.
    pub fn replica(&self) -> &ReplicaIdentity {
        &self.replica
    }

    /// The SQLite database file, when that is the backend.
    pub fn sqlite_path(&self) -> Option<&Path> {
        self.sqlite_file.as_ref().map(|(path, _)| path.as_path())
    }

    /// The URL the store was opened with (it may hold credentials: never log it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// When a lease taken or extended now ends.
    fn lease_end(&self) -> i64 {
        let lease = i64::try_from(self.replica.lease.as_millis()).unwrap_or(i64::MAX);
        crate::domain::now_ms().saturating_add(lease)
    }

    /// Whether the database answers now: a pooled connection (waited for at
    /// most a few seconds) runs a trivial query, and a SQLite file is still
    /// the file that was opened (one removed or replaced would take every
    /// later write with it). The error says what is wrong.
    pub async fn ping(&self) -> Result<(), StoreError> {
        if let Some((path, opened)) = &self.sqlite_file {
            match file_id(path) {
                Ok(id) if id == *opened => {}
                Ok(_) => {
                    return Err(StoreError::Database(format!(
                        "the database file {} is not the file the orchestrator opened (it was replaced); restart the orchestrator",
                        path.display()
                    )));
                }
                Err(e) => {
                    return Err(StoreError::Database(format!(
                        "the database file {} cannot be found ({e}); put it back, or restart the orchestrator",
                        path.display()
                    )));
                }
            }
        }
        let pool = self.pool.clone();
        blocking(move || {
            let mut session = pool.get_timeout(PING_TIMEOUT).map_err(|e| {
                StoreError::Database(format!(
                    "no database connection within {PING_TIMEOUT:?}: {e}"
                ))
            })?;
            session.run(connection::ping)
        })
        .await
    }

    /// Notified whenever a call fails on the database, so its health is
    /// checked again at once.
    pub fn failures(&self) -> Arc<Notify> {
        Arc::clone(&self.failures)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Connections of the pool: (open, idle).
    pub fn pool_use(&self) -> (u32, u32) {
        let state = self.pool.state();
        (state.connections, state.idle_connections)
    }

    /// Runs `f` on a pooled connection, off the async threads (reads: one query
    /// each, or a few whose races are harmless).
    async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        self.on(f).await
    }

    /// Runs `f` on a connection of the pool, off the async threads, once a
    /// place is free (see `places`).
    async fn on<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        let place = Arc::clone(&self.places)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Database("the store is closed".into()))?;
        let pool = self.pool.clone();
        let tasks = Arc::clone(&self.tasks);
        let result = blocking(move || {
            let _place = place;
            let mut session = pool.get().map_err(|e| {
                StoreError::Database(format!("no database connection available: {e}"))
            })?;
            ended(&tasks, session.run(f))
        })
        .await;
        self.noted(result)
    }

    /// Runs `f`, a read of one row by its key, on the calling thread when a
    /// place and a connection are free at once and the database is SQLite:
    /// there such a read takes microseconds and waits for no writer (WAL
    /// readers take no lock), so the hop to the blocking pool and back (two
    /// thread wake-ups) would cost more than the read. Otherwise as
    /// [`Self::with_conn`]. Only for reads of one row by key: anything that
    /// may scan or write goes through the blocking pool.
    async fn point_read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        if self.backend == Backend::Sqlite
            && let Ok(place) = Arc::clone(&self.places).try_acquire_owned()
            && let Some(mut session) = self.pool.try_get()
        {
            let result = session.run(f);
            drop(session);
            drop(place);
            return self.noted(result);
        }
        self.with_conn(f).await
    }

    /// `result`, a database failure noted (see [`Store::failures`]).
    fn noted<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Database(_)) = &result {
            self.failures.notify_one();
        }
        result
    }

    /// Runs `f` in one write transaction (see `connection::write_transaction`).
    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        self.with_conn(move |conn| connection::write_transaction(conn, f))
            .await
    }

    /// [`Self::write`] for a write that commits events: once committed, they
    /// are announced to this process's watchers (and counted).
    async fn write_events<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Committed + Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        let (written, changes) = self
            .write(move |conn| {
                let written = f(conn)?;
                push::enqueue(conn, written.committed())?;
                // Last: the feed's head stays locked until the commit.
                let changes = feed::record(conn, written.committed())?;
                Ok((written, changes))
            })
            .await?;
        self.announce(written.committed(), &changes);
        Ok(written)
    }

    /// Announces `events` and the feed's `changes`, just committed, to this
    /// process's watchers, and counts them.
    fn announce(&self, events: &[Event], changes: &[crate::domain::feed::TaskChange]) {
        let metrics = chorus_telemetry::metrics();
        for event in events {
            metrics.events_appended.add(
                1,
                &[opentelemetry::KeyValue::new(
                    "chorus.event",
                    event.kind.as_str(),
                )],
            );
            let budget = match event.kind {
                EventKind::BudgetWarning => Some("warning"),
                EventKind::BudgetExceeded => Some("exceeded"),
                _ => None,
            };
            if let Some(what) = budget {
                let limit = event.data["limit"].as_str().unwrap_or_default().to_owned();
                metrics.budget_events.add(
                    1,
                    &[
                        opentelemetry::KeyValue::new("chorus.budget.event", what),
                        opentelemetry::KeyValue::new("chorus.limit", limit),
                    ],
                );
            }
        }
        self.hub.publish(events);
        self.hub.publish_changes(changes);
    }

    /// [`Self::write`] on the heartbeat's own connection.
    async fn write_lease<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, StoreError> + Send + 'static,
    {
        let tasks = Arc::clone(&self.tasks);
        let result = self
            .leases
            .run(move |conn| ended(&tasks, connection::write_transaction(conn, f)))
            .await;
        self.noted(result)
    }
}

/// `result` of a call whose transaction has ended: the tasks it wrote are
/// read anew.
fn ended<T>(tasks: &task_cache::TaskCache, result: T) -> T {
    tasks.written(&task_cache::take_touched());
    result
}

/// Runs blocking database work on tokio's blocking pool. A panic inside it is
/// resumed in the caller (it is a bug, not a database error).
async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(StoreError::Database(format!(
            "database call was canceled: {e}"
        ))),
    }
}
