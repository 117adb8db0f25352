//! How a provider's API key is kept in `providers.api_key`:
//!
//! - `enc:v1:<base64>` — the key, sealed by [`SecretBox`] for its row (the
//!   workspace id and provider name are the associated data);
//! - `env:NAME`, `file:/path` — a reference, as written (not a secret);
//! - `plain:<key>` — a key stored in clear by an earlier version, marked so by
//!   the `secrets` migration and sealed by [`Store::seal_plain_api_keys`] on the
//!   first start with this version.

use diesel::prelude::*;

use super::connection::{AnyConnection, truncate_wal};
use super::schema::providers;
use super::{Db, Store, StoreError};
use crate::domain::{KeyReference, KeySource, ProviderKey};
use crate::secrets::{OpenError, SecretBox};

/// Marks a key an earlier version stored in clear (see the `secrets` migration).
const PLAIN_PREFIX: &str = "plain:";

/// The associated data that binds a sealed key to its row: a value copied to
/// another provider, or to the same name in another workspace, does not open.
fn bound_to(workspace_id: &str, name: &str) -> Vec<u8> {
    format!("chorus provider api key\0{workspace_id}\0{name}").into_bytes()
}

/// The column's text for `key`, on the row (`workspace_id`, `name`).
pub(super) fn encode(
    secrets: &SecretBox,
    workspace_id: &str,
    name: &str,
    key: &ProviderKey,
) -> String {
    match key {
        ProviderKey::Secret(secret) => secrets.seal(secret, &bound_to(workspace_id, name)),
        ProviderKey::Reference(reference) => reference.to_string(),
    }
}

/// Where the column's text says the key comes from, without opening it.
pub(super) fn source(text: &str) -> Result<KeySource, String> {
    if SecretBox::is_sealed(text) || text.starts_with(PLAIN_PREFIX) {
        return Ok(KeySource::Stored);
    }
    match KeyReference::parse(text) {
        Some(reference) => reference
            .map(KeySource::Reference)
            .map_err(|e| e.to_string()),
        None => Err("api_key is neither sealed (enc:v1:) nor a reference".to_owned()),
    }
}

/// The key the column's text holds: opened, or the reference.
pub(super) fn decode(
    secrets: &SecretBox,
    workspace_id: &str,
    name: &str,
    text: &str,
) -> Result<ProviderKey, StoreError> {
    if let Some(plain) = text.strip_prefix(PLAIN_PREFIX) {
        return Ok(ProviderKey::Secret(plain.to_owned()));
    }
    match source(text) {
        Ok(KeySource::Reference(reference)) => Ok(ProviderKey::Reference(reference)),
        Ok(KeySource::Stored) => secrets
            .open(text, &bound_to(workspace_id, name))
            .map(ProviderKey::Secret)
            .map_err(|e| match e {
                OpenError::Refused(_) => StoreError::Undecryptable {
                    provider: name.to_owned(),
                    reason: e.to_string(),
                },
                OpenError::Malformed => corrupt(workspace_id, name, e.to_string()),
            }),
        Err(reason) => Err(corrupt(workspace_id, name, reason)),
    }
}

fn corrupt(workspace_id: &str, name: &str, reason: String) -> StoreError {
    StoreError::Corrupt {
        what: "provider",
        key: format!("{workspace_id}/{name}"),
        reason,
    }
}

type KeyColumns = (String, String, Option<String>);

impl Store {
    /// Seals every key an earlier version stored in clear, in one transaction,
    /// then (SQLite) empties the WAL, which held the pages with the clear
    /// text. Returns how many it sealed (0 once done).
    pub async fn seal_plain_api_keys(&self) -> Result<usize, StoreError> {
        let secrets = self.secrets.clone();
        let sealed = self
            .write(move |conn| {
                let plain = keys_like(conn, &format!("{PLAIN_PREFIX}%"))?;
                for (workspace_id, name, text) in &plain {
                    let Some(secret) = text.as_deref().and_then(|t| t.strip_prefix(PLAIN_PREFIX))
                    else {
                        continue;
                    };
                    let sealed = encode(
                        &secrets,
                        workspace_id,
                        name,
                        &ProviderKey::Secret(secret.to_owned()),
                    );
                    diesel::update(providers::table.find((workspace_id, name)))
                        .set(providers::api_key.eq(sealed))
                        .execute(conn)
                        .db()?;
                }
                Ok(plain.len())
            })
            .await?;
        if sealed > 0 {
            self.with_conn(truncate_wal).await?;
        }
        Ok(sealed)
    }

    /// Providers whose stored key does not open with this store's key, as
    /// `name (workspace <id>)`: a start with the wrong key is told at once.
    pub async fn undecryptable_api_keys(&self) -> Result<Vec<String>, StoreError> {
        let secrets = self.secrets.clone();
        self.with_conn(move |conn| {
            Ok(keys_like(conn, "enc:%")?
                .into_iter()
                .filter(|(workspace_id, name, text)| {
                    text.as_deref().is_some_and(|text| {
                        secrets.open(text, &bound_to(workspace_id, name)).is_err()
                    })
                })
                .map(|(workspace_id, name, _)| format!("{name} (workspace {workspace_id})"))
                .collect())
        })
        .await
    }

    /// Where the store's key comes from, for messages.
    pub fn secrets_origin(&self) -> &str {
        self.secrets.origin()
    }
}

/// (workspace id, name, api_key) of the providers whose key matches `pattern`,
/// locked until the transaction ends on PostgreSQL.
fn keys_like(conn: &mut AnyConnection, pattern: &str) -> Result<Vec<KeyColumns>, StoreError> {
    let query = providers::table
        .filter(providers::api_key.like(pattern.to_owned()))
        .select((providers::workspace_id, providers::name, providers::api_key))
        .order((providers::workspace_id, providers::name));
    match conn {
        AnyConnection::Pg(c) => query.for_update().load(c),
        AnyConnection::Sqlite(c) => query.load(c),
    }
    .db()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::KeyReference;

    #[test]
    fn keys_are_sealed_for_their_row_and_references_kept_as_written() {
        let secrets = SecretBox::ephemeral();
        let key = ProviderKey::Secret("sk-secret".into());
        let text = encode(&secrets, "ws-1", "openai", &key);
        assert!(
            text.starts_with("enc:v1:") && !text.contains("sk-secret"),
            "{text}"
        );
        assert_eq!(source(&text), Ok(KeySource::Stored));
        assert_eq!(decode(&secrets, "ws-1", "openai", &text), Ok(key));

        // Moved to another provider's row, or another workspace's.
        for (workspace_id, name) in [("ws-1", "ollama"), ("ws-2", "openai")] {
            let err = decode(&secrets, workspace_id, name, &text).expect_err("moved");
            assert!(
                matches!(&err, StoreError::Undecryptable { provider, .. } if provider == name),
                "{err}"
            );
        }

        let reference = ProviderKey::Reference(KeyReference::Env("OPENAI_API_KEY".into()));
        let text = encode(&secrets, "ws-1", "openai", &reference);
        assert_eq!(text, "env:OPENAI_API_KEY");
        assert_eq!(decode(&secrets, "ws-1", "openai", &text), Ok(reference));
        assert!(source("sk-in-clear").is_err());
    }
}
