use diesel::prelude::*;

use super::{TestStore, name_of, source, test_stores};
use crate::domain::{AgentKind, DomainError, WorkspaceId};
use crate::store::schema::tasks;
use crate::store::{Backend, EVENT_PAGE_BYTES, NewProvider, Store, StoreError};

#[tokio::test]
async fn a_new_database_gets_its_schema_and_keeps_its_data_across_a_restart() {
    for t in test_stores().await {
        let b = t.backend;
        if t.store.backend() == Backend::Sqlite {
            assert!(
                t.dir.path().join("state").join("chorus.db").is_file(),
                "the file and its directory were created"
            );
        }
        let ws = t.workspace("docs").await;
        let TestStore {
            store,
            url,
            secrets,
            _schema,
            ..
        } = t;
        let (task, _) = store
            .create_task(ws.id, "write the README".into(), source())
            .await
            .expect(b);
        drop(store);

        // Opening again applies no migration twice and finds everything.
        let reopened = Store::open(&url, secrets).await.expect(b);
        assert_eq!(reopened.get_workspace(ws.id).await.expect(b), ws, "{b}");
        assert_eq!(reopened.get_task(task.id).await.expect(b), task, "{b}");
        assert_eq!(reopened.list_agents(ws.id).await.expect(b).len(), 7, "{b}");
        assert_eq!(
            reopened
                .events(task.id, 0, 0, EVENT_PAGE_BYTES)
                .await
                .expect(b)
                .len(),
            1,
            "{b}"
        );
        drop(reopened);
    }
}

#[tokio::test]
async fn a_workspace_starts_with_the_seven_default_agents() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        assert_eq!(ws.system_provider, None);
        assert!(ws.root.is_absolute(), "{b}");

        let agents = t.store.list_agents(ws.id).await.expect(b);
        let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "editor",
                "fact-checker",
                "plan-writer",
                "researcher",
                "task-validator",
                "writer",
                "writer-workflow"
            ],
            "{b}"
        );
        for agent in &agents {
            assert_eq!(agent.provider, None, "{b}: {}", agent.name);
            let expected = if agent.name.as_str() == "task-validator" {
                AgentKind::Internal
            } else {
                AgentKind::UserDefined
            };
            assert_eq!(agent.kind, expected, "{b}: {}", agent.name);
        }
        let researcher = t
            .store
            .get_agent(ws.id, name_of("researcher"))
            .await
            .expect(b);
        assert_eq!(
            researcher.allowed_tools,
            ["web.search", "file.read", "file.list", "file.search"],
            "{b}"
        );
    }
}

#[tokio::test]
async fn workspace_names_are_unique() {
    for t in test_stores().await {
        let b = t.backend;
        let docs = t.workspace("docs").await;
        let root = t.dir.path().to_str().expect("utf-8");
        let err = t
            .store
            .create_workspace(name_of("docs"), root)
            .await
            .expect_err(b);
        assert_eq!(
            err,
            StoreError::AlreadyExists {
                what: "workspace",
                key: "docs".into()
            },
            "{b}"
        );
        let code = t.workspace("code").await;
        let err = t
            .store
            .update_workspace(code.id, Some(name_of("docs")), None, None, None, None)
            .await
            .expect_err(b);
        assert!(
            matches!(err, StoreError::AlreadyExists { .. }),
            "{b}: {err}"
        );
        assert_eq!(
            t.store.list_workspaces().await.expect(b),
            [code, docs],
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_workspace_root_must_be_an_existing_directory() {
    for t in test_stores().await {
        let b = t.backend;
        let err = t
            .store
            .create_workspace(name_of("docs"), "/no/such/dir")
            .await
            .expect_err(b);
        assert!(
            matches!(
                err,
                StoreError::Domain(DomainError::Invalid {
                    field: "workspace root",
                    ..
                })
            ),
            "{b}: {err}"
        );
        assert!(t.store.list_workspaces().await.expect(b).is_empty(), "{b}");
    }
}

#[tokio::test]
async fn the_system_provider_must_be_a_provider_of_the_workspace() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let err = t
            .store
            .update_workspace(ws.id, None, Some(Some(name_of("claude"))), None, None, None)
            .await
            .expect_err(b);
        assert_eq!(err, StoreError::not_found("provider", "claude"), "{b}");

        t.store.create_provider(ws.id, claude()).await.expect(b);
        let renamed = t
            .store
            .update_workspace(
                ws.id,
                Some(name_of("notes")),
                Some(Some(name_of("claude"))),
                None,
                Some(crate::domain::WorkspaceChanges {
                    task_worktrees: false,
                    land_mode: crate::domain::LandMode::Squash,
                    keep_unlanded_days: 7,
                }),
                None,
            )
            .await
            .expect(b);
        assert_eq!(renamed.name.as_str(), "notes", "{b}");
        assert!(!renamed.changes.task_worktrees, "{b}");
        assert_eq!(
            renamed.changes.land_mode,
            crate::domain::LandMode::Squash,
            "{b}"
        );
        assert_eq!(
            t.store.get_workspace(ws.id).await.expect(b).changes,
            renamed.changes,
            "{b}: read back as written"
        );
        assert!(ws.changes.task_worktrees, "{b}: on by default");
        assert_eq!(renamed.system_provider, Some(name_of("claude")), "{b}");
        assert!(renamed.updated_ms >= ws.updated_ms, "{b}");

        let cleared = t
            .store
            .update_workspace(ws.id, None, Some(None), None, None, None)
            .await
            .expect(b);
        assert_eq!(cleared.system_provider, None, "{b}");
        assert_eq!(cleared.name.as_str(), "notes", "{b}");

        let missing = WorkspaceId::new();
        let err = t
            .store
            .update_workspace(missing, None, None, None, None, None)
            .await
            .expect_err(b);
        assert_eq!(err, StoreError::not_found("workspace", missing), "{b}");
    }
}

#[tokio::test]
async fn deleting_a_workspace_deletes_its_providers_and_agents_but_not_tasks() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        t.store.create_provider(ws.id, claude()).await.expect(b);
        t.store
            .update_workspace(ws.id, None, Some(Some(name_of("claude"))), None, None, None)
            .await
            .expect(b);
        t.store.delete_workspace(ws.id).await.expect(b);
        let gone = StoreError::not_found("workspace", ws.id);
        assert_eq!(t.store.get_workspace(ws.id).await, Err(gone.clone()), "{b}");
        assert_eq!(t.store.list_agents(ws.id).await, Err(gone.clone()), "{b}");
        assert_eq!(
            t.store.list_providers(ws.id).await,
            Err(gone.clone()),
            "{b}"
        );
        assert_eq!(t.store.delete_workspace(ws.id).await, Err(gone), "{b}");

        let busy = t.workspace("busy").await;
        t.store
            .create_task(busy.id, "keep me".into(), source())
            .await
            .expect(b);
        let err = t.store.delete_workspace(busy.id).await.expect_err(b);
        assert_eq!(
            err,
            StoreError::WorkspaceInUse {
                workspace: "busy".into(),
                tasks: 1
            },
            "{b}"
        );
        assert!(t.store.get_workspace(busy.id).await.is_ok(), "{b}");
    }
}

#[tokio::test]
async fn a_stored_value_that_no_longer_parses_is_reported_as_corrupt() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let key = task.id.to_string();
        t.store
            .with_conn(move |conn| {
                diesel::update(tasks::table.find(&key))
                    .set(tasks::status.eq("done"))
                    .execute(conn)
                    .map_err(|e| StoreError::Database(e.to_string()))
            })
            .await
            .expect(b);
        let err = t.store.get_task(task.id).await.expect_err(b);
        assert!(
            matches!(&err, StoreError::Corrupt { what: "task", key, reason }
                if *key == task.id.to_string() && reason.contains("unknown status 'done'")),
            "{b}: {err}"
        );
    }
}

pub(super) fn claude() -> NewProvider {
    NewProvider {
        name: name_of("claude"),
        kind: crate::domain::ProviderKind::ClaudeCode,
        base_url: None,
        model: Some("sonnet".into()),
        api_key: None,
        tool_transport: crate::domain::ToolTransport::default(),
    }
}
