//! Secrets at rest ([decision 0015](../../../docs/decisions/0015-secrets-at-rest.md)):
//! the key that encrypts provider API keys in the database (`key`), the sealed
//! format the store writes (`sealed`), and the references (`env:NAME`,
//! `file:/path`) the orchestrator resolves when a run starts (`reference`).

mod key;
mod reference;
mod sealed;

pub use key::{KeySource, LoadedKey, SECRETS_KEY_FILE, SECRETS_KEY_VAR, SecretsError, load};
pub use reference::{ReferenceError, resolve};
pub use sealed::{OpenError, SEALED_PREFIX, SecretBox};

use tracing::{info, warn};

use crate::store::Store;

/// Opens the store with provider keys sealed by the key `source` names, at
/// start: says which key is used (and that a new one was made), seals the keys
/// an earlier version stored in clear (one transaction, logged with a count),
/// and warns about stored keys this key does not open — runs with those
/// providers fail to start until the right key is given or the key is set again.
///
/// # Errors
/// The key cannot be had, or the store cannot be opened or written.
pub async fn open_store(url: &str, source: &KeySource) -> anyhow::Result<Store> {
    let loaded = load(source)?;
    let origin = loaded.secrets.origin().to_owned();
    if loaded.created {
        info!(key = %origin, "made a new secrets key for provider API keys; back it up: without it the stored keys cannot be read");
    }
    info!(key = %origin, "provider API keys are encrypted at rest with {origin}");
    let store = Store::open(url, loaded.secrets).await?;
    let sealed = store.seal_plain_api_keys().await?;
    if sealed > 0 {
        info!(
            count = sealed,
            "encrypted {sealed} provider API key(s) an earlier version stored in clear text"
        );
    }
    let unreadable = store.undecryptable_api_keys().await?;
    if !unreadable.is_empty() {
        warn!(
            count = unreadable.len(),
            providers = %unreadable.join(", "),
            "{} stored provider API key(s) do not decrypt with {origin}; runs with those providers will not start: give the key they were stored with, or set them again with UpdateProvider",
            unreadable.len()
        );
    }
    Ok(store)
}
