use super::workspaces::claude;
use super::{name_of, test_stores};
use crate::domain::{AgentKind, DomainError};
use crate::store::{AgentChanges, NewAgent, StoreError};

fn reviewer() -> NewAgent {
    NewAgent {
        budget: crate::domain::Budget::default(),
        name: name_of("reviewer"),
        instructions: "Review the change.".into(),
        allowed_tools: vec!["@reviewer".into(), "file.read".into()],
        provider: Some(name_of("claude")),
        model: Some("opus".into()),
        egress: vec!["github.com:443".into()],
        approval_rules: Vec::new(),
    }
}

#[tokio::test]
async fn an_agent_needs_known_tools_and_an_existing_provider() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;

        let err = t.store.create_agent(ws.id, reviewer()).await.expect_err(b);
        assert_eq!(err, StoreError::not_found("provider", "claude"), "{b}");

        t.store.create_provider(ws.id, claude()).await.expect(b);
        let mut bad_tools = reviewer();
        bad_tools.allowed_tools = vec!["Read".into()];
        let err = t.store.create_agent(ws.id, bad_tools).await.expect_err(b);
        assert!(
            matches!(&err, StoreError::Domain(DomainError::Invalid { field: "allowed_tools", reason })
                if reason.contains("unknown tool 'Read'")),
            "{b}: {err}"
        );

        let created = t.store.create_agent(ws.id, reviewer()).await.expect(b);
        assert_eq!(created.kind, AgentKind::UserDefined, "{b}");
        assert_eq!(created.allowed_tools, ["@reviewer", "file.read"], "{b}");
        assert_eq!(
            t.store
                .get_agent(ws.id, name_of("reviewer"))
                .await
                .expect(b),
            created,
            "{b}"
        );
        assert_eq!(t.store.list_agents(ws.id).await.expect(b).len(), 8, "{b}");

        let err = t.store.create_agent(ws.id, reviewer()).await.expect_err(b);
        assert_eq!(
            err,
            StoreError::AlreadyExists {
                what: "agent",
                key: "reviewer".into()
            },
            "{b}"
        );
    }
}

#[tokio::test]
async fn agents_are_updated_and_deleted_but_internal_agents_keep_their_tools() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        t.store.create_provider(ws.id, claude()).await.expect(b);

        let writer = name_of("writer");
        let updated = t
            .store
            .update_agent(
                ws.id,
                writer.clone(),
                AgentChanges {
                    budget: None,
                    instructions: Some("Write tersely.".into()),
                    allowed_tools: Some(vec!["@developer".into()]),
                    provider: Some(Some(name_of("claude"))),
                    model: Some(Some("haiku".into())),
                    egress: Some(vec!["*.npmjs.org:443".into()]),
                    approval_rules: None,
                },
            )
            .await
            .expect(b);
        assert_eq!(updated.instructions, "Write tersely.", "{b}");
        assert_eq!(updated.allowed_tools, ["@developer"], "{b}");
        assert_eq!(updated.provider, Some(name_of("claude")), "{b}");
        assert_eq!(
            t.store.get_agent(ws.id, writer.clone()).await.expect(b),
            updated,
            "{b}"
        );

        let err = t
            .store
            .update_agent(
                ws.id,
                writer.clone(),
                AgentChanges {
                    allowed_tools: Some(vec!["Bash".into()]),
                    ..AgentChanges::default()
                },
            )
            .await
            .expect_err(b);
        assert!(matches!(err, StoreError::Domain(_)), "{b}: {err}");
        let err = t
            .store
            .update_agent(
                ws.id,
                writer.clone(),
                AgentChanges {
                    provider: Some(Some(name_of("nope"))),
                    ..AgentChanges::default()
                },
            )
            .await
            .expect_err(b);
        assert_eq!(err, StoreError::not_found("provider", "nope"), "{b}");

        let validator = name_of("task-validator");
        let err = t
            .store
            .update_agent(
                ws.id,
                validator.clone(),
                AgentChanges {
                    allowed_tools: Some(vec!["bash".into()]),
                    ..AgentChanges::default()
                },
            )
            .await
            .expect_err(b);
        assert!(err.to_string().contains("internal to Chorus"), "{b}: {err}");
        let err = t
            .store
            .delete_agent(ws.id, validator.clone())
            .await
            .expect_err(b);
        assert!(err.to_string().contains("cannot be deleted"), "{b}: {err}");
        // Its instructions may be tuned.
        t.store
            .update_agent(
                ws.id,
                validator,
                AgentChanges {
                    instructions: Some("Plan carefully.".into()),
                    ..AgentChanges::default()
                },
            )
            .await
            .expect(b);

        t.store.delete_agent(ws.id, writer.clone()).await.expect(b);
        assert_eq!(
            t.store.get_agent(ws.id, writer.clone()).await,
            Err(StoreError::not_found("agent", "writer")),
            "{b}"
        );
        assert_eq!(
            t.store.delete_agent(ws.id, writer).await,
            Err(StoreError::not_found("agent", "writer")),
            "{b}"
        );
    }
}

/// Deleting an agent while a run of it goes on would leave the run unable to
/// resume after a restart (its task then says "start it again", which cannot
/// work): refused, naming the run, until the run has ended.
#[tokio::test]
async fn an_agent_with_a_run_going_is_not_deleted_and_the_refusal_names_the_run() {
    for t in test_stores().await {
        let b = t.backend;
        let (ws, task) = t.workspace_with_task("docs").await;
        let writer = name_of("writer");
        let (run, _) = t
            .store
            .create_run(task.id, writer.clone(), None, vec!["file.read".into()])
            .await
            .expect(b);
        let err = t
            .store
            .delete_agent(ws.id, writer.clone())
            .await
            .expect_err(b);
        assert_eq!(
            err,
            StoreError::AgentInUse {
                agent: "writer".into(),
                run: run.id.to_string(),
                task: task.id.to_string(),
            },
            "{b}"
        );
        assert!(err.to_string().contains("CancelTask"), "{b}: {err}");
        t.store.get_agent(ws.id, writer.clone()).await.expect(b);

        t.store
            .change_task_runs(task.id, |task, runs| {
                crate::domain::policy::cancel_task(task, runs, "stop", 5)
            })
            .await
            .expect(b);
        t.store.delete_agent(ws.id, writer.clone()).await.expect(b);
        assert_eq!(
            t.store.get_agent(ws.id, writer).await.expect_err(b),
            StoreError::not_found("agent", "writer"),
            "{b}"
        );
    }
}
