//! The MCP endpoint over Streamable HTTP as an attacker meets it, with raw
//! HTTP requests: no token or a bad one is refused before anything of MCP
//! runs; a session stays with the run it began with; a browser origin that
//! is not listed, a Host that is not, and a body past the message limit are
//! refused; sessions past `--mcp-max-sessions` wait for one to end.

use chorus_tests::agents::{add_agent, opened_run, workspace};
use chorus_tests::mcp_http::{initialize, list_tools, open, send, send_unread};
use chorus_tests::orchestrator::OrchestratorProcess;
use http::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn the_endpoint_refuses_what_a_caller_may_not_do_and_bounds_what_it_holds() {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let db = data.path().join("chorus.db").display().to_string();
    let orchestrator = OrchestratorProcess::spawn(
        data.path(),
        &db,
        &[
            "--mcp-listen",
            "127.0.0.1:0",
            "--mcp-max-sessions",
            "2",
            "--mcp-allowed-origin",
            "https://console.example:443",
        ],
    )
    .await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "mcp-http", root.path()).await;
    add_agent(&mut admin, &ws, "reader", &["file.read"], "").await;
    let mine = opened_run(&mut admin, &ws, "reader", "mine").await;
    let theirs = opened_run(&mut admin, &ws, "reader", "theirs").await;
    let url = mine.mcp_url.clone();
    assert!(url.ends_with("/mcp"), "OpenRun names the endpoint: {url:?}");

    // No token, a malformed one, one not signed by Chorus: 401 before MCP.
    for bearer in [
        None,
        Some("Bearer "),
        Some("Bearer eyJhbGciOiJFZERTQSJ9.e30.AAAA"),
    ] {
        let headers: Vec<(&str, &str)> = bearer.map(|b| ("authorization", b)).into_iter().collect();
        let answer = send(Method::POST, &url, &headers, initialize()).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
        assert!(
            answer.headers.contains_key("www-authenticate"),
            "the refusal names the scheme"
        );
        assert!(answer.body.contains("run token"), "{}", answer.body);
    }

    // A browser page of an origin not listed cannot drive a run's tools.
    let bearer = format!("Bearer {}", mine.token);
    let answer = send(
        Method::POST,
        &url,
        &[
            ("authorization", &bearer),
            ("origin", "https://evil.example"),
        ],
        initialize(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
    // Nor a name that resolves here by DNS rebinding.
    let answer = send(
        Method::POST,
        &url,
        &[("authorization", &bearer), ("host", "rebound.example")],
        initialize(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);

    // A body past the message limit is refused unread.
    let huge = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "file_read", "arguments": {"path": "x".repeat(64 * 1024 * 1024)}}})
    .to_string();
    let answer = send_unread(&url, &[("authorization", &bearer)], huge).await;
    assert!(
        answer.is_none_or(|status| status == StatusCode::PAYLOAD_TOO_LARGE),
        "{answer:?}"
    );

    // A session stays with its run: another run's token cannot use it.
    let session = open(&url, &mine.token).await;
    let other = format!("Bearer {}", theirs.token);
    let answer = send(
        Method::POST,
        &url,
        &[("authorization", &other), ("mcp-session-id", &session)],
        list_tools(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
    assert!(
        answer.body.contains("session of its own"),
        "another run's token in a session: {}",
        answer.body
    );
    let answer = send(
        Method::POST,
        &url,
        &[("authorization", &bearer), ("mcp-session-id", &session)],
        list_tools(),
    )
    .await;
    assert!(
        answer.message()["result"]["tools"].is_array(),
        "its own run's token still works: {}",
        answer.body
    );

    // Two sessions at most: a third waits for one to end.
    let second = open(&url, &theirs.token).await;
    let answer = send(
        Method::POST,
        &url,
        &[("authorization", &bearer)],
        initialize(),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert!(answer.headers.contains_key("retry-after"));
    assert!(
        answer.body.contains("--mcp-max-sessions") || answer.body.contains("sessions are open")
    );
    let ended = send(
        Method::DELETE,
        &url,
        &[("authorization", &other), ("mcp-session-id", &second)],
        String::new(),
    )
    .await;
    assert!(ended.status.is_success(), "{} {}", ended.status, ended.body);
    open(&url, &mine.token).await;
    orchestrator.kill().await;
}
