//! Every RPC of both services, called with no credential, a wrong one (a key
//! this deployment never made, a revoked key), an agent's run token, and a key
//! of each role: the layer answers UNAUTHENTICATED or PERMISSION_DENIED exactly
//! where the method's rule says, lets everything else through to its handler,
//! and a refused call changes nothing. The expectations are this test's own
//! table, written apart from the services' rules.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, add_agent, workspace};
use chorus_tests::orchestrator::{Orchestrator, channel_to, client_at};
use chorus_tests::raw::{self, Method};
use tonic::Code;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Nobody,
    UnknownKey,
    RevokedKey,
    RunToken,
    Admin,
    Operator,
    Viewer,
    ToolExec,
}

const CALLERS: [Caller; 8] = [
    Caller::Nobody,
    Caller::UnknownKey,
    Caller::RevokedKey,
    Caller::RunToken,
    Caller::Admin,
    Caller::Operator,
    Caller::Viewer,
    Caller::ToolExec,
];

const ADMIN_ONLY: &[&str] = &[
    "CreateWorkspace",
    "UpdateWorkspace",
    "DeleteWorkspace",
    "CreateProvider",
    "UpdateProvider",
    "DeleteProvider",
    "CreateAgent",
    "UpdateAgent",
    "DeleteAgent",
    "OpenRun",
    "FinishRun",
    "DeleteTask",
    "CreateApiKey",
    "ListApiKeys",
    "RevokeApiKey",
    "RotateRunTokenKey",
];
const OPERATOR: &[&str] = &[
    "CreateTask",
    "UpdateTaskStatus",
    "UpdatePlanning",
    "PlanTask",
    "SubmitAnswers",
    "StartTask",
    "CancelTask",
    "UpdateTaskBudget",
    "LandTask",
    "DiscardTask",
    "AnswerApproval",
    "Handoff",
];
const VIEWER: &[&str] = &[
    "GetWorkspace",
    "ListWorkspaces",
    "GetProvider",
    "ListProviders",
    "GetAgent",
    "ListAgents",
    "GetTask",
    "ListTasks",
    "GetUsage",
    "GetHistory",
    "WatchTask",
    "WatchTasks",
    "GetRun",
    "ListRuns",
    "GetStatus",
    "GetTaskChange",
];

/// Whether `caller` may call `method` (`Service/Method`).
fn allowed(method: &str, caller: Caller) -> bool {
    let (service, name) = method.split_once('/').expect("Service/Method");
    let role_at_least = |needed: Caller| match needed {
        Caller::Admin => caller == Caller::Admin,
        Caller::Operator => matches!(caller, Caller::Admin | Caller::Operator),
        Caller::Viewer => matches!(caller, Caller::Admin | Caller::Operator | Caller::Viewer),
        _ => false,
    };
    match service {
        "Orchestrator" if ADMIN_ONLY.contains(&name) => role_at_least(Caller::Admin),
        "Orchestrator" if name == "Handoff" => {
            caller == Caller::RunToken || role_at_least(Caller::Operator)
        }
        "Orchestrator" if OPERATOR.contains(&name) => role_at_least(Caller::Operator),
        "Orchestrator" if VIEWER.contains(&name) => role_at_least(Caller::Viewer),
        "AgentTools" if name == "CallTool" => caller == Caller::RunToken,
        "AgentTools" => caller == Caller::ToolExec,
        "ToolExec" if name == "ExecuteTool" => caller == Caller::RunToken,
        "ToolExec" => caller == Caller::RunToken || role_at_least(Caller::Viewer),
        _ => panic!("{method} is not in this test's table: add it"),
    }
}

struct Credentials {
    unknown: String,
    revoked: String,
    run: String,
    admin: String,
    operator: String,
    viewer: String,
    tool_exec: String,
}

impl Credentials {
    fn of(&self, caller: Caller) -> Option<&str> {
        Some(match caller {
            Caller::Nobody => return None,
            Caller::UnknownKey => &self.unknown,
            Caller::RevokedKey => &self.revoked,
            Caller::RunToken => &self.run,
            Caller::Admin => &self.admin,
            Caller::Operator => &self.operator,
            Caller::Viewer => &self.viewer,
            Caller::ToolExec => &self.tool_exec,
        })
    }
}

async fn key(client: &mut Client, name: &str, role: pb::Role) -> pb::CreateApiKeyResponse {
    client
        .create_api_key(pb::CreateApiKeyRequest {
            name: name.into(),
            role: role.into(),
        })
        .await
        .expect("key")
        .into_inner()
}

/// What a refused call must leave as it was.
async fn snapshot(client: &mut Client, task: &str) -> String {
    let workspaces = client
        .list_workspaces(pb::ListWorkspacesRequest {})
        .await
        .expect("workspaces")
        .into_inner();
    let tasks = client
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .expect("tasks")
        .into_inner();
    let history = client
        .get_history(pb::GetHistoryRequest {
            task_id: task.into(),
            ..Default::default()
        })
        .await
        .expect("history")
        .into_inner();
    let keys = client
        .list_api_keys(pb::ListApiKeysRequest {
            include_revoked: true,
        })
        .await
        .expect("keys")
        .into_inner();
    let runs = client
        .list_runs(pb::ListRunsRequest {
            task_id: task.into(),
        })
        .await
        .expect("runs")
        .into_inner();
    format!("{workspaces:?}\n{tasks:?}\n{history:?}\n{keys:?}\n{runs:?}")
}

struct Setup {
    orchestrator: Orchestrator,
    admin: Client,
    credentials: Credentials,
    task: pb::Task,
    root: tempfile::TempDir,
    _data: tempfile::TempDir,
}

async fn setup() -> Setup {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::start(
        &data.path().join("chorus.db").display().to_string(),
        data.path(),
    )
    .await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "matrix", root.path()).await;
    add_agent(&mut admin, &ws, "lead", &["handoff", "file.read"], "").await;
    let task = chorus_tests::agents::planned_task(&mut admin, &ws, "a task").await;
    let run = admin
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "lead".into(),
            ttl_secs: 0,
        })
        .await
        .expect("run")
        .into_inner();
    let revoked = key(&mut admin, "gone", pb::Role::Admin).await;
    admin
        .revoke_api_key(pb::RevokeApiKeyRequest {
            id: revoked.key.expect("key").id,
        })
        .await
        .expect("revoke");
    let credentials = Credentials {
        unknown: chorus_auth::ApiKey::generate().expose().to_owned(),
        revoked: revoked.secret,
        run: run.token,
        admin: orchestrator.admin_key.clone(),
        operator: key(&mut admin, "ops", pb::Role::Operator).await.secret,
        viewer: key(&mut admin, "dash", pb::Role::Viewer).await.secret,
        tool_exec: key(&mut admin, "tools", pb::Role::ToolExec).await.secret,
    };
    Setup {
        orchestrator,
        admin,
        credentials,
        task,
        root,
        _data: data,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_takes_exactly_the_credentials_its_rule_names() {
    let Setup {
        orchestrator,
        mut admin,
        credentials,
        task,
        root: _root,
        _data,
    } = setup().await;
    let before = snapshot(&mut admin, &task.id).await;
    let orchestrator_channel = channel_to(orchestrator.addr).await;
    let tool_exec_channel = channel_to(orchestrator.tool_exec_addr).await;
    let methods: Vec<(Method, &tonic::transport::Channel)> = raw::methods("chorus.orchestrator.v1")
        .into_iter()
        .map(|m| (m, &orchestrator_channel))
        .chain(
            raw::methods("chorus.tools.v1")
                .into_iter()
                .map(|m| (m, &tool_exec_channel)),
        )
        .collect();
    assert!(methods.len() > 40, "{} methods", methods.len());
    let mut wrong = Vec::new();
    for (method, channel) in &methods {
        for caller in CALLERS {
            let result = raw::call(
                (*channel).clone(),
                method,
                credentials.of(caller),
                Vec::new(),
            )
            .await;
            let code = result.as_ref().err().map_or(Code::Ok, tonic::Status::code);
            let message = result
                .as_ref()
                .err()
                .map(|s| s.message().to_owned())
                .unwrap_or_default();
            let expected_refusal = match caller {
                Caller::Nobody | Caller::UnknownKey | Caller::RevokedKey => Code::Unauthenticated,
                _ => Code::PermissionDenied,
            };
            let ok = if allowed(&method.name, caller) {
                // Past the layer: the handler answers (an empty request is
                // mostly invalid), and never with a refusal of the caller —
                // but for tool-exec's calls, whose empty body has no run token.
                let body_has_no_token = caller == Caller::ToolExec
                    && matches!(
                        method.name.as_str(),
                        "AgentTools/AuthorizeToolCall" | "AgentTools/RecordToolCall"
                    );
                if body_has_no_token {
                    code == Code::Unauthenticated && message.contains("no run token")
                } else {
                    !matches!(code, Code::Unauthenticated | Code::PermissionDenied)
                }
            } else {
                code == expected_refusal && !message.is_empty()
            };
            if !ok {
                wrong.push(format!("{} by {caller:?}: {code:?} {message}", method.name));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(
        snapshot(&mut admin, &task.id).await,
        before,
        "a call changed the state"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_that_would_change_something_change_nothing() {
    let Setup {
        orchestrator,
        mut admin,
        credentials,
        task,
        root,
        _data,
    } = setup().await;
    let before = snapshot(&mut admin, &task.id).await;
    let admin_key_id = admin
        .list_api_keys(pb::ListApiKeysRequest::default())
        .await
        .expect("keys")
        .into_inner()
        .keys[0]
        .id
        .clone();
    for caller in [
        Caller::Nobody,
        Caller::RevokedKey,
        Caller::RunToken,
        Caller::Viewer,
        Caller::ToolExec,
    ] {
        let mut client = match credentials.of(caller) {
            Some(credential) => client_at(orchestrator.addr, credential).await,
            None => pb::orchestrator_client::OrchestratorClient::with_interceptor(
                channel_to(orchestrator.addr).await,
                chorus_tests::credentials::Bearer::none(),
            ),
        };
        let outcomes = [
            client
                .create_workspace(pb::CreateWorkspaceRequest {
                    name: "stolen".into(),
                    root: root.path().display().to_string(),
                })
                .await
                .map(|_| ()),
            client
                .create_task(pb::CreateTaskRequest {
                    budget: None,
                    workspace_id: task.workspace_id.clone(),
                    description: "injected".into(),
                    source: None,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            client
                .cancel_task(pb::CancelTaskRequest {
                    id: task.id.clone(),
                    reason: "stop".into(),
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            client
                .update_task_status(pb::UpdateTaskStatusRequest {
                    id: task.id.clone(),
                    status: "failed".into(),
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            client
                .open_run(pb::OpenRunRequest {
                    task_id: task.id.clone(),
                    agent: "lead".into(),
                    ttl_secs: 0,
                })
                .await
                .map(|_| ()),
            client
                .create_api_key(pb::CreateApiKeyRequest {
                    name: "mine".into(),
                    role: pb::Role::Admin.into(),
                })
                .await
                .map(|_| ()),
            client
                .revoke_api_key(pb::RevokeApiKeyRequest {
                    id: admin_key_id.clone(),
                })
                .await
                .map(|_| ()),
        ];
        for (i, outcome) in outcomes.into_iter().enumerate() {
            let err = outcome.expect_err(&format!("call {i} by {caller:?} was accepted"));
            assert!(
                matches!(err.code(), Code::Unauthenticated | Code::PermissionDenied),
                "call {i} by {caller:?}: {err:?}"
            );
        }
    }
    assert_eq!(snapshot(&mut admin, &task.id).await, before);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_managed_by_admins_shown_once_and_refused_once_revoked() {
    let Setup {
        orchestrator,
        mut admin,
        task,
        ..
    } = setup().await;
    let made = key(&mut admin, "ci", pb::Role::Operator).await;
    let listed = admin
        .list_api_keys(pb::ListApiKeysRequest::default())
        .await
        .expect("list")
        .into_inner()
        .keys;
    let entry = listed.iter().find(|k| k.name == "ci").expect("listed");
    assert_eq!(entry.role, pb::Role::Operator as i32);
    assert!(made.secret.starts_with(&format!("chorus_{}_", entry.id)));
    assert!(
        !format!("{listed:?}").contains(&made.secret),
        "the secret is never listed"
    );
    let taken = admin
        .create_api_key(pb::CreateApiKeyRequest {
            name: "ci".into(),
            role: pb::Role::Viewer.into(),
        })
        .await
        .expect_err("a name in use");
    assert_eq!(taken.code(), Code::AlreadyExists, "{taken:?}");
    let no_role = admin
        .create_api_key(pb::CreateApiKeyRequest {
            name: "norole".into(),
            role: 0,
        })
        .await
        .expect_err("no role");
    assert_eq!(no_role.code(), Code::InvalidArgument, "{no_role:?}");

    let mut ci = client_at(orchestrator.addr, &made.secret).await;
    ci.get_task(pb::GetTaskRequest {
        id: task.id.clone(),
        ..Default::default()
    })
    .await
    .expect("an operator reads");
    admin
        .revoke_api_key(pb::RevokeApiKeyRequest {
            id: entry.id.clone(),
        })
        .await
        .expect("revoke");
    let refused = ci
        .get_task(pb::GetTaskRequest {
            id: task.id,
            ..Default::default()
        })
        .await
        .expect_err("revoked");
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert!(refused.message().contains("revoked"), "{refused:?}");
    // The name is free again once its key is revoked.
    key(&mut admin, "ci", pb::Role::Viewer).await;
    orchestrator.stop().await;
}

/// The last admin key that is not revoked cannot revoke itself (nor be
/// revoked by anyone): that locked every administrator out until a restart
/// wrote a new key. Once another admin key exists, it can go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_admin_key_is_not_revoked() {
    let Setup {
        orchestrator,
        mut admin,
        task,
        ..
    } = setup().await;
    let admins = |keys: Vec<pb::ApiKey>| -> Vec<String> {
        keys.into_iter()
            .filter(|k| k.role == pb::Role::Admin as i32)
            .map(|k| k.id)
            .collect()
    };
    let active = admins(
        admin
            .list_api_keys(pb::ListApiKeysRequest::default())
            .await
            .expect("list")
            .into_inner()
            .keys,
    );
    assert_eq!(active.len(), 1, "the harness's admin key only: {active:?}");
    let last = active[0].clone();
    let refused = admin
        .revoke_api_key(pb::RevokeApiKeyRequest { id: last.clone() })
        .await
        .expect_err("the last admin key revoked");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("last admin key")
            && refused.message().contains("create another admin key"),
        "{refused:?}"
    );
    admin
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("the key still works");

    let other = key(&mut admin, "second-admin", pb::Role::Admin).await;
    admin
        .revoke_api_key(pb::RevokeApiKeyRequest { id: last })
        .await
        .expect("with another admin key, the first can go");
    let mut second = client_at(orchestrator.addr, &other.secret).await;
    let refused = second
        .revoke_api_key(pb::RevokeApiKeyRequest {
            id: other.key.expect("key").id,
        })
        .await
        .expect_err("now the second is the last");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    second
        .get_task(pb::GetTaskRequest {
            id: task.id,
            ..Default::default()
        })
        .await
        .expect("the second admin key works");
    orchestrator.stop().await;
}
