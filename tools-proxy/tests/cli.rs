//! The chorus-tools command line on its own: version, usage errors, and the
//! errors it gives before contacting any service.

use std::process::{Command, Output};

fn chorus_tools(args: &[&str], token: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_chorus-tools"));
    command
        .args(args)
        .env_remove("CHORUS_RUN_TOKEN")
        .env_remove("CHORUS_TOOLS_ADDR")
        .env_remove("CHORUS_ORCHESTRATOR_ADDR");
    if let Some(token) = token {
        command.env("CHORUS_RUN_TOKEN", token);
    }
    command.output().expect("run chorus-tools")
}

fn error_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stderr).unwrap_or_else(|e| {
        panic!(
            "stderr is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn version_prints_and_succeeds() {
    let out = chorus_tools(&["--version"], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("chorus-tools "));
}

#[test]
fn no_arguments_is_a_usage_error_in_json() {
    let out = chorus_tools(&[], None);
    assert_eq!(out.status.code(), Some(2));
    let error = error_of(&out);
    assert_eq!(error["code"], "usage");
    assert!(
        error["message"]
            .as_str()
            .expect("message")
            .contains("chorus-tools [WORKSPACE_ROOT] '<JSON>'")
    );
}

#[test]
fn a_missing_token_is_a_usage_error_naming_the_variable() {
    let out = chorus_tools(&[r#"{"tool":"file.read","path":"a"}"#], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        error_of(&out)["message"]
            .as_str()
            .expect("message")
            .contains("CHORUS_RUN_TOKEN")
    );
}

#[test]
fn a_native_tool_is_refused_with_advice() {
    let out = chorus_tools(&[r#"{"tool":"web.search","query":"x"}"#], Some("t"));
    assert_eq!(out.status.code(), Some(4));
    assert!(
        error_of(&out)["message"]
            .as_str()
            .expect("message")
            .contains("native to your agent CLI")
    );
}
