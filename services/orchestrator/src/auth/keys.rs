//! Checking API keys against the stored hashes, with a short cache so that a
//! busy caller (tool-exec's service key on every tool call) costs no query per
//! call. A revocation reaches this process's cache at once and any other
//! process's within [`CACHE_TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chorus_auth::{ApiKey, Authenticator, Principal};
use chorus_run_token::{RunTokenVerifier, VerifiedToken};
use tonic::Status;

use crate::domain::ApiKeyRecord;
use crate::error::ServiceError;
use crate::store::{Store, StoreError};

/// How long a looked-up key is trusted without asking the store again.
pub const CACHE_TTL: Duration = Duration::from_secs(10);

/// The orchestrator's [`Authenticator`]: API keys from the store, run tokens by
/// the signer's public keys.
#[derive(Debug)]
pub struct KeyAuthenticator {
    store: Store,
    verifier: RunTokenVerifier,
    cache: Mutex<HashMap<String, (ApiKeyRecord, Instant)>>,
}

impl KeyAuthenticator {
    pub fn new(store: Store, verifier: RunTokenVerifier) -> Self {
        Self {
            store,
            verifier,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The principal of `key`; UNAUTHENTICATED for a key that is unknown, does
    /// not verify or is revoked.
    pub async fn principal(&self, key: &ApiKey) -> Result<Principal, ServiceError> {
        let record = match self.cached(key.id()) {
            Some(record) => record,
            None => {
                let record = match self.store.get_api_key(key.id().to_owned()).await {
                    Ok(record) => record,
                    Err(StoreError::NotFound { .. }) => {
                        return Err(refused(format!(
                            "API key {} is not known to this deployment",
                            key.id()
                        )));
                    }
                    Err(e) => return Err(e.into()),
                };
                self.remember(record.clone());
                record
            }
        };
        if !key.matches(&record.hash) {
            return Err(refused(format!("API key {} does not verify", key.id())));
        }
        if !record.is_active() {
            return Err(refused(format!(
                "API key {} ('{}') was revoked; ask an admin for a new one",
                record.id, record.name
            )));
        }
        Ok(Principal::Key {
            id: record.id,
            name: record.name.to_string(),
            role: record.role,
        })
    }

    /// Drops a key from the cache (after it was revoked here).
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    fn cached(&self, id: &str) -> Option<ApiKeyRecord> {
        let cache = self.lock();
        let (record, at) = cache.get(id)?;
        (at.elapsed() < CACHE_TTL).then(|| record.clone())
    }

    fn remember(&self, record: ApiKeyRecord) {
        let mut cache = self.lock();
        // Keys are few; a cache that somehow grew large is simply started over.
        if cache.len() > 10_000 {
            cache.clear();
        }
        cache.insert(record.id.clone(), (record, Instant::now()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ApiKeyRecord, Instant)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn refused(message: String) -> ServiceError {
    ServiceError::BadCredential(message)
}

#[tonic::async_trait]
impl Authenticator for KeyAuthenticator {
    async fn api_key(&self, key: &ApiKey) -> Result<Principal, Status> {
        self.principal(key).await.map_err(Status::from)
    }

    async fn run_token(&self, token: &str) -> Result<VerifiedToken, Status> {
        self.verifier
            .verify_token(token)
            .map_err(|e| Status::from(ServiceError::from(e)))
    }
}
