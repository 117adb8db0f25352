//! Checking API keys against the stored hashes, with a short cache so that a
//! busy caller (tool-exec's service key on every tool call) costs no query per
//! call. A revocation reaches this process's cache at once and any other
//! process's within [`CACHE_TTL`].
//!
//! An unknown key costs no query each either: the ids of all keys (they are
//! few) are held in memory. An id missing from them has the set read again
//! when it is older than [`KNOWN_IDS_FRESH`] (one read at a time); within
//! that time, the first [`LOOKUPS_PER_READ`] missing ids are looked up one by
//! one (a key just made elsewhere) and the rest refused at once. So a flood
//! of made-up keys costs at most `1 + LOOKUPS_PER_READ` queries per
//! [`KNOWN_IDS_FRESH`], and a key made on another replica is known at once
//! unless such a flood is on, else within that time.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chorus_auth::{ApiKey, Authenticator, Principal};
use chorus_run_token::{RunTokenVerifier, VerifiedToken};
use tonic::Status;

use crate::domain::ApiKeyRecord;
use crate::error::ServiceError;
use crate::store::{Store, StoreError};

/// How long a looked-up key is trusted without asking the store again.
pub const CACHE_TTL: Duration = Duration::from_secs(10);

/// How old the set of known key ids may be before an id missing from it has
/// it read again.
pub const KNOWN_IDS_FRESH: Duration = Duration::from_secs(1);

/// How many ids missing from a fresh set are looked up one by one before
/// the rest are refused until the next read.
pub const LOOKUPS_PER_READ: u32 = 10;

/// The ids of every stored key, as last read.
#[derive(Debug)]
struct KnownIds {
    ids: HashSet<String>,
    read: tokio::time::Instant,
    lookups_left: u32,
}

/// What the known ids say of an id.
enum Known {
    Yes,
    No,
    /// Not in the set, which is fresh: ask the store.
    Ask,
}

/// The orchestrator's [`Authenticator`]: API keys from the store, run tokens by
/// the signer's public keys.
#[derive(Debug)]
pub struct KeyAuthenticator {
    store: Store,
    verifier: RunTokenVerifier,
    cache: Mutex<HashMap<String, (ApiKeyRecord, Instant)>>,
    /// None until first read; held across a read, so reads are one at a time.
    known: tokio::sync::Mutex<Option<KnownIds>>,
    /// How often the known ids were read (tests count the queries).
    known_reads: AtomicU64,
}

impl KeyAuthenticator {
    pub fn new(store: Store, verifier: RunTokenVerifier) -> Self {
        Self {
            store,
            verifier,
            cache: Mutex::new(HashMap::new()),
            known: tokio::sync::Mutex::new(None),
            known_reads: AtomicU64::new(0),
        }
    }

    /// What the known ids say of `id` (see the module documentation).
    async fn known(&self, id: &str) -> Result<Known, ServiceError> {
        let mut known = self.known.lock().await;
        if let Some(k) = known.as_mut() {
            if k.ids.contains(id) {
                return Ok(Known::Yes);
            }
            if k.read.elapsed() < KNOWN_IDS_FRESH {
                if k.lookups_left == 0 {
                    return Ok(Known::No);
                }
                k.lookups_left -= 1;
                self.known_reads.fetch_add(1, Ordering::Relaxed);
                return Ok(Known::Ask);
            }
        }
        let ids: HashSet<String> = self
            .store
            .list_api_keys(true)
            .await?
            .into_iter()
            .map(|k| k.id)
            .collect();
        self.known_reads.fetch_add(1, Ordering::Relaxed);
        let found = ids.contains(id);
        *known = Some(KnownIds {
            ids,
            read: tokio::time::Instant::now(),
            lookups_left: LOOKUPS_PER_READ,
        });
        Ok(if found { Known::Yes } else { Known::No })
    }

    /// Adds a key made by this process to the known ids at once.
    pub async fn made(&self, id: &str) {
        if let Some(known) = self.known.lock().await.as_mut() {
            known.ids.insert(id.to_owned());
        }
    }

    /// How many queries the known ids cost: reads of the set and lookups of
    /// missing ids.
    pub fn known_reads(&self) -> u64 {
        self.known_reads.load(Ordering::Relaxed)
    }

    /// The principal of `key`; UNAUTHENTICATED for a key that is unknown, does
    /// not verify or is revoked.
    pub async fn principal(&self, key: &ApiKey) -> Result<Principal, ServiceError> {
        let record = match self.cached(key.id()) {
            Some(record) => record,
            None => {
                if let Known::No = self.known(key.id()).await? {
                    return Err(refused(format!(
                        "API key {} is not known to this deployment",
                        key.id()
                    )));
                }
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
                self.made(&record.id).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Name, now_ms};
    use crate::secrets::SecretBox;
    use chorus_auth::Role;

    async fn authenticator() -> (KeyAuthenticator, Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(
            &dir.path().join("chorus.db").display().to_string(),
            SecretBox::ephemeral(),
        )
        .await
        .expect("store");
        let verifier = chorus_run_token::RunTokenSigner::generate().verifier();
        (KeyAuthenticator::new(store.clone(), verifier), store, dir)
    }

    async fn stored(store: &Store, role: Role) -> ApiKey {
        let key = ApiKey::generate();
        store
            .create_api_key(ApiKeyRecord {
                id: key.id().to_owned(),
                name: Name::parse("name", &format!("k-{}", key.id())).expect("name"),
                role,
                hash: key.hash(),
                created_ms: now_ms(),
                revoked_ms: None,
            })
            .await
            .expect("stored");
        key
    }

    /// A flood of made-up keys costs one read of the known ids and a few
    /// lookups, not a query each; stored keys are still served — one made
    /// elsewhere at once while no flood is on, else once the set is read
    /// again.
    #[tokio::test(start_paused = true)]
    async fn made_up_keys_cost_no_query_each() {
        let (auth, store, _dir) = authenticator().await;
        let real = stored(&store, Role::Viewer).await;
        assert!(auth.principal(&real).await.is_ok());
        assert_eq!(auth.known_reads(), 1);
        // Made elsewhere after the read: looked up, and served.
        let elsewhere = stored(&store, Role::Operator).await;
        assert!(auth.principal(&elsewhere).await.is_ok());
        assert_eq!(auth.known_reads(), 2);
        for _ in 0..500 {
            let err = auth
                .principal(&ApiKey::generate())
                .await
                .expect_err("a made-up key");
            assert!(err.to_string().contains("is not known"), "{err}");
        }
        assert_eq!(auth.known_reads(), 1 + u64::from(LOOKUPS_PER_READ));
        assert!(auth.principal(&real).await.is_ok());
        // During the flood, a key made elsewhere waits for the next read.
        let during = stored(&store, Role::Operator).await;
        assert!(auth.principal(&during).await.is_err());
        tokio::time::advance(KNOWN_IDS_FRESH).await;
        assert!(auth.principal(&during).await.is_ok());
        assert_eq!(auth.known_reads(), 2 + u64::from(LOOKUPS_PER_READ));
    }
}
