//! API keys and run-token signing keys (admin).

use chorus_auth::ApiKey;
use chorus_proto::orchestrator::v1 as pb;
use tracing::info;

use crate::domain::{ApiKeyRecord, Name, now_ms};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

/// Makes a key; its whole text is answered once and only its hash is kept.
pub(super) async fn create(
    state: &AppState,
    req: pb::CreateApiKeyRequest,
) -> Result<pb::CreateApiKeyResponse, ServiceError> {
    let name = Name::parse("name", req.name.trim())?;
    let role = convert::role_from(req.role)?;
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
    Ok(pb::CreateApiKeyResponse {
        key: Some(convert::api_key(&record)),
        secret: key.expose().to_owned(),
    })
}

pub(super) async fn list(
    state: &AppState,
    req: pb::ListApiKeysRequest,
) -> Result<pb::ListApiKeysResponse, ServiceError> {
    let keys = state.store.list_api_keys(req.include_revoked).await?;
    Ok(pb::ListApiKeysResponse {
        keys: keys.iter().map(convert::api_key).collect(),
    })
}

/// Revokes a key: refused from now on (at once here, within the key cache's
/// lifetime on other replicas).
pub(super) async fn revoke(
    state: &AppState,
    req: pb::RevokeApiKeyRequest,
) -> Result<pb::ApiKey, ServiceError> {
    let id = req.id.trim().to_ascii_lowercase();
    if id.is_empty() {
        return Err(ServiceError::Invalid(
            "id: name the key to revoke (ListApiKeys shows them)".to_owned(),
        ));
    }
    let record = state.store.revoke_api_key(id).await?;
    state.auth.forget(&record.id);
    info!(key_id = %record.id, name = %record.name, "api key revoked");
    Ok(convert::api_key(&record))
}

/// A new current signing key; tokens the old one signed stay valid until they expire.
pub(super) async fn rotate(state: &AppState) -> Result<pb::RunTokenKeys, ServiceError> {
    let unusable = |e: chorus_run_token::KeyError| {
        ServiceError::Unavailable(format!("cannot rotate the run-token key: {e}"))
    };
    if state.store.backend() == crate::store::Backend::Postgres {
        // The set the replicas share: every replica is told.
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
    Ok(crate::grpc::agent_tools::run_token_keys(state))
}
