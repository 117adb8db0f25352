//! Providers: where a workspace's agents get their models, with their keys
//! (stored sealed, or a reference to a file or variable the deployment
//! allows).

use crate::domain::{Name, Provider, ProviderKey, ProviderKind, WorkspaceId};
use crate::error::ServiceError;
use crate::state::AppState;
use crate::store::{NewProvider, ProviderChanges};

/// A key reference must point where the deployment allows
/// (`--key-reference-dirs`, never Chorus's own data).
fn check_key(state: &AppState, key: Option<&ProviderKey>) -> Result<(), ServiceError> {
    if let Some(ProviderKey::Reference(reference)) = key {
        reference.check(&state.key_references)?;
    }
    Ok(())
}

/// A remote A2A agent's card must be there, and fit: fetched and checked
/// before the provider is stored.
async fn check_remote(
    state: &AppState,
    kind: ProviderKind,
    base_url: Option<&str>,
) -> Result<(), ServiceError> {
    if kind != ProviderKind::A2a {
        return Ok(());
    }
    Provider::check(kind, base_url, None, false)?;
    let base_url = base_url.unwrap_or_default();
    crate::providers::a2a::fetch_card(state.runner.http(), base_url)
        .await
        .map(|_| ())
        .map_err(|why| ServiceError::Precondition(format!("the remote agent: {why}")))
}

/// Creates a provider of `workspace`.
pub async fn create(
    state: &AppState,
    workspace: WorkspaceId,
    new: NewProvider,
) -> Result<Provider, ServiceError> {
    check_key(state, new.api_key.as_ref())?;
    check_remote(state, new.kind, new.base_url.as_deref()).await?;
    Ok(state.store.create_provider(workspace, new).await?)
}

/// Changes a provider of `workspace`.
pub async fn update(
    state: &AppState,
    workspace: WorkspaceId,
    name: Name,
    changes: ProviderChanges,
) -> Result<Provider, ServiceError> {
    check_key(state, changes.api_key.as_ref().and_then(Option::as_ref))?;
    let current = state.store.get_provider(workspace, name.clone()).await?;
    if let Some(base_url) = &changes.base_url {
        check_remote(state, current.kind, base_url.as_deref()).await?;
    }
    Ok(state
        .store
        .update_provider(workspace, name, changes)
        .await?)
}
