//! Workspaces, providers and agents.

use super::*;

#[tokio::test]
async fn workspaces_are_created_read_listed_renamed_and_deleted() {
    for f in fixtures().await {
        let b = f.backend();
        let docs = f.workspace("docs").await;
        assert_eq!(docs.name, "docs", "{b}");
        assert!(docs.system_provider.is_empty(), "{b}");

        let missing = f.t.dir.path().join("nowhere");
        let err = f
            .svc
            .create_workspace(Request::new(pb::CreateWorkspaceRequest {
                name: "other".into(),
                root: missing.to_str().expect("utf-8").into(),
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "workspace root", b);
        let err = f
            .svc
            .create_workspace(Request::new(pb::CreateWorkspaceRequest {
                name: "Bad Name".into(),
                root: docs.root.clone(),
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid name", b);
        let err = f
            .svc
            .create_workspace(Request::new(pb::CreateWorkspaceRequest {
                name: "docs".into(),
                root: docs.root.clone(),
            }))
            .await;
        assert_status(err, Code::AlreadyExists, "docs", b);

        let got = f
            .svc
            .get_workspace(Request::new(pb::GetWorkspaceRequest {
                id: docs.id.clone(),
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(got, docs, "{b}");
        let err = f
            .svc
            .get_workspace(Request::new(pb::GetWorkspaceRequest { id: "nope".into() }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid id", b);

        let agents = f
            .svc
            .list_agents(Request::new(pb::ListAgentsRequest {
                workspace_id: docs.id.clone(),
            }))
            .await
            .expect(b)
            .into_inner()
            .agents;
        assert_eq!(agents.len(), 7, "{b}: {agents:?}");
        assert!(
            agents
                .iter()
                .any(|a| a.name == "task-validator" && a.kind == pb::AgentKind::Internal as i32),
            "{b}"
        );

        let code = f.workspace("code").await;
        let names: Vec<String> = f
            .svc
            .list_workspaces(Request::new(pb::ListWorkspacesRequest {}))
            .await
            .expect(b)
            .into_inner()
            .workspaces
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, ["code", "docs"], "{b}");

        let update = |name: Option<&str>, system_provider: Option<&str>| {
            Request::new(pb::UpdateWorkspaceRequest {
                limits: None,
                id: docs.id.clone(),
                name: name.map(str::to_owned),
                system_provider: system_provider.map(str::to_owned),
                ..Default::default()
            })
        };
        let renamed = f
            .svc
            .update_workspace(update(Some("handbook"), None))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(renamed.name, "handbook", "{b}");
        let err = f.svc.update_workspace(update(Some("code"), None)).await;
        assert_status(err, Code::AlreadyExists, "code", b);
        let err = f.svc.update_workspace(update(None, Some("ghost"))).await;
        assert_status(err, Code::NotFound, "ghost", b);
        f.svc
            .create_provider(Request::new(claude(&docs.id)))
            .await
            .expect(b);
        let set = f
            .svc
            .update_workspace(update(None, Some("claude")))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(set.system_provider, "claude", "{b}");
        let cleared = f
            .svc
            .update_workspace(update(None, Some("")))
            .await
            .expect(b)
            .into_inner();
        assert!(cleared.system_provider.is_empty(), "{b}");

        f.task(&code, "keeps the workspace").await;
        let err = f
            .svc
            .delete_workspace(Request::new(pb::DeleteWorkspaceRequest { id: code.id }))
            .await;
        assert_status(err, Code::FailedPrecondition, "task", b);
        f.svc
            .delete_workspace(Request::new(pb::DeleteWorkspaceRequest {
                id: docs.id.clone(),
            }))
            .await
            .expect(b);
        let err = f
            .svc
            .get_workspace(Request::new(pb::GetWorkspaceRequest { id: docs.id }))
            .await;
        assert_status(err, Code::NotFound, "workspace", b);
    }
}

fn claude(workspace_id: &str) -> pb::CreateProviderRequest {
    pb::CreateProviderRequest {
        workspace_id: workspace_id.into(),
        name: "claude".into(),
        kind: pb::ProviderKind::ClaudeCode as i32,
        ..Default::default()
    }
}

fn ollama(workspace_id: &str, api_key: &str) -> pb::CreateProviderRequest {
    pb::CreateProviderRequest {
        workspace_id: workspace_id.into(),
        name: "ollama".into(),
        kind: pb::ProviderKind::OpenaiCompatible as i32,
        base_url: "http://localhost:11434/v1".into(),
        model: "llama3".into(),
        api_key: api_key.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn providers_keep_their_api_key_write_only_and_in_use_ones_stay() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let created = f
            .svc
            .create_provider(Request::new(ollama(&ws.id, "sk-secret")))
            .await
            .expect(b)
            .into_inner();
        assert!(created.api_key_set, "{b}");
        assert_eq!(created.api_key_source, "stored", "{b}");
        assert_eq!(created.workspace_id, ws.id, "{b}");
        assert!(!format!("{created:?}").contains("sk-secret"), "{b}");
        let stored =
            f.t.store
                .provider_api_key(
                    crate::domain::WorkspaceId::parse(&ws.id).expect("id"),
                    crate::store::tests::name_of("ollama"),
                )
                .await
                .expect(b);
        assert_eq!(
            stored,
            Some(crate::domain::ProviderKey::Secret("sk-secret".into())),
            "{b}"
        );

        let err = f
            .svc
            .create_provider(Request::new(pb::CreateProviderRequest {
                kind: pb::ProviderKind::Unspecified as i32,
                ..claude(&ws.id)
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid kind", b);
        let err = f
            .svc
            .create_provider(Request::new(pb::CreateProviderRequest {
                base_url: "localhost".into(),
                ..ollama(&ws.id, "")
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "base_url", b);
        let err = f
            .svc
            .create_provider(Request::new(pb::CreateProviderRequest {
                name: "ollama!".into(),
                ..ollama(&ws.id, "")
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid name", b);
        f.svc
            .create_provider(Request::new(claude(&ws.id)))
            .await
            .expect(b);

        let cleared = f
            .svc
            .update_provider(Request::new(pb::UpdateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "ollama".into(),
                model: Some("qwen".into()),
                api_key: Some(String::new()),
                ..Default::default()
            }))
            .await
            .expect(b)
            .into_inner();
        assert!(!cleared.api_key_set, "{b}");
        assert_eq!(cleared.model, "qwen", "{b}");
        let got = f
            .svc
            .get_provider(Request::new(pb::GetProviderRequest {
                workspace_id: ws.id.clone(),
                name: "ollama".into(),
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(got, cleared, "{b}");
        let names: Vec<String> = f
            .svc
            .list_providers(Request::new(pb::ListProvidersRequest {
                workspace_id: ws.id.clone(),
            }))
            .await
            .expect(b)
            .into_inner()
            .providers
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["claude", "ollama"], "{b}");

        for agent in ["writer", "editor"] {
            f.svc
                .update_agent(Request::new(pb::UpdateAgentRequest {
                    workspace_id: ws.id.clone(),
                    name: agent.into(),
                    provider: Some("ollama".into()),
                    ..Default::default()
                }))
                .await
                .expect(b);
        }
        let delete = || {
            Request::new(pb::DeleteProviderRequest {
                workspace_id: ws.id.clone(),
                name: "ollama".into(),
            })
        };
        let err = f.svc.delete_provider(delete()).await;
        assert_status(err, Code::FailedPrecondition, "editor, writer", b);
        for agent in ["writer", "editor"] {
            f.svc
                .update_agent(Request::new(pb::UpdateAgentRequest {
                    workspace_id: ws.id.clone(),
                    name: agent.into(),
                    provider: Some(String::new()),
                    ..Default::default()
                }))
                .await
                .expect(b);
        }
        f.svc.delete_provider(delete()).await.expect(b);
        let err = f.svc.delete_provider(delete()).await;
        assert_status(err, Code::NotFound, "ollama", b);
    }
}

#[tokio::test]
async fn key_references_are_shown_and_never_point_at_chorus_own_secrets() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let data_dir = f.t.dir.path().join("data");
        std::fs::create_dir_all(&data_dir).expect("data dir");
        let keys = f.t.dir.path().join("keys");
        std::fs::create_dir_all(&keys).expect("key dir");
        let mut state = f.state.clone();
        state.key_references = crate::domain::KeyReferenceRules {
            protected: vec![data_dir.canonicalize().expect("data")],
            // The operator keeps key files next to the data directory.
            ..crate::domain::KeyReferenceRules::new(Some(f.t.dir.path()), "PROVIDER_KEY_")
                .expect("rules")
        };
        let svc = super::OrchestratorService::new(state);

        let created = svc
            .create_provider(Request::new(ollama(&ws.id, "env:PROVIDER_KEY_OPENAI")))
            .await
            .expect(b)
            .into_inner();
        assert!(created.api_key_set, "{b}");
        assert_eq!(created.api_key_source, "env:PROVIDER_KEY_OPENAI", "{b}");
        let update = |api_key: &str| {
            Request::new(pb::UpdateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "ollama".into(),
                api_key: Some(api_key.into()),
                ..Default::default()
            })
        };
        let key_file = format!("file:{}", keys.join("openai").display());
        let updated = svc
            .update_provider(update(&key_file))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(updated.api_key_source, key_file, "{b}");

        let secrets_key = data_dir.join("secrets.key").display().to_string();
        for (key, says) in [
            ("env:CHORUS_SECRETS_KEY", "own configuration"),
            ("env:DATABASE_URL", "--provider-key-env-prefix"),
            ("file:/etc/machine-id", "--provider-key-dir"),
            ("env:NOT-A-NAME", "must name an environment variable"),
            ("file:openai.key", "absolute path"),
            (&format!("file:{secrets_key}"), "Chorus's own data"),
        ] {
            let err = svc.update_provider(update(key)).await;
            assert_status(err, Code::InvalidArgument, says, b);
        }
        let got = svc
            .get_provider(Request::new(pb::GetProviderRequest {
                workspace_id: ws.id.clone(),
                name: "ollama".into(),
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(got, updated, "{b}: a refused change changes nothing");
    }
}

#[tokio::test]
async fn agents_are_validated_created_changed_and_deleted() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let create = |name: &str, tools: &[&str]| {
            Request::new(pb::CreateAgentRequest {
                workspace_id: ws.id.clone(),
                name: name.into(),
                instructions: "review the prose".into(),
                allowed_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
                ..Default::default()
            })
        };
        let err = f.svc.create_agent(create("Proof Reader", &[])).await;
        assert_status(err, Code::InvalidArgument, "invalid name", b);
        let err = f.svc.create_agent(create("proofreader", &["Read"])).await;
        assert_status(err, Code::InvalidArgument, "allowed_tools", b);
        let err = f
            .svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                provider: "Nope".into(),
                ..create("proofreader", &[]).into_inner()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "invalid provider", b);
        let err = f
            .svc
            .create_agent(Request::new(pb::CreateAgentRequest {
                provider: "ghost".into(),
                ..create("proofreader", &[]).into_inner()
            }))
            .await;
        assert_status(err, Code::NotFound, "ghost", b);

        let agent = f
            .svc
            .create_agent(create("proofreader", &["file.read"]))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(agent.kind, pb::AgentKind::UserDefined as i32, "{b}");
        assert_eq!(agent.allowed_tools, ["file.read"], "{b}");
        assert!(
            agent
                .granted_tools
                .contains(&"completion-report".to_owned()),
            "{b}"
        );
        let err = f.svc.create_agent(create("proofreader", &[])).await;
        assert_status(err, Code::AlreadyExists, "proofreader", b);

        let update = |set: bool, tools: &[&str]| {
            Request::new(pb::UpdateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "proofreader".into(),
                instructions: Some("check spelling".into()),
                allowed_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
                set_allowed_tools: set,
                ..Default::default()
            })
        };
        let err = f.svc.update_agent(update(false, &["file.list"])).await;
        assert_status(err, Code::InvalidArgument, "set_allowed_tools", b);
        let err = f.svc.update_agent(update(true, &["@nobody"])).await;
        assert_status(err, Code::InvalidArgument, "allowed_tools", b);
        let changed = f
            .svc
            .update_agent(update(true, &["@reviewer"]))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(changed.instructions, "check spelling", "{b}");
        assert_eq!(changed.allowed_tools, ["@reviewer"], "{b}");
        let got = f
            .svc
            .get_agent(Request::new(pb::GetAgentRequest {
                workspace_id: ws.id.clone(),
                name: "proofreader".into(),
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(got, changed, "{b}");

        let delete = |name: &str| {
            Request::new(pb::DeleteAgentRequest {
                workspace_id: ws.id.clone(),
                name: name.into(),
            })
        };
        let err = f.svc.delete_agent(delete("task-validator")).await;
        assert_status(err, Code::InvalidArgument, "internal", b);
        f.svc.delete_agent(delete("proofreader")).await.expect(b);
        let err = f.svc.delete_agent(delete("proofreader")).await;
        assert_status(err, Code::NotFound, "proofreader", b);
        let err = f
            .svc
            .list_agents(Request::new(pb::ListAgentsRequest {
                workspace_id: String::new(),
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "workspace_id", b);
    }
}

#[tokio::test]
async fn an_agents_egress_list_is_checked_stored_and_replaced_only_when_asked() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("egress").await;
        let create = |egress: &[&str]| {
            Request::new(pb::CreateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "fetcher".into(),
                allowed_tools: vec!["bash".into(), "network".into()],
                egress: egress.iter().map(|e| (*e).to_owned()).collect(),
                ..Default::default()
            })
        };
        let err = f.svc.create_agent(create(&["github.com"])).await;
        assert_status(
            err,
            Code::InvalidArgument,
            "invalid egress: 'github.com' has no port",
            b,
        );
        let err = f.svc.create_agent(create(&["2130706433:443"])).await;
        assert_status(err, Code::InvalidArgument, "dotted decimal", b);
        let agent = f
            .svc
            .create_agent(create(&[
                "GitHub.com:443",
                "*.npmjs.org:443",
                "github.com:443",
            ]))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(agent.egress, ["github.com:443", "*.npmjs.org:443"], "{b}");

        let update = |set: bool, egress: &[&str]| {
            Request::new(pb::UpdateAgentRequest {
                workspace_id: ws.id.clone(),
                name: "fetcher".into(),
                egress: egress.iter().map(|e| (*e).to_owned()).collect(),
                set_egress: set,
                ..Default::default()
            })
        };
        let err = f.svc.update_agent(update(false, &["pypi.org:443"])).await;
        assert_status(err, Code::InvalidArgument, "set_egress", b);
        let kept = f
            .svc
            .update_agent(Request::new(pb::UpdateAgentRequest {
                model: Some("m".into()),
                ..update(false, &[]).into_inner()
            }))
            .await
            .expect(b)
            .into_inner();
        assert_eq!(kept.egress, ["github.com:443", "*.npmjs.org:443"], "{b}");
        let cleared = f
            .svc
            .update_agent(update(true, &[]))
            .await
            .expect(b)
            .into_inner();
        assert!(cleared.egress.is_empty(), "{b}");
        let err = f
            .svc
            .update_agent(Request::new(pb::UpdateAgentRequest {
                name: "task-validator".into(),
                ..update(true, &["pypi.org:443"]).into_inner()
            }))
            .await;
        assert_status(err, Code::InvalidArgument, "egress are fixed", b);
    }
}
