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
