//! API keys and the run-token signing keys: made, revoked, rotated; the
//! authenticator's cache told at once.

use chorus_auth::{ApiKey, Role};
use tracing::info;

use crate::domain::{ApiKeyRecord, Name, now_ms};
use crate::error::ServiceError;
use crate::state::AppState;

/// Makes an API key of `role`: its record, and its secret (shown once: only
/// its hash is kept).
pub async fn create(
    state: &AppState,
    name: Name,
    role: Role,
) -> Result<(ApiKeyRecord, String), ServiceError> {
    let key = ApiKey::generate();
    let record = state
        .store
        .create_api_key(ApiKeyRecord {
            id: key.id().to_owned(),
            name,
            role,
            hash: key.hash(),
            created_ms: now_ms(),
            revoked_ms: None,
        })
        .await?;
    state.auth.made(&record.id).await;
    info!(key_id = %record.id, name = %record.name, role = %record.role, "api key created");
    Ok((record, key.expose().to_owned()))
}

/// Revokes the key `id`: refused from the next call on.
pub async fn revoke(state: &AppState, id: &str) -> Result<ApiKeyRecord, ServiceError> {
    let id = id.trim().to_ascii_lowercase();
    if id.is_empty() {
        return Err(ServiceError::Invalid(
            "id: name the key to revoke (ListApiKeys shows them)".to_owned(),
        ));
    }
    let record = state.store.revoke_api_key(id).await?;
    state.auth.forget(&record.id);
    info!(key_id = %record.id, name = %record.name, "api key revoked");
    Ok(record)
}

/// Rotates the run-token signing key (for every replica, with PostgreSQL).
pub async fn rotate_run_token_key(state: &AppState) -> Result<(), ServiceError> {
    let unusable = |e: chorus_run_token::KeyError| {
        ServiceError::Unavailable(format!("cannot rotate the run-token key: {e}"))
    };
    if state.store.backend() == crate::store::Backend::Postgres {
        let keys = state
            .store
            .rotate_run_token_keys(chorus_run_token::SharedKey::generate())
            .await?;
        state.signer.adopt(keys).map_err(unusable)?;
        info!(kid = %state.signer.current_kid(), "run-token signing key rotated for every replica");
    } else {
        let key = state.signer.rotate().map_err(unusable)?;
        info!(kid = %key.kid, "run-token signing key rotated");
    }
    Ok(())
}
