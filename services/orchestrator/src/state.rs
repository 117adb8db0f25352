//! What every request handler shares: the store (state of record), the event hub
//! (live fan-out of committed events), the run-token signer and the shutdown token.

use std::sync::Arc;

use chorus_run_token::{RunTokenSigner, RunTokenVerifier};
use tokio_util::sync::CancellationToken;

use crate::auth::KeyAuthenticator;
use crate::domain::feed::{ChangeFilter, FeedCursor};
use crate::domain::{Event, KeyReferenceRules, RootPolicy, TaskId};
use crate::execution::RunnerConfig;
use crate::history::{ChangeSource, EventHub, EventSource};
use crate::runner::Runner;
use crate::store::{ChangesPage, FOLLOW_PAGE_BYTES, Store, StoreError};

/// Where agents reach the services (`host:port`), as their environment says.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    pub orchestrator: String,
    /// Empty when no tool-exec is known (none embedded, none configured).
    pub tool_exec: String,
    /// The tool-exec is served by this process.
    pub embedded_tool_exec: bool,
    /// The MCP endpoint of the run's tools (Streamable HTTP); empty when
    /// none is served or known.
    pub mcp_url: String,
    /// The web console (`http(s)://host:port`), where the A2A face's
    /// JSON-RPC and HTTP+JSON bindings are; empty when none is served.
    pub console: String,
}

#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub hub: Arc<EventHub>,
    pub signer: Arc<RunTokenSigner>,
    /// The signer's public half, for the tokens agents present.
    pub verifier: RunTokenVerifier,
    /// Fires on shutdown: streams end, runs stop.
    pub shutdown: CancellationToken,
    pub addresses: Addresses,
    /// Runs agents; holds the live runs of this process.
    pub runner: Arc<Runner>,
    /// Checks API keys and run tokens (the auth layer and the in-process gate).
    pub auth: Arc<KeyAuthenticator>,
    /// Where workspace roots may be.
    pub roots: RootPolicy,
    /// Where provider key references may point.
    pub key_references: KeyReferenceRules,
    /// Rung when another replica handed runs on (or released one): claim
    /// now rather than at the next heartbeat.
    pub claim_now: Arc<tokio::sync::Notify>,
    /// What model calls cost when their provider does not say (`--prices`).
    pub prices: Arc<crate::domain::Prices>,
    /// Where A2A push notifications may go.
    pub push_networks: crate::domain::push::PushNetworks,
    /// Plans just recorded of tasks that start by themselves: the runner
    /// sends them, `core::tasks::keep_starting` starts them.
    pub planned: PlannedQueue,
    /// One task's branch work at a time, one landing per workspace.
    pub branch_locks: Arc<crate::core::branches::BranchLocks>,
}

/// A queue of task ids from whoever records a plan to whoever starts the
/// task, so that the one need not know the other.
#[derive(Debug, Clone)]
pub struct PlannedQueue {
    tx: tokio::sync::mpsc::UnboundedSender<TaskId>,
    rx: Arc<std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<TaskId>>>>,
}

impl Default for PlannedQueue {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            tx,
            rx: Arc::new(std::sync::Mutex::new(Some(rx))),
        }
    }
}

impl PlannedQueue {
    /// A plan of `task` was recorded: it is to be started.
    pub fn send(&self, task: TaskId) {
        let _ = self.tx.send(task);
    }

    /// The receiving end, once (the loop that starts the tasks).
    pub fn take(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<TaskId>> {
        self.rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl AppState {
    /// State over `store`, running CLI agents in `processes`.
    pub fn new(
        store: Store,
        signer: Arc<RunTokenSigner>,
        runner: RunnerConfig,
        processes: chorus_sandbox::Sandbox,
    ) -> Self {
        let verifier = signer.verifier();
        Self {
            auth: Arc::new(KeyAuthenticator::new(store.clone(), verifier.clone())),
            hub: Arc::clone(store.hub()),
            store,
            signer,
            verifier,
            shutdown: CancellationToken::new(),
            addresses: Addresses::default(),
            runner: Arc::new(Runner::new(runner, processes)),
            roots: RootPolicy::default(),
            key_references: KeyReferenceRules::default(),
            claim_now: Arc::new(tokio::sync::Notify::new()),
            prices: Arc::default(),
            push_networks: crate::domain::push::PushNetworks::default(),
            planned: PlannedQueue::default(),
            branch_locks: Arc::default(),
        }
    }
}

impl ChangeSource for Store {
    type Error = StoreError;

    async fn changes_after(
        &self,
        after: FeedCursor,
        filter: ChangeFilter,
        limit: u32,
    ) -> Result<ChangesPage, StoreError> {
        Store::changes_after(self, after, filter, limit).await
    }
}

impl EventSource for Store {
    type Error = StoreError;

    async fn events_after(
        &self,
        task: TaskId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        self.events(task, after, limit, FOLLOW_PAGE_BYTES).await
    }

    async fn settled(&self, task: TaskId) -> Result<bool, StoreError> {
        Ok(self.get_task(task).await?.status.is_terminal()
            && !self.has_unfinished_runs(task).await?)
    }

    async fn needs_you(&self, task: TaskId) -> Result<Option<u64>, StoreError> {
        let task = self.get_task(task).await?;
        // A planned task that starts by itself waits for no one.
        if task.needs_you().is_none() || self.has_unfinished_runs(task.id).await? {
            return Ok(None);
        }
        Ok(Some(task.last_sequence))
    }
}
