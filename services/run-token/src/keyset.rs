//! The orchestrator's signing keys: a set with one current key, kept in one
//! owner-only file of the data directory, rotated without a restart.
//!
//! A rotation makes a new current key and retires the old one. A retired key
//! signs nothing more but is still published, so tokens it signed stay valid
//! until they expire; it is dropped [`MAX_TOKEN_TTL`] after its retirement.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use crate::keys::{self, KeyError, KeyPair};
use crate::{
    AUDIENCE, Claims, ISSUER, MAX_TOKEN_TTL, RunGrant, RunTokenVerifier, now_ms, unix_now,
};

/// File of the key set in a data directory (mode 0600).
pub const KEY_SET_FILE: &str = "run-token-keys.json";
/// File with the public keys of the set (PEM blocks), for a tool-exec given
/// `--public-key` instead of fetching keys from the orchestrator.
pub const PUBLIC_KEY_FILE: &str = "run-token.pub";
/// The single private key file of earlier versions, adopted into the set.
const LEGACY_PRIVATE_KEY_FILE: &str = "run-token.key";

/// A key of a set with its private half, as replicas sharing a database
/// keep it there (sealed).
#[derive(Clone, PartialEq, Eq)]
pub struct SharedKey {
    pub kid: String,
    /// PKCS#8 PEM.
    pub private_pem: String,
    pub created_ms: i64,
    /// When it stopped signing; None for the current key.
    pub retired_ms: Option<i64>,
}

impl std::fmt::Debug for SharedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKey")
            .field("kid", &self.kid)
            .field("created_ms", &self.created_ms)
            .field("retired_ms", &self.retired_ms)
            .finish_non_exhaustive()
    }
}

impl SharedKey {
    /// A fresh key, current from now.
    pub fn generate() -> Self {
        let pair = keys::generate();
        Self {
            kid: pair.kid,
            private_pem: pair.private_pem,
            created_ms: now_ms(),
            retired_ms: None,
        }
    }
}

/// A published public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub kid: String,
    /// SPKI PEM.
    pub pem: String,
    pub created_ms: i64,
    /// When it stopped signing; None for the current key.
    pub retired_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredKey {
    kid: String,
    private_pem: String,
    created_ms: i64,
    retired_ms: Option<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoredSet {
    keys: Vec<StoredKey>,
}

struct Entry {
    pair: KeyPair,
    encoding: EncodingKey,
    created_ms: i64,
    retired_ms: Option<i64>,
}

impl Entry {
    fn new(pair: KeyPair, created_ms: i64, retired_ms: Option<i64>) -> Result<Self, KeyError> {
        let encoding = EncodingKey::from_ed_pem(pair.private_pem.as_bytes())
            .map_err(|e| KeyError::Invalid(e.to_string()))?;
        Ok(Self {
            pair,
            encoding,
            created_ms,
            retired_ms,
        })
    }

    fn public(&self) -> PublicKey {
        PublicKey {
            kid: self.pair.kid.clone(),
            pem: self.pair.public_pem.clone(),
            created_ms: self.created_ms,
            retired_ms: self.retired_ms,
        }
    }
}

/// Mints run tokens with the current key of a key set.
pub struct RunTokenSigner {
    /// Oldest first; the last one is current.
    keys: RwLock<Vec<Entry>>,
    /// Where the set is saved; None: in memory only.
    files: Option<Files>,
    /// Shares its keys with every verifier handed out, so a rotation reaches them.
    verifier: RunTokenVerifier,
}

impl std::fmt::Debug for RunTokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTokenSigner")
            .field("file", &self.files.as_ref().map(|f| &f.set))
            .finish_non_exhaustive()
    }
}

impl RunTokenSigner {
    /// A signer with one fresh random key, kept in memory.
    pub fn generate() -> Self {
        let entry =
            Entry::new(keys::generate(), now_ms(), None).expect("a freshly generated key is valid");
        Self::from_entries(vec![entry], None)
    }

    /// A signer with one key from a PKCS#8 PEM private key, kept in memory.
    pub fn from_private_pem(pem: &str) -> Result<Self, KeyError> {
        let entry = Entry::new(keys::from_private_pem(pem)?, now_ms(), None)?;
        Ok(Self::from_entries(vec![entry], None))
    }

    fn from_entries(entries: Vec<Entry>, files: Option<Files>) -> Self {
        let verifier = RunTokenVerifier::with_keys(publics(&entries));
        Self {
            keys: RwLock::new(entries),
            files,
            verifier,
        }
    }

    /// A verifier of this signer's tokens; it follows rotations.
    pub fn verifier(&self) -> RunTokenVerifier {
        self.verifier.clone()
    }

    /// The id of the key new tokens are signed with.
    pub fn current_kid(&self) -> String {
        self.read(|keys| current(keys).pair.kid.clone())
    }

    /// The SPKI PEM public key of the current key.
    pub fn public_pem(&self) -> String {
        self.read(|keys| current(keys).pair.public_pem.clone())
    }

    /// Every key a valid token may be signed with: the current one and those
    /// retired less than [`MAX_TOKEN_TTL`] ago. Oldest first.
    pub fn public_keys(&self) -> Vec<PublicKey> {
        self.read(|keys| keys.iter().map(Entry::public).collect())
    }

    /// Mints a token for `grant` that expires after `ttl` (at most
    /// [`MAX_TOKEN_TTL`], at least a second).
    pub fn mint(&self, grant: &RunGrant, ttl: Duration) -> String {
        let ttl = ttl.clamp(Duration::from_secs(1), MAX_TOKEN_TTL);
        self.mint_until(grant, SystemTime::now() + ttl)
    }

    /// Mints a token for `grant` that expires at `expires_at` (whole seconds; a
    /// time in the past gives a token every verifier refuses as expired).
    pub fn mint_until(&self, grant: &RunGrant, expires_at: SystemTime) -> String {
        let claims = Claims {
            grant: grant.clone(),
            iss: ISSUER.to_owned(),
            aud: AUDIENCE.to_owned(),
            iat: unix_now(),
            exp: expires_at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        self.read(|keys| {
            let key = current(keys);
            let mut header = Header::new(Algorithm::EdDSA);
            header.kid = Some(key.pair.kid.clone());
            jsonwebtoken::encode(&header, &claims, &key.encoding)
                .expect("signing serializable claims with a valid Ed25519 key cannot fail")
        })
    }

    /// Makes a new current key; the old one is retired (it still verifies the
    /// tokens it signed) and keys retired over [`MAX_TOKEN_TTL`] ago are dropped.
    /// The set is saved before it is used, so a failed save changes nothing.
    pub fn rotate(&self) -> Result<PublicKey, KeyError> {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let now = now_ms();
        let mut next: Vec<Entry> = Vec::with_capacity(keys.len() + 1);
        for entry in keys.iter() {
            let retired_ms = entry.retired_ms.or(Some(now));
            next.push(Entry::new(
                entry.pair.clone(),
                entry.created_ms,
                retired_ms,
            )?);
        }
        next.push(Entry::new(keys::generate(), now, None)?);
        prune(&mut next, now);
        if let Some(files) = &self.files {
            save(files, &next)?;
        }
        *keys = next;
        self.verifier.replace(publics(&keys));
        Ok(current(&keys).public())
    }

    /// The keys with their private halves, oldest first (the current one
    /// last): what replicas sharing a database store there.
    pub fn export(&self) -> Vec<SharedKey> {
        self.read(|keys| {
            keys.iter()
                .map(|e| SharedKey {
                    kid: e.pair.kid.clone(),
                    private_pem: e.pair.private_pem.clone(),
                    created_ms: e.created_ms,
                    retired_ms: e.retired_ms,
                })
                .collect()
        })
    }

    /// Uses `shared` (a set kept elsewhere: the database replicas share)
    /// instead of this signer's keys; its verifiers follow. The set's file,
    /// if any, is left as it is. Keys retired over [`MAX_TOKEN_TTL`] ago are
    /// dropped; the newest key not retired is current.
    ///
    /// # Errors
    /// A key does not parse, or none is current; nothing changes then.
    pub fn adopt(&self, shared: Vec<SharedKey>) -> Result<(), KeyError> {
        let mut next = shared
            .into_iter()
            .map(|k| {
                Entry::new(
                    keys::from_private_pem(&k.private_pem)?,
                    k.created_ms,
                    k.retired_ms,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        prune(&mut next, now_ms());
        // Retired keys first (oldest first), the current one last.
        next.sort_by_key(|e| (e.retired_ms.is_none(), e.created_ms));
        if next.last().is_none_or(|e| e.retired_ms.is_some()) {
            return Err(KeyError::Invalid(
                "the shared key set has no current key".to_owned(),
            ));
        }
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        *keys = next;
        self.verifier.replace(publics(&keys));
        Ok(())
    }

    fn read<T>(&self, f: impl FnOnce(&[Entry]) -> T) -> T {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        f(&keys)
    }

    /// The private key of the current key (tests that forge tokens).
    #[doc(hidden)]
    pub fn current_private_pem(&self) -> String {
        self.read(|keys| current(keys).pair.private_pem.clone())
    }
}

fn current(keys: &[Entry]) -> &Entry {
    keys.last().expect("a key set always has a current key")
}

fn publics(keys: &[Entry]) -> Vec<(String, String)> {
    keys.iter()
        .map(|e| (e.pair.kid.clone(), e.pair.public_pem.clone()))
        .collect()
}

/// Drops keys retired more than [`MAX_TOKEN_TTL`] before `now`.
fn prune(keys: &mut Vec<Entry>, now: i64) {
    let keep_ms = i64::try_from(MAX_TOKEN_TTL.as_millis()).unwrap_or(i64::MAX);
    keys.retain(|e| e.retired_ms.is_none_or(|retired| now - retired < keep_ms));
}

/// Where a key set is kept.
#[derive(Debug, Clone)]
struct Files {
    /// The set, private keys included (0600).
    set: PathBuf,
    /// The public keys as PEM blocks (0644); None: not written.
    public: Option<PathBuf>,
    /// The single private key file of earlier versions, adopted into the set.
    legacy: Option<PathBuf>,
}

/// Loads the key set of the data directory `dir` ([`KEY_SET_FILE`]), or
/// creates it with one key (an older single key file is adopted as the first
/// key). The set file is 0600 and the directory is created 0700; the public
/// keys are written to [`PUBLIC_KEY_FILE`] beside it.
pub fn load_or_create_signer(dir: &Path) -> Result<RunTokenSigner, KeyError> {
    load(Files {
        set: dir.join(KEY_SET_FILE),
        public: Some(dir.join(PUBLIC_KEY_FILE)),
        legacy: Some(dir.join(LEGACY_PRIVATE_KEY_FILE)),
    })
}

/// Loads the key set in `file` (placed apart from the data directory, e.g. a
/// mounted secret), or creates it there (0600, its directory 0700) with one
/// key. No public key file is written beside it. A set that cannot be
/// written (a read-only mount) is used as it is; rotating it then fails,
/// naming the file.
pub fn load_or_create_signer_file(file: &Path) -> Result<RunTokenSigner, KeyError> {
    load(Files {
        set: file.to_owned(),
        public: None,
        legacy: None,
    })
}

fn load(files: Files) -> Result<RunTokenSigner, KeyError> {
    let path = &files.set;
    let mut entries = match fs::read_to_string(path) {
        Ok(text) => {
            let stored: StoredSet = serde_json::from_str(&text).map_err(|e| {
                KeyError::Invalid(format!("{} is not a key set: {e}", path.display()))
            })?;
            stored
                .keys
                .into_iter()
                .map(|k| {
                    let pair = keys::from_private_pem(&k.private_pem)?;
                    Entry::new(pair, k.created_ms, k.retired_ms)
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(KeyError::Read {
                path: path.clone(),
                source,
            });
        }
    };
    let mut changed = false;
    if entries.is_empty() {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_dir(dir)?;
        }
        let legacy = files
            .legacy
            .as_ref()
            .and_then(|l| fs::read_to_string(l).ok());
        let pair = match legacy {
            Some(pem) => keys::from_private_pem(&pem)?,
            None => keys::generate(),
        };
        entries.push(Entry::new(pair, now_ms(), None)?);
        changed = true;
    }
    let before = entries.len();
    prune(&mut entries, now_ms());
    if changed || entries.len() != before {
        save(&files, &entries)?;
    }
    if entries.last().is_none_or(|e| e.retired_ms.is_some()) {
        return Err(KeyError::Invalid(format!(
            "{} has no current key (every key is retired)",
            path.display()
        )));
    }
    write_public_keys(&files, &entries)?;
    if let Some(legacy) = &files.legacy {
        let _ = fs::remove_file(legacy);
    }
    Ok(RunTokenSigner::from_entries(entries, Some(files)))
}

fn create_dir(dir: &Path) -> Result<(), KeyError> {
    let io = |source| KeyError::Write {
        path: dir.to_owned(),
        source,
    };
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    Ok(())
}

/// Writes the set atomically (a temporary file renamed over it), owner-only.
fn save(files: &Files, keys: &[Entry]) -> Result<(), KeyError> {
    let stored = StoredSet {
        keys: keys
            .iter()
            .map(|e| StoredKey {
                kid: e.pair.kid.clone(),
                private_pem: e.pair.private_pem.clone(),
                created_ms: e.created_ms,
                retired_ms: e.retired_ms,
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&stored)
        .map_err(|e| KeyError::Invalid(format!("cannot encode the key set: {e}")))?;
    write_atomic(&files.set, &text, 0o600)?;
    write_public_keys(files, keys)
}

fn write_public_keys(files: &Files, keys: &[Entry]) -> Result<(), KeyError> {
    let Some(public) = &files.public else {
        return Ok(());
    };
    let text: String = keys.iter().map(|e| e.pair.public_pem.as_str()).collect();
    write_atomic(public, &text, 0o644)
}

fn write_atomic(path: &Path, content: &str, mode: u32) -> Result<(), KeyError> {
    let io = |source| KeyError::Write {
        path: path.to_owned(),
        source,
    };
    let temp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)
        .map_err(io)?;
    file.write_all(content.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs::set_permissions(&temp, fs::Permissions::from_mode(mode)).map_err(io)?;
    fs::rename(&temp, path).map_err(io)
}
