//! API keys and run-token signing keys (admin).

use chorus_proto::orchestrator::v1 as pb;

use crate::core::keys as core;
use crate::domain::Name;
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
    let (record, secret) = core::create(state, name, role).await?;
    Ok(pb::CreateApiKeyResponse {
        key: Some(convert::api_key(&record)),
        secret,
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
    Ok(convert::api_key(&core::revoke(state, &req.id).await?))
}

pub(super) async fn rotate(state: &AppState) -> Result<pb::RunTokenKeys, ServiceError> {
    core::rotate_run_token_key(state).await?;
    Ok(crate::grpc::agent_tools::run_token_keys(state))
}
