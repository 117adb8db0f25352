//! Agents of a workspace: allow-lists checked against the catalog, providers that
//! exist in the workspace.

use diesel::prelude::*;

use super::connection::{AnyConnection, first_locked};
use super::rows::AgentRow;
use super::schema::{agents, providers, runs, tasks};
use super::workspaces::{ensure_provider, ensure_workspace};
use super::{Db, Store, StoreError, or_exists, or_missing};
use crate::domain::{Agent, AgentKind, Name, ProviderKind, RunState, WorkspaceId, now_ms};

/// A user-defined agent to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAgent {
    pub name: Name,
    pub instructions: String,
    /// Tool names and `@profile` references.
    pub allowed_tools: Vec<String>,
    /// A provider of the workspace.
    pub provider: Option<Name>,
    pub model: Option<String>,
    /// `host:port` rules (see [`Agent::egress`]).
    pub egress: Vec<String>,
    /// The default budget of a task started with it.
    pub budget: crate::domain::Budget,
    /// What its calls need before they run.
    pub approval_rules: Vec<crate::domain::approval::Rule>,
}

/// Changes to an agent: `None` keeps a field, `Some(None)` clears it,
/// `Some(Some(v))` sets it. Name and kind do not change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentChanges {
    pub instructions: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
    pub provider: Option<Option<Name>>,
    pub model: Option<Option<String>>,
    pub egress: Option<Vec<String>>,
    pub budget: Option<crate::domain::Budget>,
    pub approval_rules: Option<Vec<crate::domain::approval::Rule>>,
}

impl Store {
    /// Creates a user-defined agent.
    pub async fn create_agent(
        &self,
        workspace: WorkspaceId,
        new: NewAgent,
    ) -> Result<Agent, StoreError> {
        let allowed_tools = Agent::normalize_allowed_tools(&new.allowed_tools);
        Agent::check_allowed_tools(&allowed_tools)?;
        Agent::check_instructions(&new.instructions)?;
        let egress = Agent::check_egress(&new.egress)?;
        crate::domain::check_budget(&new.budget)?;
        crate::domain::approval::check_rules(&new.approval_rules)?;
        self.write(move |conn| {
            ensure_workspace(conn, workspace)?;
            let now = now_ms();
            let agent = Agent {
                name: new.name,
                kind: AgentKind::UserDefined,
                instructions: new.instructions,
                allowed_tools,
                provider: new.provider,
                model: new.model,
                egress,
                budget: new.budget,
                approval_rules: new.approval_rules,
                created_ms: now,
                updated_ms: now,
            };
            if let Some(provider) = &agent.provider {
                ensure_provider(conn, workspace, provider)?;
                agent.check_provider_kind(
                    provider.as_str(),
                    provider_kind(conn, workspace, provider)?,
                )?;
            }
            or_exists(
                diesel::insert_into(agents::table)
                    .values(AgentRow::from_domain(workspace, &agent)?)
                    .execute(conn),
                "agent",
                &agent.name,
            )?;
            Ok(agent)
        })
        .await
    }

    pub async fn get_agent(&self, workspace: WorkspaceId, name: Name) -> Result<Agent, StoreError> {
        self.with_conn(move |conn| {
            let row = agents::table
                .find((workspace.to_string(), name.to_string()))
                .select(AgentRow::as_select())
                .first(conn)
                .optional()
                .db()?;
            found(conn, workspace, &name, row)?.into_domain()
        })
        .await
    }

    /// The workspace's agents, by name.
    pub async fn list_agents(&self, workspace: WorkspaceId) -> Result<Vec<Agent>, StoreError> {
        self.with_conn(move |conn| {
            ensure_workspace(conn, workspace)?;
            agents::table
                .filter(agents::workspace_id.eq(workspace.to_string()))
                .select(AgentRow::as_select())
                .order(agents::name)
                .load(conn)
                .db()?
                .into_iter()
                .map(AgentRow::into_domain)
                .collect()
        })
        .await
    }

    /// Applies `changes`: a new allow-list is checked against the catalog, a new
    /// provider must exist in the workspace. The tools and provider of an internal
    /// agent do not change.
    pub async fn update_agent(
        &self,
        workspace: WorkspaceId,
        name: Name,
        changes: AgentChanges,
    ) -> Result<Agent, StoreError> {
        let mut changes = changes;
        if let Some(tools) = &mut changes.allowed_tools {
            *tools = Agent::normalize_allowed_tools(tools);
            Agent::check_allowed_tools(tools)?;
        }
        if let Some(instructions) = &changes.instructions {
            Agent::check_instructions(instructions)?;
        }
        if let Some(egress) = &mut changes.egress {
            *egress = Agent::check_egress(egress)?;
        }
        if let Some(budget) = &changes.budget {
            crate::domain::check_budget(budget)?;
        }
        self.write(move |conn| {
            let key = (workspace.to_string(), name.to_string());
            let row = first_locked!(
                &mut *conn,
                agents::table
                    .find((&key.0, &key.1))
                    .select(AgentRow::as_select())
            )
            .db()?;
            let mut agent = found(conn, workspace, &name, row)?.into_domain()?;
            changes.check(&agent)?;
            if let Some(Some(provider)) = &changes.provider {
                ensure_provider(conn, workspace, provider)?;
            }
            changes.apply(&mut agent);
            if let Some(provider) = &agent.provider {
                agent.check_provider_kind(
                    provider.as_str(),
                    provider_kind(conn, workspace, provider)?,
                )?;
            }
            agent.updated_ms = now_ms().max(agent.updated_ms);
            let row = AgentRow::from_domain(workspace, &agent)?;
            let updated = diesel::update(agents::table.find((&key.0, &key.1)))
                .set((
                    agents::instructions.eq(&row.instructions),
                    agents::allowed_tools.eq(&row.allowed_tools),
                    agents::provider.eq(&row.provider),
                    agents::model.eq(&row.model),
                    agents::egress.eq(&row.egress),
                    agents::budget.eq(&row.budget),
                    agents::approval_rules.eq(&row.approval_rules),
                    agents::updated_ms.eq(row.updated_ms),
                ))
                .execute(conn);
            // The provider was deleted since it was checked.
            or_missing(
                updated,
                "provider",
                row.provider.as_deref().unwrap_or_default(),
            )?;
            Ok(agent)
        })
        .await
    }

    /// Deletes a user-defined agent. Internal agents cannot be deleted.
    pub async fn delete_agent(&self, workspace: WorkspaceId, name: Name) -> Result<(), StoreError> {
        self.write(move |conn| {
            let key = (workspace.to_string(), name.to_string());
            let row = agents::table
                .find((&key.0, &key.1))
                .select(AgentRow::as_select())
                .first(conn)
                .optional()
                .db()?;
            let agent = found(conn, workspace, &name, row)?.into_domain()?;
            agent.check_user_defined("it cannot be deleted")?;
            if let Some((run, task)) = run_going(conn, &key.0, &key.1)? {
                return Err(StoreError::AgentInUse {
                    agent: key.1,
                    run,
                    task,
                });
            }
            diesel::delete(agents::table.find((&key.0, &key.1)))
                .execute(conn)
                .db()?;
            Ok(())
        })
        .await
    }
}

/// A run of agent `agent` of workspace `workspace` that has not finished
/// (its id and its task's), if there is one.
fn run_going(
    conn: &mut AnyConnection,
    workspace: &str,
    agent: &str,
) -> Result<Option<(String, String)>, StoreError> {
    runs::table
        .inner_join(tasks::table)
        .filter(tasks::workspace_id.eq(workspace))
        .filter(runs::agent.eq(agent))
        .filter(runs::state.ne(RunState::Finished.as_str()))
        .select((runs::id, runs::task_id))
        .first(conn)
        .optional()
        .db()
}

/// The kind of the workspace's provider `name`.
fn provider_kind(
    conn: &mut AnyConnection,
    workspace: WorkspaceId,
    name: &Name,
) -> Result<ProviderKind, StoreError> {
    let kind: String = providers::table
        .filter(providers::workspace_id.eq(workspace.to_string()))
        .filter(providers::name.eq(name.as_str()))
        .select(providers::kind)
        .first(conn)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("provider", name))?;
    ProviderKind::parse(&kind).map_err(StoreError::from)
}

/// The row, or `NotFound` for the workspace (when it is missing) or the agent.
fn found(
    conn: &mut AnyConnection,
    workspace: WorkspaceId,
    name: &Name,
    row: Option<AgentRow>,
) -> Result<AgentRow, StoreError> {
    match row {
        Some(row) => Ok(row),
        None => {
            ensure_workspace(conn, workspace)?;
            Err(StoreError::not_found("agent", name))
        }
    }
}

impl AgentChanges {
    /// Only a user-defined agent's tools, provider and egress change.
    fn check(&self, agent: &Agent) -> Result<(), crate::domain::DomainError> {
        if self.allowed_tools.is_some() || self.provider.is_some() || self.egress.is_some() {
            agent.check_user_defined("its tools, provider and egress are fixed")?;
        }
        if let Some(rules) = &self.approval_rules {
            crate::domain::approval::check_rules(rules)?;
        }
        Ok(())
    }

    /// The agent with these changes (absent fields kept).
    fn apply(self, agent: &mut Agent) {
        if let Some(instructions) = self.instructions {
            agent.instructions = instructions;
        }
        if let Some(allowed_tools) = self.allowed_tools {
            agent.allowed_tools = allowed_tools;
        }
        if let Some(provider) = self.provider {
            agent.provider = provider;
        }
        if let Some(model) = self.model {
            agent.model = model;
        }
        if let Some(egress) = self.egress {
            agent.egress = egress;
        }
        if let Some(budget) = self.budget {
            agent.budget = budget;
        }
        if let Some(rules) = self.approval_rules {
            agent.approval_rules = rules;
        }
    }
}
