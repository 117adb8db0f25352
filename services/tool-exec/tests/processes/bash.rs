//! bash: cwd, exit codes, streams, stdin, environment, output cap, timeouts,
//! cancellation, and that no process a command starts outlives the call.

use chorus_tool_exec::{Limits, ToolError};
use serde_json::{Value, json};

use crate::common::{Harness, in_band_code, is_running, pids};

fn output(outcome: &chorus_tool_exec::context::ToolOutcome) -> chorus_catalog::outputs::Bash {
    serde_json::from_value(outcome.output.clone()).expect("bash output")
}

#[tokio::test]
async fn commands_run_in_the_workspace_root() {
    let h = Harness::new();
    let out = output(&h.ok("bash", json!({"command": "pwd"})).await);
    assert_eq!(out.stdout.trim(), h.root.to_str().expect("utf8"));
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn a_non_zero_exit_is_a_result_not_an_error() {
    let h = Harness::new();
    let outcome = h
        .ok(
            "bash",
            json!({"command": "echo partial; echo oops >&2; exit 7"}),
        )
        .await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.metadata["exit_code"], json!(7));
    assert_eq!(outcome.metadata["timed_out"], json!(false));
    let out = output(&outcome);
    assert_eq!(out.exit_code, Some(7));
    assert_eq!(out.signal, None);
    assert_eq!(out.stdout, "partial\n");
    assert_eq!(out.stderr, "oops\n");
    assert!(!out.timed_out && !out.truncated);
}

#[tokio::test]
async fn a_command_killed_by_a_signal_reports_the_signal() {
    let h = Harness::new();
    let out = output(&h.ok("bash", json!({"command": "kill -9 $$"})).await);
    assert_eq!(out.exit_code, None);
    assert_eq!(out.signal, Some(9));
}

#[tokio::test]
async fn stdin_is_closed() {
    let h = Harness::new();
    let out = output(
        &h.ok("bash", json!({"command": "cat; echo after-cat"}))
            .await,
    );
    assert_eq!(out.stdout, "after-cat\n");
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn the_workspace_root_is_the_only_chorus_variable() {
    let h = Harness::new();
    let out = output(&h.ok("bash", json!({"command": "env"})).await);
    let chorus: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("CHORUS_"))
        .collect();
    let expected = format!("CHORUS_WORKSPACE_ROOT={}", h.root.display());
    assert_eq!(chorus, vec![expected.as_str()]);
    // A secret the service does have in its environment is not passed on:
    // CHORUS_TEST_SECRET is set only in the child of the test below.
    assert!(!out.stdout.contains("not-for-agents"));
}

/// Runs the test above in a copy of this test binary whose environment holds
/// CHORUS_* secrets, as tool-exec's would (tests never change their own
/// environment).
#[test]
fn variables_of_the_service_are_not_passed_to_commands() {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "bash::the_workspace_root_is_the_only_chorus_variable",
            "--exact",
            "--test-threads=1",
        ])
        .env("CHORUS_TEST_SECRET", "not-for-agents")
        .env("CHORUS_RUN_TOKEN", "not-for-agents")
        .output()
        .expect("test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[tokio::test]
async fn output_past_the_cap_is_cut_and_the_command_still_finishes() {
    let h = Harness::new();
    let cap = Limits::default().max_output_bytes;
    let outcome = h
        .ok(
            "bash",
            json!({"command": "yes | head -c 10000000; echo tail >&2"}),
        )
        .await;
    let out = output(&outcome);
    assert_eq!(out.exit_code, Some(0));
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), cap);
    assert!(out.stdout.starts_with("y\ny\n"));
    assert_eq!(out.stderr, "tail\n");
}

#[tokio::test]
async fn a_timeout_kills_the_whole_group_even_processes_that_ignore_sigterm() {
    let h = Harness::new();
    // A grandchild that ignores SIGTERM, and its own child.
    let command = r#"bash -c 'trap "" TERM; sleep 1000 & echo $!; wait' & echo $!; sleep 1000"#;
    let outcome = h
        .ok("bash", json!({"command": command, "timeout_secs": 1}))
        .await;
    assert_eq!(in_band_code(&outcome), Some("deadline_exceeded"));
    let message = &outcome.error.as_ref().expect("error").message;
    assert!(message.contains("timed out after 1 s"), "{message}");
    assert!(
        message.contains("every process it started were killed"),
        "{message}"
    );
    assert_eq!(outcome.metadata["timed_out"], json!(true));
    let out = output(&outcome);
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert_eq!(out.signal, Some(9));
    let started = pids(&out.stdout);
    assert_eq!(started.len(), 2, "partial output: {:?}", out.stdout);
    for pid in started {
        assert!(!is_running(pid), "process {pid} survived the timeout");
    }
}

#[tokio::test]
async fn background_jobs_do_not_outlive_the_command() {
    let h = Harness::new();
    let outcome = h
        .ok("bash", json!({"command": "sleep 1000 & echo $!"}))
        .await;
    assert_eq!(outcome.error, None);
    let out = output(&outcome);
    assert_eq!(out.exit_code, Some(0));
    let started = pids(&out.stdout);
    assert_eq!(started.len(), 1);
    assert!(!is_running(started[0]), "background job survived");
}

#[tokio::test]
async fn shutdown_kills_a_running_command_promptly() {
    let h = Harness::new();
    let fifo = h.root.join("started.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());

    // The command tells the test its background job's pid through the fifo
    // (opening it blocks until the test reads), then waits forever.
    let runner = h.runner.clone();
    let grant = h.grant();
    let call = tokio::spawn(async move {
        runner
            .execute(
                grant,
                "bash",
                json!({"command": "sleep 1000 & echo $! > started.fifo; wait"}),
            )
            .await
    });
    let line = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo))
        .await
        .expect("reader")
        .expect("reads the fifo");
    let pid: i32 = line.trim().parse().expect("a pid");
    assert!(is_running(pid));

    h.shutdown.cancel();
    let outcome = call.await.expect("call task").expect("an in-band answer");
    assert_eq!(in_band_code(&outcome), Some("cancelled"));
    assert!(!is_running(pid), "the command survived the shutdown");
    assert_eq!(output(&outcome).signal, Some(9));
}

#[tokio::test]
async fn timeouts_of_zero_or_above_the_maximum_are_refused() {
    let h = Harness::new();
    let max = Limits::default().bash_max_timeout.as_secs();
    for timeout in [0, max + 1] {
        let err = h
            .call("bash", json!({"command": "true", "timeout_secs": timeout}))
            .await
            .expect_err("refused");
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
        assert!(err.to_string().contains("between 1 and"), "{err}");
    }
}

#[tokio::test]
async fn an_empty_command_is_refused() {
    let h = Harness::new();
    for command in [Value::from(""), Value::from("  \n")] {
        let err = h
            .call("bash", json!({ "command": command }))
            .await
            .expect_err("refused");
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    }
}

#[tokio::test]
async fn a_shut_down_runner_starts_nothing() {
    let h = Harness::new();
    h.shutdown.cancel();
    let err = h
        .call("bash", json!({"command": "touch should-not-exist"}))
        .await
        .expect_err("refused");
    assert!(matches!(err, ToolError::ShuttingDown));
    assert!(!h.root.join("should-not-exist").exists());
}
