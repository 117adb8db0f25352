//! `chorus-tools mcp` with an MCP client no one here wrote (the official
//! TypeScript SDK) over stdio: it lists exactly the run's granted tools with
//! their schemas, calls each kind (tool-exec's, the orchestrator's), gets
//! `isError` for what the run may not do (a path outside, a tool not granted),
//! and nothing works with a finished run's token, another run's, or none.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{add_agent, history, opened_run, summary, workspace};
use chorus_tests::mcp::{is_error, run_client, sdk_or_skip, stdio, text};
use chorus_tests::orchestrator::OrchestratorProcess;
use serde_json::json;

async fn orchestrator(data: &std::path::Path) -> OrchestratorProcess {
    OrchestratorProcess::spawn(data, &data.join("chorus.db").display().to_string(), &[]).await
}

#[tokio::test]
async fn an_sdk_client_lists_exactly_the_granted_tools_and_calls_each_kind() {
    let Some(modules) = sdk_or_skip() else { return };
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "hello over mcp").expect("a file");
    let orchestrator = orchestrator(data.path()).await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "mcp", root.path()).await;
    add_agent(
        &mut admin,
        &ws,
        "mcp-writer",
        &["file.read", "file.create", "task.get"],
        "",
    )
    .await;
    let run = opened_run(&mut admin, &ws, "mcp-writer", "write over mcp").await;

    let plan = json!({
        "transport": stdio(&run),
        "steps": [
            {"list": true},
            {"call": "file_read", "arguments": {"path": "notes.txt"}},
            {"call": "file_create", "arguments": {"path": "made.txt", "content": "made over mcp"}},
            {"call": "file_read", "arguments": {"path": "../outside.txt"}},
            {"call": "file_delete", "arguments": {"path": "notes.txt"}},
            {"call": "task_get", "arguments": {}},
            {"call": "completion-report", "arguments": {
                "status": "complete", "summary": "wrote made.txt", "output": "made.txt"}},
        ],
    });
    let got = run_client(&modules, &plan).await;
    let results = got["results"].as_array().unwrap_or_else(|| panic!("{got}"));

    let mut names: Vec<&str> = results[0]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools listed: {}", results[0]))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "completion-report",
            "file_create",
            "file_read",
            "help",
            "task_get"
        ],
        "exactly the granted tools, and those every run has"
    );
    let file_read = results[0]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "file_read"))
        .expect("file_read listed");
    assert_eq!(
        file_read["inputSchema"]["required"],
        json!(["path"]),
        "the catalog's schema: {file_read}"
    );
    assert!(
        file_read["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );

    let read = &results[1];
    assert!(
        !is_error(read) && text(read).contains("hello over mcp"),
        "{read}"
    );
    assert!(
        read["result"]["structuredContent"].is_object(),
        "the output as structured content: {read}"
    );
    assert!(!is_error(&results[2]), "{}", results[2]);
    assert_eq!(
        std::fs::read_to_string(root.path().join("made.txt")).expect("created"),
        "made over mcp"
    );
    let outside = &results[3];
    assert!(is_error(outside), "a path outside the workspace: {outside}");
    let denied = &results[4];
    assert!(
        is_error(denied) && text(denied).contains("permission_denied"),
        "a tool not granted: {denied}"
    );
    assert!(
        root.path().join("notes.txt").exists(),
        "nothing was deleted"
    );
    let task = &results[5];
    assert!(
        !is_error(task) && text(task).contains("write over mcp"),
        "the orchestrator's tool: {task}"
    );
    assert!(!is_error(&results[6]), "{}", results[6]);

    // Recorded as any call of the run is.
    let events = summary(&history(&mut admin, &run.run.as_ref().expect("run").task_id).await);
    for expected in [
        "tool_executed file.read",
        "tool_executed file.create",
        "tool_denied file.delete",
    ] {
        assert!(
            events.iter().any(|e| e.starts_with(expected)),
            "{expected} not in {events:?}"
        );
    }
    orchestrator.kill().await;
}

#[tokio::test]
async fn nothing_works_with_a_finished_run_another_runs_token_or_none() {
    let Some(modules) = sdk_or_skip() else { return };
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let mine = tempfile::tempdir().expect("another root");
    std::fs::write(mine.path().join("secret.txt"), "not yours").expect("a file");
    let orchestrator = orchestrator(data.path()).await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "theirs", root.path()).await;
    add_agent(&mut admin, &ws, "mcp-reader", &["file.read"], "").await;

    // A finished run: listing fails, nothing is called.
    let run = opened_run(&mut admin, &ws, "mcp-reader", "finished").await;
    admin
        .finish_run(pb::FinishRunRequest {
            id: run.run.as_ref().expect("run").id.clone(),
            ..Default::default()
        })
        .await
        .expect("finish");
    let plan = json!({"transport": stdio(&run), "steps": [
        {"list": true},
        {"call": "file_read", "arguments": {"path": "notes.txt"}},
    ]});
    let got = run_client(&modules, &plan).await;
    let results = got["results"].as_array().expect("results");
    assert!(
        results[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("has ended")),
        "a finished run lists nothing: {}",
        results[0]
    );
    assert!(
        is_error(&results[1]) && text(&results[1]).contains("has ended"),
        "a finished run calls nothing: {}",
        results[1]
    );

    // Another run's token: its session acts in its own workspace only; a
    // path into this workspace is outside it.
    let theirs = opened_run(&mut admin, &ws, "mcp-reader", "another run").await;
    let secret = format!("{}/secret.txt", mine.path().display());
    let plan = json!({"transport": stdio(&theirs), "steps": [
        {"call": "file_read", "arguments": {"path": secret}},
    ]});
    let got = run_client(&modules, &plan).await;
    let crossed = &got["results"][0];
    assert!(
        is_error(crossed) && !text(crossed).contains("not yours"),
        "another workspace's file with another run's token: {crossed}"
    );

    // No token: the server says so and stops before any client waits.
    let mut none = stdio(&run);
    none["stdio"]["env"]
        .as_object_mut()
        .expect("env")
        .remove("CHORUS_RUN_TOKEN");
    let got = run_client(
        &modules,
        &json!({"transport": none, "steps": [{"list": true}]}),
    )
    .await;
    assert!(
        got.get("connect_error").is_some(),
        "no token, no session: {got}"
    );
    orchestrator.kill().await;
}
