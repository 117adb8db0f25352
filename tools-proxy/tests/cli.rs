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

/// Runs chorus-tools with a token and `stdin` as its standard input.
fn chorus_tools_reading(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;

    let mut child = Command::new(env!("CARGO_BIN_EXE_chorus-tools"))
        .args(args)
        .env("CHORUS_RUN_TOKEN", "t")
        .env_remove("CHORUS_TOOLS_ADDR")
        .env_remove("CHORUS_ORCHESTRATOR_ADDR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chorus-tools");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(stdin).expect("write stdin");
    drop(pipe);
    child.wait_with_output().expect("run chorus-tools")
}

#[test]
fn a_dash_reads_the_call_from_stdin_with_or_without_a_root() {
    let call = br#"{"tool":"web.search","query":"x"}"#;
    for args in [&["-"][..], &["/some/root", "-"]] {
        let out = chorus_tools_reading(args, call);
        assert_eq!(out.status.code(), Some(4), "{args:?}");
        let message = error_of(&out)["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(message.contains("native to your agent CLI"), "{message}");
    }
}

#[test]
fn a_dash_with_nothing_on_stdin_is_a_usage_error_saying_what_to_pipe() {
    let out = chorus_tools_reading(&["-"], b"  \n");
    assert_eq!(out.status.code(), Some(2));
    let message = error_of(&out)["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("chorus-tools - < call.json"), "{message}");
}

#[test]
fn help_tells_how_to_send_a_large_call() {
    let out = chorus_tools(&["--help"], None);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("chorus-tools [WORKSPACE_ROOT] - < call.json"),
        "{help}"
    );
    assert!(help.contains("reads the JSON from stdin"), "{help}");
}
