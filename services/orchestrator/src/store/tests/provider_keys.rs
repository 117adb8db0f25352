//! Provider keys at rest: sealed for their row, references kept as written,
//! keys of an earlier version sealed on the first start, and a clear error
//! for a key that does not open.

use diesel::prelude::*;

use super::providers::{ollama, secret};
use super::{TestStore, name_of, test_stores};
use crate::domain::{KeyReference, KeySource, ProviderKey, WorkspaceId};
use crate::secrets::SecretBox;
use crate::store::schema::providers;
use crate::store::{Db, ProviderChanges, Store, StoreError};

/// Version of the migration that marks keys stored in clear (`2026-11-23-100000_secrets`).
const SECRETS_MIGRATION: &str = "20261123100000";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The `api_key` column of a provider, as the database holds it.
async fn raw_key(t: &TestStore, workspace: WorkspaceId, name: &str) -> Option<String> {
    let key = (workspace.to_string(), name.to_owned());
    t.store
        .with_conn(move |conn| {
            providers::table
                .find((&key.0, &key.1))
                .select(providers::api_key)
                .first(conn)
                .db()
        })
        .await
        .unwrap_or_else(|e| panic!("{}: raw key: {e}", t.backend))
}

/// Writes the `api_key` column directly, as another writer of the database could.
async fn set_raw_key(t: &TestStore, workspace: WorkspaceId, name: &str, text: &str) {
    let (key, text) = ((workspace.to_string(), name.to_owned()), text.to_owned());
    t.store
        .with_conn(move |conn| {
            diesel::update(providers::table.find((&key.0, &key.1)))
                .set(providers::api_key.eq(text))
                .execute(conn)
                .db()
        })
        .await
        .unwrap_or_else(|e| panic!("{}: set raw key: {e}", t.backend));
}

#[tokio::test]
async fn a_stored_key_is_sealed_for_its_row_and_does_not_open_in_another() {
    for t in test_stores().await {
        let b = t.backend;
        let docs = t.workspace("docs").await;
        let code = t.workspace("code").await;
        t.store
            .create_provider(docs.id, ollama(Some("sk-docs-secret")))
            .await
            .expect(b);
        let mut other = ollama(Some("sk-other"));
        other.name = name_of("other");
        t.store.create_provider(docs.id, other).await.expect(b);
        t.store
            .create_provider(code.id, ollama(Some("sk-code")))
            .await
            .expect(b);

        let sealed = raw_key(&t, docs.id, "ollama").await.expect(b);
        assert!(
            sealed.starts_with("enc:v1:") && !sealed.contains("sk-docs-secret"),
            "{b}: {sealed}"
        );
        let provider = t
            .store
            .get_provider(docs.id, name_of("ollama"))
            .await
            .expect(b);
        assert_eq!(provider.api_key_source, Some(KeySource::Stored), "{b}");

        // Copied to another provider of the workspace, and to the provider of
        // the same name in another workspace: neither opens.
        for (workspace, name) in [(docs.id, "other"), (code.id, "ollama")] {
            set_raw_key(&t, workspace, name, &sealed).await;
            let err = t
                .store
                .provider_api_key(workspace, name_of(name))
                .await
                .expect_err(b);
            assert!(
                matches!(&err, StoreError::Undecryptable { provider, .. } if provider == name),
                "{b}: {err}"
            );
        }
        assert_eq!(
            t.store
                .provider_api_key(docs.id, name_of("ollama"))
                .await
                .expect(b),
            Some(secret("sk-docs-secret")),
            "{b}"
        );
    }
}

#[tokio::test]
async fn references_are_stored_as_written_and_shown() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let env = ProviderKey::Reference(KeyReference::Env("OPENAI_API_KEY".into()));
        let mut new = ollama(None);
        new.api_key = Some(env.clone());
        let created = t.store.create_provider(ws.id, new).await.expect(b);
        assert_eq!(created.api_key_source, Some(env.source()), "{b}");
        assert_eq!(
            raw_key(&t, ws.id, "ollama").await.as_deref(),
            Some("env:OPENAI_API_KEY"),
            "{b}"
        );
        assert_eq!(
            t.store
                .provider_api_key(ws.id, name_of("ollama"))
                .await
                .expect(b),
            Some(env),
            "{b}"
        );

        let file = ProviderKey::Reference(KeyReference::File("/run/secrets/openai".into()));
        let updated = t
            .store
            .update_provider(
                ws.id,
                name_of("ollama"),
                ProviderChanges {
                    api_key: Some(Some(file.clone())),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect(b);
        assert_eq!(
            updated
                .api_key_source
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("file:/run/secrets/openai"),
            "{b}"
        );
        assert_eq!(
            t.store
                .provider_api_key(ws.id, name_of("ollama"))
                .await
                .expect(b),
            Some(file),
            "{b}"
        );
    }
}

#[tokio::test]
async fn keys_an_earlier_version_stored_in_clear_are_sealed_on_the_next_start() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        t.store.create_provider(ws.id, ollama(None)).await.expect(b);
        // The database as the previous version left it: the key in clear, the
        // secrets migration not applied yet. A long key (a token) spills into
        // overflow pages, which a change frees rather than rewrites.
        let old_key = format!(
            "sk-old-in-clear-{}-end-of-old-key",
            "0123456789".repeat(600)
        );
        set_raw_key(&t, ws.id, "ollama", &old_key).await;
        t.store
            .with_conn(|conn| {
                diesel::sql_query(format!(
                    "DELETE FROM __diesel_schema_migrations WHERE version = '{SECRETS_MIGRATION}'"
                ))
                .execute(conn)
                .db()
            })
            .await
            .expect(b);

        let reopened = Store::open(&t.url, t.secrets.clone()).await.expect(b);
        let again = TestStore {
            store: reopened,
            ..t
        };
        assert_eq!(
            raw_key(&again, ws.id, "ollama").await.as_deref(),
            Some(format!("plain:{old_key}").as_str()),
            "{b}: the migration marks it"
        );
        assert_eq!(again.store.seal_plain_api_keys().await, Ok(1), "{b}");
        if let Some(path) = again.url.strip_prefix("sqlite://") {
            for file in [path.to_owned(), format!("{path}-wal")] {
                let bytes = std::fs::read(&file).unwrap_or_default();
                for part in [&b"sk-old-in-clear"[..], b"end-of-old-key"] {
                    assert!(
                        !contains(&bytes, part),
                        "{file} still holds the key in clear"
                    );
                }
            }
        }
        let sealed = raw_key(&again, ws.id, "ollama").await.expect(b);
        assert!(
            sealed.starts_with("enc:v1:") && !sealed.contains("sk-old-in-clear"),
            "{b}: {sealed}"
        );
        assert_eq!(
            again
                .store
                .provider_api_key(ws.id, name_of("ollama"))
                .await
                .expect(b),
            Some(secret(&old_key)),
            "{b}"
        );
        assert_eq!(again.store.seal_plain_api_keys().await, Ok(0), "{b}");
    }
}

#[tokio::test]
async fn a_store_opened_with_another_key_says_which_keys_do_not_open() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        t.store
            .create_provider(ws.id, ollama(Some("sk-secret")))
            .await
            .expect(b);
        assert_eq!(t.store.undecryptable_api_keys().await, Ok(vec![]), "{b}");

        let wrong = SecretBox::new(&[9; 32], "the key file /elsewhere/secrets.key");
        let reopened = Store::open(&t.url, wrong).await.expect(b);
        let err = reopened
            .provider_api_key(ws.id, name_of("ollama"))
            .await
            .expect_err(b);
        let message = err.to_string();
        assert!(
            message.starts_with("the API key of provider 'ollama' cannot be decrypted")
                && message.contains("/elsewhere/secrets.key")
                && message.contains("UpdateProvider"),
            "{b}: {message}"
        );
        assert_eq!(
            reopened.undecryptable_api_keys().await,
            Ok(vec![format!("ollama (workspace {})", ws.id)]),
            "{b}"
        );

        // Setting the key again with this key mends it.
        reopened
            .update_provider(
                ws.id,
                name_of("ollama"),
                ProviderChanges {
                    api_key: Some(Some(secret("sk-new"))),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect(b);
        assert_eq!(
            reopened
                .provider_api_key(ws.id, name_of("ollama"))
                .await
                .expect(b),
            Some(secret("sk-new")),
            "{b}"
        );
        assert_eq!(reopened.undecryptable_api_keys().await, Ok(vec![]), "{b}");
    }
}
