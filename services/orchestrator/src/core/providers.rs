//! Providers: where a workspace's agents get their models, with their keys
//! (stored sealed, or a reference to a file or variable the deployment
//! allows).

use crate::domain::{Name, Provider, ProviderKey, WorkspaceId};
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

/// Creates a provider of `workspace`.
pub async fn create(
    state: &AppState,
    workspace: WorkspaceId,
    new: NewProvider,
) -> Result<Provider, ServiceError> {
    check_key(state, new.api_key.as_ref())?;
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
    Ok(state
        .store
        .update_provider(workspace, name, changes)
        .await?)
}
