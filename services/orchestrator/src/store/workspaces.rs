//! Workspaces: created with their default agents, renamed, given a system provider,
//! deleted with their providers and agents (never with tasks).

use diesel::prelude::*;

use super::connection::{AnyConnection, first_locked};
use super::rows::{AgentRow, WorkspaceRow};
use super::schema::{agents, providers, tasks, workspaces};
use super::{Db, Store, StoreError, or_exists};
use crate::domain::{Agent, DomainError, Name, Workspace, WorkspaceId, default_agents, now_ms};

impl Store {
    /// Creates a workspace on the directory `root` (absolute, existing; stored with
    /// symlinks resolved) and, in the same transaction, its default agents (no
    /// provider yet). Its system provider is set later with [`Store::update_workspace`],
    /// once the workspace has providers.
    pub async fn create_workspace(&self, name: Name, root: &str) -> Result<Workspace, StoreError> {
        let root = root.to_owned();
        // The file system is asked before the write lock is taken.
        let root = super::blocking(move || Ok(Workspace::check_root(&root)?)).await?;
        let root_text = root
            .to_str()
            .ok_or_else(|| {
                DomainError::invalid(
                    "workspace root",
                    format!("'{}' is not valid UTF-8", root.display()),
                )
            })?
            .to_owned();
        self.write(move |conn| {
            let now = now_ms();
            let workspace = Workspace {
                id: WorkspaceId::new(),
                name,
                root,
                system_provider: None,
                limits: crate::domain::WorkspaceLimits::default(),
                changes: crate::domain::WorkspaceChanges::default(),
                approval_rules: Vec::new(),
                created_ms: now,
                updated_ms: now,
            };
            let row = WorkspaceRow {
                id: workspace.id.to_string(),
                name: workspace.name.to_string(),
                root: root_text,
                system_provider: None,
                created_ms: now,
                updated_ms: now,
                limits: None,
                changes: None,
                approval_rules: None,
            };
            or_exists(
                diesel::insert_into(workspaces::table)
                    .values(&row)
                    .execute(conn),
                "workspace",
                &workspace.name,
            )?;
            for (name, kind, tools, instructions) in default_agents() {
                let agent = Agent {
                    name: Name::parse("agent name", name)?,
                    kind,
                    instructions: instructions.to_owned(),
                    allowed_tools: tools.into_iter().map(str::to_owned).collect(),
                    provider: None,
                    model: None,
                    egress: Vec::new(),
                    budget: crate::domain::Budget::default(),
                    approval_rules: Vec::new(),
                    created_ms: now,
                    updated_ms: now,
                };
                diesel::insert_into(agents::table)
                    .values(AgentRow::from_domain(workspace.id, &agent)?)
                    .execute(conn)
                    .db()?;
            }
            Ok(workspace)
        })
        .await
    }

    pub async fn get_workspace(&self, id: WorkspaceId) -> Result<Workspace, StoreError> {
        self.with_conn(move |conn| load_workspace(conn, id)).await
    }

    /// All workspaces, by name.
    pub async fn list_workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        self.with_conn(|conn| {
            workspaces::table
                .select(WorkspaceRow::as_select())
                .order(workspaces::name)
                .load(conn)
                .db()?
                .into_iter()
                .map(WorkspaceRow::into_domain)
                .collect()
        })
        .await
    }

    /// Renames a workspace and/or sets (`Some(Some(p))`) or clears (`Some(None)`) its
    /// system provider, which must be a provider of the workspace, and/or
    /// replaces its limits or how its tasks make their changes.
    pub async fn update_workspace(
        &self,
        id: WorkspaceId,
        name: Option<Name>,
        system_provider: Option<Option<Name>>,
        limits: Option<crate::domain::WorkspaceLimits>,
        changes: Option<crate::domain::WorkspaceChanges>,
        approval_rules: Option<Vec<crate::domain::approval::Rule>>,
    ) -> Result<Workspace, StoreError> {
        if let Some(rules) = &approval_rules {
            crate::domain::approval::check_rules(rules)?;
        }
        self.write(move |conn| {
            let current = load_workspace(conn, id)?;
            let key = id.to_string();
            if let Some(Some(provider)) = &system_provider {
                ensure_provider(conn, id, provider)?;
            }
            let now = now_ms().max(current.updated_ms);
            let target = workspaces::table.find(&key);
            if let Some(name) = &name {
                or_exists(
                    diesel::update(target)
                        .set(workspaces::name.eq(name.as_str()))
                        .execute(conn),
                    "workspace",
                    name,
                )?;
            }
            if let Some(provider) = &system_provider {
                diesel::update(target)
                    .set(workspaces::system_provider.eq(provider.as_ref().map(Name::as_str)))
                    .execute(conn)
                    .db()?;
            }
            if let Some(limits) = &limits {
                diesel::update(target)
                    .set(workspaces::limits.eq(super::rows::to_json(limits)?))
                    .execute(conn)
                    .db()?;
            }
            if let Some(changes) = &changes {
                diesel::update(target)
                    .set(workspaces::changes.eq(super::rows::to_json(changes)?))
                    .execute(conn)
                    .db()?;
            }
            if let Some(rules) = &approval_rules {
                diesel::update(target)
                    .set(workspaces::approval_rules.eq(super::rows::to_json(rules)?))
                    .execute(conn)
                    .db()?;
            }
            diesel::update(target)
                .set(workspaces::updated_ms.eq(now))
                .execute(conn)
                .db()?;
            load_workspace(conn, id)
        })
        .await
    }

    /// Deletes a workspace with its providers and agents. Refused while it has tasks.
    pub async fn delete_workspace(&self, id: WorkspaceId) -> Result<(), StoreError> {
        self.write(move |conn| {
            // Locked: a task created meanwhile waits, then fails on the foreign key.
            let key = id.to_string();
            let workspace = first_locked!(
                &mut *conn,
                workspaces::table
                    .find(&key)
                    .select(WorkspaceRow::as_select())
            )
            .db()?
            .ok_or_else(|| StoreError::not_found("workspace", id))?
            .into_domain()?;
            let task_count: i64 = tasks::table
                .filter(tasks::workspace_id.eq(&key))
                .count()
                .get_result(conn)
                .db()?;
            if task_count > 0 {
                return Err(StoreError::WorkspaceInUse {
                    workspace: workspace.name.to_string(),
                    tasks: u64::try_from(task_count).unwrap_or_default(),
                });
            }
            diesel::delete(workspaces::table.find(&key))
                .execute(conn)
                .db()?;
            Ok(())
        })
        .await
    }
}

pub(super) fn load_workspace(
    conn: &mut AnyConnection,
    id: WorkspaceId,
) -> Result<Workspace, StoreError> {
    workspaces::table
        .find(id.to_string())
        .select(WorkspaceRow::as_select())
        .first(conn)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("workspace", id))?
        .into_domain()
}

/// Fails with `NotFound` unless the workspace exists.
pub(super) fn ensure_workspace(
    conn: &mut AnyConnection,
    id: WorkspaceId,
) -> Result<(), StoreError> {
    let found: i64 = workspaces::table
        .filter(workspaces::id.eq(id.to_string()))
        .count()
        .get_result(conn)
        .db()?;
    if found == 0 {
        return Err(StoreError::not_found("workspace", id));
    }
    Ok(())
}

/// Fails with `NotFound` unless the workspace has a provider of that name.
pub(super) fn ensure_provider(
    conn: &mut AnyConnection,
    workspace: WorkspaceId,
    name: &Name,
) -> Result<(), StoreError> {
    let found: i64 = providers::table
        .filter(providers::workspace_id.eq(workspace.to_string()))
        .filter(providers::name.eq(name.as_str()))
        .count()
        .get_result(conn)
        .db()?;
    if found == 0 {
        return Err(StoreError::not_found("provider", name));
    }
    Ok(())
}
