//! The production shape: the orchestrator and chorus-tool-exec as separate
//! processes. tool-exec checks every call with the orchestrator using its own
//! service key and records it there; a canceled run's token is refused by
//! tool-exec at once; the signing key rotates while a run is live and both its
//! old token and new runs' tokens work (tool-exec fetches the new key itself).

use chorus_auth::Role;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, add_agent, history, workspace};
use chorus_tests::credentials::make_key;
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::tool_exec_process::ToolExecProcess;
use chorus_tests::{ToolsEnv, chorus_tools};
use serde_json::json;

/// A port nothing listens on right now, for the orchestrator that tool-exec is
/// told about before it starts.
fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

async fn open(client: &mut Client, task: &pb::Task) -> pb::OpenRunResponse {
    client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "scribe".into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner()
}

fn calls(events: &[pb::TaskEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind.starts_with("tool_"))
        .map(|e| {
            let data = chorus_tests::agents::data(e);
            format!(
                "{} {} {}",
                e.kind,
                data["tool"].as_str().unwrap_or_default(),
                data["status"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_separate_tool_exec_checks_records_refuses_ended_runs_and_follows_key_rotation() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let database = data.path().join("chorus.db").display().to_string();
    // An admin makes tool-exec's key; it is given to tool-exec as a file.
    let service_key = make_key(&database, "tool-exec", Role::ToolExec).await;
    let key_file = data.path().join("tool-exec.key");
    std::fs::write(&key_file, &service_key).expect("key file");

    let orchestrator_addr = free_port();
    let tool_exec = ToolExecProcess::spawn(orchestrator_addr, &key_file).await;
    let listen = orchestrator_addr.to_string();
    let tools_at = tool_exec.addr.to_string();
    let orchestrator = OrchestratorProcess::spawn(
        data.path(),
        &database,
        &["--listen", &listen, "--tool-exec-addr", &tools_at],
    )
    .await;
    let mut client = orchestrator.client().await;
    let status = client
        .get_status(pb::GetStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert!(!status.embedded_tool_exec);

    let ws = workspace(&mut client, "split", root.path()).await;
    add_agent(
        &mut client,
        &ws,
        "scribe",
        &["file.read", "file.create"],
        "",
    )
    .await;
    let task = chorus_tests::agents::planned_task(&mut client, &ws, "two processes").await;
    let first = open(&mut client, &task).await;
    assert_eq!(
        first.tools_addr, tools_at,
        "agents are sent to the separate tool-exec"
    );
    let env = |token: &str| ToolsEnv {
        token: Some(token.to_owned()),
        tools_addr: Some(tools_at.clone()),
        orchestrator_addr: Some(orchestrator.addr.to_string()),
    };
    let create =
        |name: &str| json!({"tool": "file.create", "path": name, "content": "x"}).to_string();

    // Calls work and are recorded; a refused one is recorded as denied.
    assert_eq!(
        chorus_tools(&env(&first.token), &[&create("a.md")])
            .await
            .output()["bytes_written"],
        1
    );
    chorus_tools(
        &env(&first.token),
        &[&json!({"tool": "bash", "command": "true"}).to_string()],
    )
    .await
    .expect_failure(3, "permission_denied");

    // The key rotates while the run is live: its token still works, and a new
    // run's token (signed with a key tool-exec has not seen) works too.
    let keys = client
        .rotate_run_token_key(pb::RotateRunTokenKeyRequest {})
        .await
        .expect("rotate")
        .into_inner();
    assert_eq!(keys.keys.len(), 2);
    assert_eq!(
        chorus_tools(&env(&first.token), &[&create("b.md")])
            .await
            .output()["bytes_written"],
        1
    );
    let second = open(&mut client, &task).await;
    assert_eq!(
        chorus_tools(&env(&second.token), &[&create("c.md")])
            .await
            .output()["bytes_written"],
        1
    );
    assert_eq!(
        calls(&history(&mut client, &task.id).await),
        [
            "tool_executed file.create ok",
            "tool_denied bash ",
            "tool_executed file.create ok",
            "tool_executed file.create ok",
        ]
    );

    // Canceled: tool-exec refuses the tokens at once, and records nothing more.
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "stop".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let before = history(&mut client, &task.id).await.len();
    for token in [&first.token, &second.token] {
        let refused = chorus_tools(&env(token), &[&create("late.md")]).await;
        let message = refused.expect_failure(1, "failed_precondition");
        assert!(message.contains("has ended"), "{message}");
    }
    assert!(!root.path().join("late.md").exists());
    assert_eq!(history(&mut client, &task.id).await.len(), before);

    // An operator's key is checked with the orchestrator too; a run token is
    // the only credential for ExecuteTool.
    let channel = chorus_tests::orchestrator::channel_to(tool_exec.addr).await;
    let mut tools = chorus_proto::tools::v1::tool_exec_client::ToolExecClient::with_interceptor(
        channel,
        chorus_tests::credentials::Bearer::new(&orchestrator.admin_key),
    );
    tools
        .get_status(chorus_proto::tools::v1::GetStatusRequest {})
        .await
        .expect("an admin reads tool-exec's status");
    let refused = tools
        .execute_tool(chorus_proto::tools::v1::ExecuteToolRequest {
            tool: "file.read".into(),
            arguments: None,
        })
        .await
        .expect_err("a key does not execute tools");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    assert!(orchestrator.stop().await.success());
    assert!(tool_exec.stop().await.success());
}

/// The deployed shape (compose, Kubernetes): tool-exec's key is a secret file
/// given to both services; the orchestrator takes it at start (the file is only
/// read), so no CreateApiKey call is needed. A restart with the same file changes
/// nothing; a file with no key, or with a revoked key, stops the start with a
/// message saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_exec_key_given_to_both_services_as_a_file_lets_tool_exec_in() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let database = data.path().join("chorus.db").display().to_string();
    let key_file = data.path().join("tool-exec.key");
    let key = chorus_auth::ApiKey::generate();
    std::fs::write(&key_file, format!("{}\n", key.expose())).expect("key file");
    let key_arg = key_file.display().to_string();

    let orchestrator_addr = free_port();
    let tool_exec = ToolExecProcess::spawn(orchestrator_addr, &key_file).await;
    let listen = orchestrator_addr.to_string();
    let tools_at = tool_exec.addr.to_string();
    let args = [
        "--listen",
        &listen,
        "--tool-exec-addr",
        &tools_at,
        "--tool-exec-key-file",
        &key_arg,
    ];
    let orchestrator = OrchestratorProcess::spawn(data.path(), &database, &args).await;
    let mut client = orchestrator.client().await;
    let keys = client
        .list_api_keys(pb::ListApiKeysRequest {
            include_revoked: true,
        })
        .await
        .expect("keys")
        .into_inner()
        .keys;
    let stored: Vec<(&str, &str)> = keys
        .iter()
        .filter(|k| k.role == pb::Role::ToolExec as i32)
        .map(|k| (k.id.as_str(), k.name.as_str()))
        .collect();
    assert_eq!(stored, [(key.id(), "tool-exec")]);

    let ws = workspace(&mut client, "split", root.path()).await;
    add_agent(&mut client, &ws, "scribe", &["file.create"], "").await;
    let task = chorus_tests::agents::planned_task(&mut client, &ws, "keyed by file").await;
    let run = open(&mut client, &task).await;
    let env = ToolsEnv {
        token: Some(run.token.clone()),
        tools_addr: Some(tools_at.clone()),
        orchestrator_addr: Some(listen.clone()),
    };
    let create = json!({"tool": "file.create", "path": "a.md", "content": "x"}).to_string();
    assert_eq!(
        chorus_tools(&env, &[&create]).await.output()["bytes_written"],
        1
    );
    assert_eq!(
        calls(&history(&mut client, &task.id).await),
        ["tool_executed file.create ok"],
        "tool-exec asked the orchestrator with the key from the file, and recorded"
    );
    assert!(orchestrator.stop().await.success());

    // Again with the same file: the key is there already.
    let orchestrator = OrchestratorProcess::spawn(data.path(), &database, &args).await;
    let mut client = orchestrator.client().await;
    let again = client
        .list_api_keys(pb::ListApiKeysRequest {
            include_revoked: true,
        })
        .await
        .expect("keys")
        .into_inner()
        .keys;
    let tool_exec_keys = |keys: &[pb::ApiKey]| {
        keys.iter()
            .filter(|k| k.role == pb::Role::ToolExec as i32)
            .count()
    };
    assert_eq!(tool_exec_keys(&again), 1);
    client
        .revoke_api_key(pb::RevokeApiKeyRequest {
            id: key.id().to_owned(),
        })
        .await
        .expect("revoke");
    assert!(orchestrator.stop().await.success());
    assert!(tool_exec.stop().await.success());

    // A revoked key, and a file that holds no key, stop the start.
    let refused = |file: &str| {
        let out = std::process::Command::new(chorus_tests::built_bin(
            "chorus-orchestrator",
            "chorus-orchestrator",
        ))
        .arg("--data-dir")
        .arg(data.path())
        .args(["--database-url", &database, "--listen", "127.0.0.1:0"])
        .args(["--console-listen", "127.0.0.1:0"])
        .args(["--no-embedded-tool-exec", "--tool-exec-key-file", file])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run chorus-orchestrator");
        assert!(!out.status.success(), "it started with {file}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let message = refused(&key_arg);
    assert!(
        message.contains("it was revoked") && message.contains("put a new key in the file"),
        "{message}"
    );
    let not_a_key = data.path().join("not-a-key");
    std::fs::write(&not_a_key, "hunter2\n").expect("file");
    let message = refused(&not_a_key.display().to_string());
    assert!(message.contains("does not hold an API key"), "{message}");
}
