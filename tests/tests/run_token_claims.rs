//! A run token is checked claim by claim against its stored run, and the calls
//! that record history take only tool-exec's own key. An attacker holding the
//! signing key (a stolen key set) re-signs an agent's token with another
//! workspace root, task, agent, tool list or expiry: refused, nothing read,
//! nothing recorded. An agent that forges AuthorizeToolCall or RecordToolCall
//! with its own token, active or finished, is refused and nothing is recorded.

use std::time::{Duration, UNIX_EPOCH};

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_run_token::{RunGrant, RunTokenSigner};
use chorus_tests::agents::{Client, add_agent, history, workspace};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::{Orchestrator, channel_to};
use chorus_tests::{ToolsEnv, chorus_tools};
use serde_json::json;
use tonic::Code;

struct Setup {
    orchestrator: Orchestrator,
    client: Client,
    /// The deployment's own key set, as an attacker who stole it has it.
    stolen: RunTokenSigner,
    task: pb::Task,
    other_task: pb::Task,
    opened: pb::OpenRunResponse,
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
    _data: tempfile::TempDir,
}

async fn setup() -> Setup {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(root.path().join("notes.txt"), "inside\n").expect("notes");
    std::fs::write(outside.path().join("notes.txt"), "outside-secret\n").expect("secret");
    let orchestrator = Orchestrator::start(
        &data.path().join("chorus.db").display().to_string(),
        data.path(),
    )
    .await;
    let stolen = chorus_run_token::load_or_create_signer(data.path()).expect("key set");
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "claims", root.path()).await;
    add_agent(
        &mut client,
        &ws,
        "reader",
        &["file.read", "task.comment"],
        "",
    )
    .await;
    add_agent(
        &mut client,
        &ws,
        "builder",
        &["file.read", "file.write", "bash"],
        "",
    )
    .await;
    let task = chorus_tests::agents::planned_task(&mut client, &ws, "read the notes").await;
    let other_task = chorus_tests::agents::planned_task(&mut client, &ws, "another task").await;
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "reader".into(),
            ttl_secs: 600,
        })
        .await
        .expect("run")
        .into_inner();
    Setup {
        orchestrator,
        client,
        stolen,
        task,
        other_task,
        opened,
        root,
        outside,
        _data: data,
    }
}

fn env(setup: &Setup, token: String) -> ToolsEnv {
    ToolsEnv {
        token: Some(token),
        tools_addr: Some(setup.orchestrator.tool_exec_addr.to_string()),
        orchestrator_addr: Some(setup.orchestrator.addr.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_re_signed_with_other_claims_is_refused_and_nothing_is_read() {
    let mut s = setup().await;
    let verified = s
        .stolen
        .verifier()
        .verify_token(&s.opened.token)
        .expect("the real token");
    let honest = verified.grant.clone();
    let expires = UNIX_EPOCH + Duration::from_secs(verified.expires_at);
    // The real token works.
    let read = json!({"tool": "file.read", "path": "notes.txt"}).to_string();
    let answer = chorus_tools(&env(&s, s.opened.token.clone()), &[&read]).await;
    assert!(
        answer.output()["content"]
            .as_str()
            .expect("content")
            .contains("inside")
    );
    let before = history(&mut s.client, &s.task.id).await;

    let forged: Vec<(&str, RunGrant, std::time::SystemTime)> = vec![
        (
            "workspace root",
            RunGrant {
                root: s.outside.path().to_owned(),
                egress: Vec::new(),
                ..honest.clone()
            },
            expires,
        ),
        (
            "workspace root",
            RunGrant {
                root: "/".into(),
                egress: Vec::new(),
                ..honest.clone()
            },
            expires,
        ),
        (
            "task",
            RunGrant {
                task_id: s.other_task.id.clone(),
                ..honest.clone()
            },
            expires,
        ),
        (
            "agent",
            RunGrant {
                agent: "builder".into(),
                ..honest.clone()
            },
            expires,
        ),
        (
            "tool list",
            RunGrant {
                tools: [honest.tools.clone(), vec!["bash".into()]].concat(),
                ..honest.clone()
            },
            expires,
        ),
        (
            "expiry",
            honest.clone(),
            expires + Duration::from_secs(3600),
        ),
    ];
    for (claim, grant, expires) in forged {
        let token = s.stolen.mint_until(&grant, expires);
        for call in [
            read.clone(),
            json!({"tool": "task.comment", "text": "forged"}).to_string(),
        ] {
            let refused = chorus_tools(&env(&s, token.clone()), &[&call]).await;
            let message = refused.expect_failure(3, "unauthenticated");
            assert!(message.contains(claim), "{claim}: {message}");
            assert!(!refused.stdout.contains("outside-secret"), "{refused:?}");
        }
    }
    assert_eq!(
        history(&mut s.client, &s.task.id).await.len(),
        before.len(),
        "a refused token leaves no trace in the history"
    );
    s.orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_tool_exec_records_and_authorizes_and_never_for_an_ended_run_or_a_tool_not_granted() {
    let mut s = setup().await;
    let before = history(&mut s.client, &s.task.id).await.len();
    let agent_tools = |credential: &str| {
        let credential = credential.to_owned();
        let addr = s.orchestrator.addr;
        async move {
            AgentToolsClient::with_interceptor(channel_to(addr).await, Bearer::new(&credential))
        }
    };
    let record = |token: &str, tool: &str| pb::RecordToolCallRequest {
        tool: tool.into(),
        input: None,
        status: "ok".into(),
        duration_ms: 1,
        output_excerpt: "done".into(),
        run_token: token.into(),
        ..Default::default()
    };
    let authorize = |token: &str, tool: &str| pb::AuthorizeToolCallRequest {
        tool: tool.into(),
        run_token: token.into(),
        ..Default::default()
    };
    // The agent itself, with its own active token as the credential.
    let mut agent = agent_tools(&s.opened.token).await;
    let err = agent
        .record_tool_call(record(&s.opened.token, "bash"))
        .await
        .expect_err("an agent records");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = agent
        .authorize_tool_call(authorize(&s.opened.token, "file.read"))
        .await
        .expect_err("an agent authorizes");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    // An admin is not tool-exec either.
    let mut admin = agent_tools(&s.orchestrator.admin_key).await;
    let err = admin
        .record_tool_call(record(&s.opened.token, "file.read"))
        .await
        .expect_err("an admin records");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");

    // tool-exec's key, but a tool the run was not granted.
    let service_key = s
        .client
        .create_api_key(pb::CreateApiKeyRequest {
            name: "tool-exec".into(),
            role: pb::Role::ToolExec.into(),
        })
        .await
        .expect("key")
        .into_inner()
        .secret;
    let mut tool_exec = agent_tools(&service_key).await;
    let err = tool_exec
        .record_tool_call(record(&s.opened.token, "bash"))
        .await
        .expect_err("a tool not granted");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert_eq!(history(&mut s.client, &s.task.id).await.len(), before);

    // The run ends: nothing more is authorized or recorded for it.
    s.client
        .finish_run(pb::FinishRunRequest {
            id: s.opened.run.clone().expect("run").id,
            reason: "done".into(),
        })
        .await
        .expect("finish");
    let ended = history(&mut s.client, &s.task.id).await.len();
    let err = tool_exec
        .record_tool_call(record(&s.opened.token, "file.read"))
        .await
        .expect_err("an ended run");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let err = tool_exec
        .authorize_tool_call(authorize(&s.opened.token, "file.read"))
        .await
        .expect_err("an ended run");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(history(&mut s.client, &s.task.id).await.len(), ended);
    let _ = (&s.root, &s.outside);
    s.orchestrator.stop().await;
}

/// An ended run can do nothing: its token, still within its expiry, gets
/// neither the catalog nor the status from tool-exec (it got both before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_runs_token_gets_nothing_from_tool_exec() {
    use chorus_proto::tools::v1 as tools;
    use tools::tool_exec_client::ToolExecClient;
    let mut s = setup().await;
    let mut agent = ToolExecClient::with_interceptor(
        channel_to(s.orchestrator.tool_exec_addr).await,
        Bearer::new(&s.opened.token),
    );
    agent
        .list_tools(tools::ListToolsRequest::default())
        .await
        .expect("an active run lists its tools");
    agent
        .get_status(tools::GetStatusRequest {})
        .await
        .expect("an active run reads the status");

    s.client
        .finish_run(pb::FinishRunRequest {
            id: s.opened.run.clone().expect("run").id,
            reason: "done".into(),
        })
        .await
        .expect("finish");
    let err = agent
        .list_tools(tools::ListToolsRequest::default())
        .await
        .map(drop)
        .expect_err("an ended run's token listed the tools");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let err = agent
        .get_status(tools::GetStatusRequest {})
        .await
        .map(drop)
        .expect_err("an ended run's token read the status");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("ended") || err.message().contains("not active"),
        "{err:?}"
    );
    let _ = (&s.root, &s.outside, &s.other_task, &s.stolen);
    s.orchestrator.stop().await;
}

/// ListTools `granted_only` (what an MCP session lists): exactly the run's
/// granted tools, checked as a call is (an ended run's token is refused) and
/// recorded nowhere; an API key, which has no run, is told to use the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_lists_exactly_its_granted_tools_and_nothing_is_recorded() {
    use chorus_proto::tools::v1 as tools;
    use tools::tool_exec_client::ToolExecClient;
    let mut s = setup().await;
    let granted = tools::ListToolsRequest { granted_only: true };
    let before = history(&mut s.client, &s.task.id).await.len();
    let mut agent = ToolExecClient::with_interceptor(
        channel_to(s.orchestrator.tool_exec_addr).await,
        Bearer::new(&s.opened.token),
    );
    let listed = agent
        .list_tools(granted)
        .await
        .expect("an active run lists its tools")
        .into_inner();
    let mut names: Vec<String> = listed.tools.iter().map(|t| t.name.clone()).collect();
    names.sort_unstable();
    // The reader's allow-list, and what every run has.
    assert_eq!(
        names,
        ["completion-report", "file.read", "help", "task.comment"],
        "{listed:?}"
    );
    assert!(listed.profiles.is_empty(), "{:?}", listed.profiles);
    assert!(
        listed.tools.iter().all(|t| t.input_schema.is_some()),
        "each with its schema"
    );
    assert_eq!(
        history(&mut s.client, &s.task.id).await.len(),
        before,
        "listing recorded an event"
    );

    let mut viewer = ToolExecClient::with_interceptor(
        channel_to(s.orchestrator.tool_exec_addr).await,
        Bearer::new(&s.orchestrator.admin_key),
    );
    let err = viewer
        .list_tools(granted)
        .await
        .map(drop)
        .expect_err("an API key has no run");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("run's token"), "{err:?}");

    s.client
        .finish_run(pb::FinishRunRequest {
            id: s.opened.run.clone().expect("run").id,
            reason: "done".into(),
        })
        .await
        .expect("finish");
    let err = agent
        .list_tools(granted)
        .await
        .map(drop)
        .expect_err("an ended run's token listed its tools");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let _ = (&s.root, &s.outside, &s.other_task, &s.stolen);
    s.orchestrator.stop().await;
}
