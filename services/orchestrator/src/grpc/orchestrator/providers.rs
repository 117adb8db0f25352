//! Providers of a workspace. The API key is write-only: requests may set or clear
//! it — the key itself, or a reference `env:NAME` / `file:/path` resolved when a
//! run starts — and answers say only where it comes from.

use chorus_proto::orchestrator::v1 as pb;

use crate::domain::{Name, ProviderKey, WorkspaceId};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;
use crate::store::{NewProvider, ProviderChanges};

/// A request's API key: "" is none; a reference may not point at Chorus's own
/// secrets (the data directory, the secrets key, `CHORUS_*` variables).
/// A key as given: empty for none, else a secret or a reference.
fn api_key(text: String) -> Result<Option<ProviderKey>, ServiceError> {
    convert::non_empty(text)
        .map(|text| ProviderKey::parse(&text))
        .transpose()
        .map_err(Into::into)
}

/// The workspace id and provider name every per-provider request carries.
fn key(workspace_id: &str, name: &str) -> Result<(WorkspaceId, Name), ServiceError> {
    Ok((
        convert::workspace_id("workspace_id", workspace_id)?,
        Name::parse("name", name)?,
    ))
}

pub(super) async fn create(
    state: &AppState,
    req: pb::CreateProviderRequest,
) -> Result<pb::Provider, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    let new = NewProvider {
        name,
        kind: convert::provider_kind_from(req.kind)?,
        base_url: convert::non_empty(req.base_url),
        model: convert::non_empty(req.model),
        api_key: api_key(req.api_key)?,
        tool_transport: convert::tool_transport_from(req.tool_transport)?.unwrap_or_default(),
    };
    let provider = crate::core::providers::create(state, workspace, new).await?;
    Ok(convert::provider(&workspace.to_string(), &provider))
}

pub(super) async fn get(
    state: &AppState,
    req: pb::GetProviderRequest,
) -> Result<pb::Provider, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    let provider = state.store.get_provider(workspace, name).await?;
    Ok(convert::provider(&workspace.to_string(), &provider))
}

pub(super) async fn list(
    state: &AppState,
    req: pb::ListProvidersRequest,
) -> Result<pb::ListProvidersResponse, ServiceError> {
    let workspace = convert::workspace_id("workspace_id", &req.workspace_id)?;
    let providers = state.store.list_providers(workspace).await?;
    let workspace = workspace.to_string();
    Ok(pb::ListProvidersResponse {
        providers: providers
            .iter()
            .map(|p| convert::provider(&workspace, p))
            .collect(),
    })
}

pub(super) async fn update(
    state: &AppState,
    req: pb::UpdateProviderRequest,
) -> Result<pb::Provider, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    // Each field: absent keeps it, "" clears it, anything else sets it.
    let changes = ProviderChanges {
        base_url: req.base_url.map(convert::non_empty),
        model: req.model.map(convert::non_empty),
        api_key: req.api_key.map(api_key).transpose()?,
        tool_transport: convert::tool_transport_from(req.tool_transport)?,
    };
    let provider = crate::core::providers::update(state, workspace, name, changes).await?;
    Ok(convert::provider(&workspace.to_string(), &provider))
}

pub(super) async fn delete(
    state: &AppState,
    req: pb::DeleteProviderRequest,
) -> Result<pb::DeleteProviderResponse, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    state.store.delete_provider(workspace, name).await?;
    Ok(pb::DeleteProviderResponse {})
}
