//! Row types (what diesel reads and writes) and their conversions to and from the
//! domain. Reading a row re-checks every value; one that no longer parses becomes
//! [`StoreError::Corrupt`] naming the row and the value.

use std::fmt;
use std::path::PathBuf;

use diesel::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;
use super::schema::{agents, api_keys, providers, runs, task_events, tasks, workspaces};
use crate::domain::{
    Agent, AgentKind, ApiKeyRecord, DomainError, Event, EventKind, Name, Provider, ProviderKind,
    Run, RunId, RunState, Stage, StageExt, Task, TaskId, TaskStatus, TokenBinding, ToolTransport,
    Workspace, WorkspaceId,
};

fn corrupt(what: &'static str, key: impl fmt::Display, reason: impl fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what,
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

/// Serializes a value for a JSON TEXT column.
pub(super) fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Database(format!("cannot encode a value as JSON: {e}")))
}

/// Reads values of one row, naming the row in every error.
struct Reader<'a> {
    what: &'static str,
    key: &'a str,
}

impl Reader<'_> {
    fn check<T>(&self, result: Result<T, DomainError>) -> Result<T, StoreError> {
        result.map_err(|e| corrupt(self.what, self.key, e))
    }

    fn json<T: DeserializeOwned>(&self, column: &str, text: &str) -> Result<T, StoreError> {
        serde_json::from_str(text)
            .map_err(|e| corrupt(self.what, self.key, format!("{column} is not valid: {e}")))
    }

    /// A nullable JSON column: its default when NULL.
    fn opt_json<T: DeserializeOwned + Default>(
        &self,
        column: &str,
        text: Option<&str>,
    ) -> Result<T, StoreError> {
        text.map(|t| self.json(column, t))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    fn name(&self, field: &'static str, value: &str) -> Result<Name, StoreError> {
        self.check(Name::parse(field, value))
    }

    fn opt_name(
        &self,
        field: &'static str,
        value: Option<&str>,
    ) -> Result<Option<Name>, StoreError> {
        value.map(|v| self.name(field, v)).transpose()
    }

    fn sequence(&self, value: i64) -> Result<u64, StoreError> {
        u64::try_from(value)
            .map_err(|_| corrupt(self.what, self.key, format!("negative sequence {value}")))
    }
}

/// A sequence number as the database stores it.
pub(super) fn db_sequence(sequence: u64) -> Result<i64, StoreError> {
    i64::try_from(sequence)
        .map_err(|_| StoreError::Database(format!("sequence {sequence} is out of range")))
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = workspaces)]
pub(super) struct WorkspaceRow {
    pub id: String,
    pub name: String,
    pub root: String,
    pub system_provider: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// JSON of `WorkspaceLimits`.
    pub limits: Option<String>,
    /// JSON of `WorkspaceChanges`.
    pub changes: Option<String>,
    /// JSON array of approval rules.
    pub approval_rules: Option<String>,
}

impl WorkspaceRow {
    pub fn into_domain(self) -> Result<Workspace, StoreError> {
        let r = Reader {
            what: "workspace",
            key: &self.id,
        };
        Ok(Workspace {
            id: r.check(WorkspaceId::parse(&self.id))?,
            name: r.name("workspace name", &self.name)?,
            root: PathBuf::from(&self.root),
            system_provider: r.opt_name("system provider", self.system_provider.as_deref())?,
            limits: self
                .limits
                .as_deref()
                .map(|l| r.json("limits", l))
                .transpose()?
                .unwrap_or_default(),
            changes: self
                .changes
                .as_deref()
                .map(|c| r.json("changes", c))
                .transpose()?
                .unwrap_or_default(),
            approval_rules: r.opt_json("approval_rules", self.approval_rules.as_deref())?,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
        })
    }
}

/// No `Debug`: it holds the API key (sealed, or an earlier version's in clear
/// until the first start seals it).
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = providers)]
pub(super) struct ProviderRow {
    pub workspace_id: String,
    pub name: String,
    pub kind: String,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub tool_transport: String,
}

impl ProviderRow {
    /// The provider without its key (only where it comes from).
    pub fn into_domain(self) -> Result<Provider, StoreError> {
        let key = format!("{}/{}", self.workspace_id, self.name);
        let r = Reader {
            what: "provider",
            key: &key,
        };
        let api_key_source = self
            .api_key
            .as_deref()
            .map(super::provider_keys::source)
            .transpose()
            .map_err(|reason| corrupt("provider", &key, reason))?;
        Ok(Provider {
            name: r.name("provider name", &self.name)?,
            kind: r.check(ProviderKind::parse(&self.kind))?,
            base_url: self.base_url,
            model: self.model,
            api_key_source,
            tool_transport: r.check(ToolTransport::parse(&self.tool_transport))?,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = agents)]
pub(super) struct AgentRow {
    pub workspace_id: String,
    pub name: String,
    pub kind: String,
    pub instructions: String,
    pub allowed_tools: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// JSON array of `host:port` rules.
    pub egress: String,
    /// JSON of `Budget`.
    pub budget: Option<String>,
    /// JSON array of approval rules.
    pub approval_rules: Option<String>,
}

impl AgentRow {
    pub fn from_domain(workspace: WorkspaceId, agent: &Agent) -> Result<Self, StoreError> {
        Ok(Self {
            workspace_id: workspace.to_string(),
            name: agent.name.to_string(),
            kind: agent.kind.as_str().to_owned(),
            instructions: agent.instructions.clone(),
            allowed_tools: to_json(&agent.allowed_tools)?,
            provider: agent.provider.as_ref().map(Name::to_string),
            model: agent.model.clone(),
            created_ms: agent.created_ms,
            updated_ms: agent.updated_ms,
            egress: to_json(&agent.egress)?,
            budget: Some(to_json(&agent.budget)?),
            approval_rules: Some(to_json(&agent.approval_rules)?),
        })
    }

    pub fn into_domain(self) -> Result<Agent, StoreError> {
        let key = format!("{}/{}", self.workspace_id, self.name);
        let r = Reader {
            what: "agent",
            key: &key,
        };
        Ok(Agent {
            name: r.name("agent name", &self.name)?,
            kind: r.check(AgentKind::parse(&self.kind))?,
            instructions: self.instructions,
            allowed_tools: r.json("allowed_tools", &self.allowed_tools)?,
            provider: r.opt_name("provider", self.provider.as_deref())?,
            model: self.model,
            egress: r.json("egress", &self.egress)?,
            budget: self
                .budget
                .as_deref()
                .map(|b| r.json("budget", b))
                .transpose()?
                .unwrap_or_default(),
            approval_rules: r.opt_json("approval_rules", self.approval_rules.as_deref())?,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = tasks, treat_none_as_null = true)]
pub(super) struct TaskRow {
    pub id: String,
    pub workspace_id: String,
    pub description: String,
    pub source: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub stage: String,
    pub planning: String,
    pub current_agent: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub last_sequence: i64,
    /// JSON of `Usage`.
    pub usage: Option<String>,
    /// JSON of `TaskBudget`.
    pub budget: Option<String>,
    pub conversation_id: Option<String>,
    /// JSON of `AutoStart`.
    pub auto_start: Option<String>,
    pub request_key: Option<String>,
    /// JSON of [`BranchColumn`].
    pub branch: Option<String>,
    /// JSON of `Approvals` (NULL: none).
    pub approvals: Option<String>,
}

/// A task's `branch` column: its own branch, or why it has none.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct BranchColumn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    branch: Option<crate::domain::TaskBranch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl TaskRow {
    /// About how many bytes the task takes in an answer: its text.
    pub fn bytes(&self) -> usize {
        [
            &self.id,
            &self.workspace_id,
            &self.description,
            &self.source,
            &self.status,
            &self.stage,
            &self.planning,
        ]
        .iter()
        .map(|s| s.len())
        .sum::<usize>()
            + self.status_reason.as_ref().map_or(0, String::len)
            + self.current_agent.as_ref().map_or(0, String::len)
            + 64
    }

    pub fn from_domain(task: &Task) -> Result<Self, StoreError> {
        Ok(Self {
            id: task.id.to_string(),
            workspace_id: task.workspace_id.to_string(),
            description: task.description.clone(),
            source: to_json(&task.source)?,
            status: task.status.as_str().to_owned(),
            status_reason: task.status_reason.clone(),
            stage: task.stage.as_str().to_owned(),
            planning: to_json(&task.planning)?,
            current_agent: task.current_agent.as_ref().map(Name::to_string),
            created_ms: task.created_ms,
            updated_ms: task.updated_ms,
            last_sequence: db_sequence(task.last_sequence)?,
            usage: Some(to_json(&task.usage)?),
            budget: Some(to_json(&task.budget)?),
            conversation_id: task.source.conversation_id.clone(),
            auto_start: task.auto_start.as_ref().map(to_json).transpose()?,
            request_key: task.source.request_key(),
            branch: Some(to_json(&BranchColumn {
                branch: task.branch.clone(),
                note: task.branch_note.clone(),
            })?),
            approvals: (!task.approvals.is_empty())
                .then(|| to_json(&task.approvals))
                .transpose()?,
        })
    }

    pub fn into_domain(self) -> Result<Task, StoreError> {
        let r = Reader {
            what: "task",
            key: &self.id,
        };
        let branch: BranchColumn = self
            .branch
            .as_deref()
            .map(|b| r.json("branch", b))
            .transpose()?
            .unwrap_or_default();
        Ok(Task {
            id: r.check(TaskId::parse(&self.id))?,
            workspace_id: r.check(WorkspaceId::parse(&self.workspace_id))?,
            description: self.description.clone(),
            source: r.json("source", &self.source)?,
            status: r.check(self.status.parse::<TaskStatus>())?,
            status_reason: self.status_reason.clone(),
            stage: r.check(Stage::parse(&self.stage))?,
            planning: r.json("planning", &self.planning)?,
            current_agent: r.opt_name("current agent", self.current_agent.as_deref())?,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            last_sequence: r.sequence(self.last_sequence)?,
            usage: self
                .usage
                .as_deref()
                .map(|u| r.json("usage", u))
                .transpose()?
                .unwrap_or_default(),
            budget: self
                .budget
                .as_deref()
                .map(|b| r.json("budget", b))
                .transpose()?
                .unwrap_or_default(),
            auto_start: self
                .auto_start
                .as_deref()
                .map(|a| r.json("auto_start", a))
                .transpose()?,
            branch: branch.branch,
            branch_note: branch.note,
            approvals: r.opt_json("approvals", self.approvals.as_deref())?,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = task_events)]
pub(super) struct EventRow {
    pub task_id: String,
    pub sequence: i64,
    pub kind: String,
    pub data: String,
    pub at_ms: i64,
}

impl EventRow {
    pub fn from_domain(event: &Event) -> Result<Self, StoreError> {
        Ok(Self {
            task_id: event.task_id.to_string(),
            sequence: db_sequence(event.sequence)?,
            kind: event.kind.as_str().to_owned(),
            data: to_json(&event.data)?,
            at_ms: event.at_ms,
        })
    }

    pub fn into_domain(self) -> Result<Event, StoreError> {
        let key = format!("{}#{}", self.task_id, self.sequence);
        let r = Reader {
            what: "event",
            key: &key,
        };
        Ok(Event {
            task_id: r.check(TaskId::parse(&self.task_id))?,
            sequence: r.sequence(self.sequence)?,
            kind: r.check(EventKind::parse(&self.kind))?,
            data: r.json("data", &self.data)?,
            at_ms: self.at_ms,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = runs, treat_none_as_null = true)]
pub(super) struct RunRow {
    pub id: String,
    pub task_id: String,
    pub agent: String,
    pub parent_run_id: Option<String>,
    pub state: String,
    pub tools: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub end_reason: Option<String>,
    pub completion_report: Option<String>,
    pub planner_output: Option<String>,
    pub session_id: Option<String>,
    pub usage: Option<String>,
    pub handoff_index: Option<i64>,
    pub prompt: Option<String>,
    pub output: Option<String>,
    pub token_root: Option<String>,
    pub token_expires_ms: Option<i64>,
    /// JSON array of the token's egress rules (NULL: none).
    pub token_egress: Option<String>,
    pub replica: Option<String>,
    /// Not part of the domain run: the store keeps leases.
    pub lease_expires_ms: Option<i64>,
    pub epoch: i64,
    pub timeout_ms: Option<i64>,
    /// JSON of `RunRules` (NULL: none).
    pub rules: Option<String>,
}

impl RunRow {
    pub fn from_domain(run: &Run) -> Result<Self, StoreError> {
        Ok(Self {
            id: run.id.to_string(),
            task_id: run.task_id.to_string(),
            agent: run.agent.to_string(),
            parent_run_id: run.parent.map(|p| p.to_string()),
            state: run.state.as_str().to_owned(),
            tools: to_json(&run.tools)?,
            started_ms: run.started_ms,
            finished_ms: run.finished_ms,
            end_reason: run.end_reason.clone(),
            completion_report: run.completion_report.as_ref().map(to_json).transpose()?,
            planner_output: run.planner_output.as_ref().map(to_json).transpose()?,
            session_id: run.session_id.clone(),
            usage: Some(to_json(&run.usage)?),
            handoff_index: run.handoff_index.map(i64::from),
            prompt: run.prompt.clone(),
            output: run.output.clone(),
            token_root: run
                .token
                .as_ref()
                .map(|t| {
                    t.root.to_str().map(str::to_owned).ok_or_else(|| {
                        StoreError::Domain(DomainError::invalid(
                            "workspace root",
                            format!("'{}' is not valid UTF-8", t.root.display()),
                        ))
                    })
                })
                .transpose()?,
            token_expires_ms: run.token.as_ref().map(|t| t.expires_ms),
            token_egress: match &run.token {
                Some(t) if !t.egress.is_empty() => Some(to_json(&t.egress)?),
                _ => None,
            },
            replica: run.replica.clone(),
            lease_expires_ms: None,
            epoch: i64::from(run.epoch),
            timeout_ms: run.timeout_ms,
            rules: (!run.rules.is_empty())
                .then(|| to_json(&run.rules))
                .transpose()?,
        })
    }

    pub fn into_domain(self) -> Result<Run, StoreError> {
        let r = Reader {
            what: "run",
            key: &self.id,
        };
        Ok(Run {
            id: r.check(RunId::parse(&self.id))?,
            task_id: r.check(TaskId::parse(&self.task_id))?,
            agent: r.name("agent name", &self.agent)?,
            parent: self
                .parent_run_id
                .as_deref()
                .map(|p| r.check(RunId::parse(p)))
                .transpose()?,
            state: r.check(RunState::parse(&self.state))?,
            tools: r.json("tools", &self.tools)?,
            rules: r.opt_json("rules", self.rules.as_deref())?,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            end_reason: self.end_reason.clone(),
            completion_report: self
                .completion_report
                .as_deref()
                .map(|t| r.json("completion_report", t))
                .transpose()?,
            planner_output: self
                .planner_output
                .as_deref()
                .map(|t| r.json("planner_output", t))
                .transpose()?,
            session_id: self.session_id.clone(),
            usage: self
                .usage
                .as_deref()
                .map(|t| r.json("usage", t))
                .transpose()?
                .unwrap_or_default(),
            handoff_index: self
                .handoff_index
                .map(|i| {
                    r.check(u32::try_from(i).map_err(|_| {
                        DomainError::invalid("handoff index", format!("{i} is out of range"))
                    }))
                })
                .transpose()?,
            prompt: self.prompt.clone(),
            output: self.output.clone(),
            token: match (&self.token_root, self.token_expires_ms) {
                (Some(root), Some(expires_ms)) => Some(TokenBinding {
                    root: root.into(),
                    expires_ms,
                    egress: match &self.token_egress {
                        Some(egress) => r.json("token_egress", egress)?,
                        None => Vec::new(),
                    },
                }),
                _ => None,
            },
            replica: self.replica.clone(),
            epoch: r.check(u32::try_from(self.epoch).map_err(|_| {
                DomainError::invalid("epoch", format!("{} is out of range", self.epoch))
            }))?,
            timeout_ms: self.timeout_ms,
            lease_expires_ms: self.lease_expires_ms,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
pub(super) struct ApiKeyRow {
    pub id: String,
    pub name: String,
    pub role: String,
    pub hash: String,
    pub created_ms: i64,
    pub revoked_ms: Option<i64>,
}

impl ApiKeyRow {
    pub fn from_domain(key: &ApiKeyRecord) -> Self {
        Self {
            id: key.id.clone(),
            name: key.name.to_string(),
            role: key.role.as_str().to_owned(),
            hash: key.hash.clone(),
            created_ms: key.created_ms,
            revoked_ms: key.revoked_ms,
        }
    }

    pub fn into_domain(self) -> Result<ApiKeyRecord, StoreError> {
        let r = Reader {
            what: "api key",
            key: &self.id,
        };
        Ok(ApiKeyRecord {
            name: r.name("key name", &self.name)?,
            role: self.role.parse().map_err(|reason| StoreError::Corrupt {
                what: "api key",
                key: self.id.clone(),
                reason,
            })?,
            id: self.id,
            hash: self.hash,
            created_ms: self.created_ms,
            revoked_ms: self.revoked_ms,
        })
    }
}
