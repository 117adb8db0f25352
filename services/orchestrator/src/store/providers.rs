//! Providers of a workspace. The API key is write-only: [`Provider`] says only
//! where it comes from; [`Store::provider_api_key`] is the one way to read it.
//! A key itself is sealed for its row ([`super::provider_keys`]); a reference is
//! kept as written.

use diesel::prelude::*;

use super::connection::{AnyConnection, first_locked};
use super::provider_keys::{decode, encode};
use super::rows::ProviderRow;
use super::schema::{agents, providers};
use super::workspaces::{ensure_workspace, load_workspace};
use super::{Db, Store, StoreError, or_exists};
use crate::domain::{
    Name, Provider, ProviderKey, ProviderKind, ToolTransport, WorkspaceId, now_ms,
};

/// A provider to create. Its `Debug` hides the API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProvider {
    pub name: Name,
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<ProviderKey>,
    pub tool_transport: ToolTransport,
}

/// Changes to a provider: `None` keeps a field, `Some(None)` clears it,
/// `Some(Some(v))` sets it. Name and kind do not change. Its `Debug` hides the API key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderChanges {
    pub base_url: Option<Option<String>>,
    pub model: Option<Option<String>>,
    pub api_key: Option<Option<ProviderKey>>,
    pub tool_transport: Option<ToolTransport>,
}

impl Store {
    pub async fn create_provider(
        &self,
        workspace: WorkspaceId,
        new: NewProvider,
    ) -> Result<Provider, StoreError> {
        Provider::check(
            new.kind,
            new.base_url.as_deref(),
            new.model.as_deref(),
            new.api_key.is_some(),
        )?;
        Provider::check_transport(new.kind, new.tool_transport)?;
        let secrets = self.secrets.clone();
        self.write(move |conn| {
            ensure_workspace(conn, workspace)?;
            let now = now_ms();
            let (workspace_id, name) = (workspace.to_string(), new.name.to_string());
            let api_key = new
                .api_key
                .map(|key| encode(&secrets, &workspace_id, &name, &key));
            let row = ProviderRow {
                workspace_id,
                name,
                kind: new.kind.as_str().to_owned(),
                base_url: new.base_url,
                model: new.model,
                api_key,
                created_ms: now,
                updated_ms: now,
                tool_transport: new.tool_transport.as_str().to_owned(),
            };
            or_exists(
                diesel::insert_into(providers::table)
                    .values(&row)
                    .execute(conn),
                "provider",
                &new.name,
            )?;
            row.into_domain()
        })
        .await
    }

    pub async fn get_provider(
        &self,
        workspace: WorkspaceId,
        name: Name,
    ) -> Result<Provider, StoreError> {
        self.with_conn(move |conn| load_provider(conn, workspace, &name)?.into_domain())
            .await
    }

    /// The workspace's providers, by name.
    pub async fn list_providers(
        &self,
        workspace: WorkspaceId,
    ) -> Result<Vec<Provider>, StoreError> {
        self.with_conn(move |conn| {
            ensure_workspace(conn, workspace)?;
            providers::table
                .filter(providers::workspace_id.eq(workspace.to_string()))
                .select(ProviderRow::as_select())
                .order(providers::name)
                .load(conn)
                .db()?
                .into_iter()
                .map(ProviderRow::into_domain)
                .collect()
        })
        .await
    }

    /// Applies `changes` and checks the result against the provider rules.
    pub async fn update_provider(
        &self,
        workspace: WorkspaceId,
        name: Name,
        changes: ProviderChanges,
    ) -> Result<Provider, StoreError> {
        let secrets = self.secrets.clone();
        self.write(move |conn| {
            let key = (workspace.to_string(), name.to_string());
            let mut row: ProviderRow = first_locked!(
                &mut *conn,
                providers::table
                    .find((&key.0, &key.1))
                    .select(ProviderRow::as_select())
            )
            .db()?
            .ok_or_else(|| StoreError::not_found("provider", &name))?;
            let ProviderChanges {
                base_url,
                model,
                api_key,
                tool_transport,
            } = changes;
            if let Some(transport) = tool_transport {
                row.tool_transport = transport.as_str().to_owned();
            }
            if let Some(base_url) = base_url {
                row.base_url = base_url;
            }
            if let Some(model) = model {
                row.model = model;
            }
            if let Some(api_key) = api_key {
                row.api_key = api_key.map(|new| encode(&secrets, &key.0, &key.1, &new));
            }
            let kind = ProviderKind::parse(&row.kind).map_err(|e| StoreError::Corrupt {
                what: "provider",
                key: format!("{}/{}", key.0, key.1),
                reason: e.to_string(),
            })?;
            Provider::check(
                kind,
                row.base_url.as_deref(),
                row.model.as_deref(),
                row.api_key.is_some(),
            )?;
            if let Some(transport) = tool_transport {
                Provider::check_transport(kind, transport)?;
            }
            row.updated_ms = now_ms().max(row.updated_ms);
            diesel::update(providers::table.find((&key.0, &key.1)))
                .set((
                    providers::base_url.eq(&row.base_url),
                    providers::model.eq(&row.model),
                    providers::api_key.eq(&row.api_key),
                    providers::tool_transport.eq(&row.tool_transport),
                    providers::updated_ms.eq(row.updated_ms),
                ))
                .execute(conn)
                .db()?;
            row.into_domain()
        })
        .await
    }

    /// Deletes a provider no agent uses and that is not the workspace's system
    /// provider; otherwise [`StoreError::ProviderInUse`] names its users.
    pub async fn delete_provider(
        &self,
        workspace: WorkspaceId,
        name: Name,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            let ws = load_workspace(conn, workspace)?;
            load_provider(conn, workspace, &name)?;
            let users: Vec<String> = agents::table
                .filter(agents::workspace_id.eq(workspace.to_string()))
                .filter(agents::provider.eq(name.as_str()))
                .select(agents::name)
                .order(agents::name)
                .load(conn)
                .db()?;
            let system_provider = ws.system_provider.as_ref() == Some(&name);
            if !users.is_empty() || system_provider {
                return Err(StoreError::ProviderInUse {
                    provider: name.to_string(),
                    agents: users,
                    system_provider,
                });
            }
            let deleted =
                diesel::delete(providers::table.find((workspace.to_string(), name.to_string())))
                    .execute(conn);
            match deleted {
                // An agent or the workspace took it up since the check above.
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::ForeignKeyViolation,
                    _,
                )) => Err(StoreError::ProviderInUse {
                    provider: name.to_string(),
                    agents: Vec::new(),
                    system_provider: false,
                }),
                other => other.db().map(drop),
            }
        })
        .await
    }

    /// The provider's API key, for the agent runner only: opened, or the
    /// reference to resolve. `None` when none is set.
    ///
    /// # Errors
    /// [`StoreError::Undecryptable`] when the stored key does not open with
    /// this store's secrets key (another key, or a value moved from another row).
    pub async fn provider_api_key(
        &self,
        workspace: WorkspaceId,
        name: Name,
    ) -> Result<Option<ProviderKey>, StoreError> {
        let secrets = self.secrets.clone();
        self.with_conn(move |conn| {
            let row = load_provider(conn, workspace, &name)?;
            row.api_key
                .map(|text| decode(&secrets, &row.workspace_id, &row.name, &text))
                .transpose()
        })
        .await
    }
}

fn load_provider(
    conn: &mut AnyConnection,
    workspace: WorkspaceId,
    name: &Name,
) -> Result<ProviderRow, StoreError> {
    let row = providers::table
        .find((workspace.to_string(), name.to_string()))
        .select(ProviderRow::as_select())
        .first(conn)
        .optional()
        .db()?;
    match row {
        Some(row) => Ok(row),
        None => {
            ensure_workspace(conn, workspace)?;
            Err(StoreError::not_found("provider", name))
        }
    }
}
