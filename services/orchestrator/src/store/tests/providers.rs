use super::workspaces::claude;
use super::{name_of, test_stores};
use crate::domain::{DomainError, ProviderKey, ProviderKind, WorkspaceId};
use crate::store::{AgentChanges, NewProvider, ProviderChanges, StoreError};

pub(super) fn secret(key: &str) -> ProviderKey {
    ProviderKey::Secret(key.to_owned())
}

pub(super) fn ollama(api_key: Option<&str>) -> NewProvider {
    NewProvider {
        name: name_of("ollama"),
        kind: ProviderKind::OpenaiCompatible,
        base_url: Some("http://localhost:11434/v1".into()),
        model: Some("llama3".into()),
        api_key: api_key.map(secret),
        tool_transport: crate::domain::ToolTransport::default(),
    }
}

#[tokio::test]
async fn providers_are_created_listed_and_unique_per_workspace() {
    for t in test_stores().await {
        let b = t.backend;
        let docs = t.workspace("docs").await;
        let code = t.workspace("code").await;
        let created = t
            .store
            .create_provider(docs.id, ollama(None))
            .await
            .expect(b);
        assert_eq!(created.kind, ProviderKind::OpenaiCompatible, "{b}");
        assert!(!created.api_key_set(), "{b}");
        t.store.create_provider(docs.id, claude()).await.expect(b);

        let err = t
            .store
            .create_provider(docs.id, ollama(None))
            .await
            .expect_err(b);
        assert_eq!(
            err,
            StoreError::AlreadyExists {
                what: "provider",
                key: "ollama".into()
            },
            "{b}"
        );
        // The same name in another workspace is another provider.
        t.store
            .create_provider(code.id, ollama(None))
            .await
            .expect(b);

        let names: Vec<String> = t
            .store
            .list_providers(docs.id)
            .await
            .expect(b)
            .into_iter()
            .map(|p| p.name.to_string())
            .collect();
        assert_eq!(names, ["claude", "ollama"], "{b}");
        assert_eq!(
            t.store
                .get_provider(docs.id, name_of("ollama"))
                .await
                .expect(b),
            created,
            "{b}"
        );
        assert_eq!(
            t.store.get_provider(docs.id, name_of("nope")).await,
            Err(StoreError::not_found("provider", "nope")),
            "{b}"
        );
        let missing = WorkspaceId::new();
        assert_eq!(
            t.store.create_provider(missing, claude()).await,
            Err(StoreError::not_found("workspace", missing)),
            "{b}"
        );
    }
}

#[tokio::test]
async fn provider_rules_are_checked_on_create_and_update() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let mut no_url = ollama(None);
        no_url.base_url = None;
        let err = t.store.create_provider(ws.id, no_url).await.expect_err(b);
        assert!(
            matches!(
                err,
                StoreError::Domain(DomainError::Invalid {
                    field: "base_url",
                    ..
                })
            ),
            "{b}: {err}"
        );

        t.store.create_provider(ws.id, claude()).await.expect(b);
        // A CLI provider may carry the key of the API its CLI talks to, but a
        // base URL must still be http(s).
        let keyed = t
            .store
            .update_provider(
                ws.id,
                name_of("claude"),
                ProviderChanges {
                    api_key: Some(Some(secret("sk-1"))),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect(b);
        assert!(keyed.api_key_set(), "{b}");
        let err = t
            .store
            .update_provider(
                ws.id,
                name_of("claude"),
                ProviderChanges {
                    base_url: Some(Some("localhost:8080".into())),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect_err(b);
        assert!(
            matches!(
                err,
                StoreError::Domain(DomainError::Invalid {
                    field: "base_url",
                    ..
                })
            ),
            "{b}: {err}"
        );
        let cleared = t
            .store
            .update_provider(
                ws.id,
                name_of("claude"),
                ProviderChanges {
                    model: Some(None),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect(b);
        assert_eq!(cleared.model, None, "{b}");
        assert_eq!(
            t.store
                .update_provider(ws.id, name_of("nope"), ProviderChanges::default())
                .await,
            Err(StoreError::not_found("provider", "nope")),
            "{b}"
        );
    }
}

#[tokio::test]
async fn the_api_key_is_write_only() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let new = ollama(Some("sk-secret"));
        let changes = ProviderChanges {
            api_key: Some(Some(secret("sk-secret"))),
            ..ProviderChanges::default()
        };
        for shown in [format!("{new:?}"), format!("{changes:?}")] {
            assert!(
                !shown.contains("sk-secret") && shown.contains("<hidden>"),
                "{shown}"
            );
        }
        let provider = t.store.create_provider(ws.id, new).await.expect(b);
        assert!(provider.api_key_set(), "{b}");
        let shown = format!("{provider:?}");
        assert!(!shown.contains("sk-secret"), "{b}: {shown}");
        let name = name_of("ollama");
        assert_eq!(
            t.store
                .provider_api_key(ws.id, name.clone())
                .await
                .expect(b),
            Some(secret("sk-secret")),
            "{b}"
        );

        // Changing another field keeps the key.
        let updated = t
            .store
            .update_provider(
                ws.id,
                name.clone(),
                ProviderChanges {
                    model: Some(Some("qwen".into())),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect(b);
        assert!(updated.api_key_set(), "{b}");
        assert_eq!(updated.model.as_deref(), Some("qwen"), "{b}");

        let cleared = t
            .store
            .update_provider(
                ws.id,
                name.clone(),
                ProviderChanges {
                    api_key: Some(None),
                    ..ProviderChanges::default()
                },
            )
            .await
            .expect(b);
        assert!(!cleared.api_key_set(), "{b}");
        assert_eq!(
            t.store.provider_api_key(ws.id, name).await.expect(b),
            None,
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_provider_in_use_cannot_be_deleted() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        t.store.create_provider(ws.id, claude()).await.expect(b);
        let uses_claude = AgentChanges {
            provider: Some(Some(name_of("claude"))),
            ..AgentChanges::default()
        };
        for agent in ["writer", "editor"] {
            t.store
                .update_agent(ws.id, name_of(agent), uses_claude.clone())
                .await
                .expect(b);
        }
        t.store
            .update_workspace(ws.id, None, Some(Some(name_of("claude"))), None, None, None)
            .await
            .expect(b);

        let err = t
            .store
            .delete_provider(ws.id, name_of("claude"))
            .await
            .expect_err(b);
        assert_eq!(
            err,
            StoreError::ProviderInUse {
                provider: "claude".into(),
                agents: vec!["editor".into(), "writer".into()],
                system_provider: true,
            },
            "{b}"
        );
        assert_eq!(
            err.to_string(),
            "provider 'claude' is in use by agent(s) editor, writer and as the workspace's \
             system provider; give them another provider first",
            "{b}"
        );

        let no_provider = AgentChanges {
            provider: Some(None),
            ..AgentChanges::default()
        };
        for agent in ["writer", "editor"] {
            t.store
                .update_agent(ws.id, name_of(agent), no_provider.clone())
                .await
                .expect(b);
        }
        let err = t
            .store
            .delete_provider(ws.id, name_of("claude"))
            .await
            .expect_err(b);
        assert!(
            err.to_string()
                .contains("in use as the workspace's system provider"),
            "{b}: {err}"
        );

        t.store
            .update_workspace(ws.id, None, Some(None), None, None, None)
            .await
            .expect(b);
        t.store
            .delete_provider(ws.id, name_of("claude"))
            .await
            .expect(b);
        assert_eq!(
            t.store.delete_provider(ws.id, name_of("claude")).await,
            Err(StoreError::not_found("provider", "claude")),
            "{b}"
        );
    }
}
