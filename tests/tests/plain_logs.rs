//! What the orchestrator's text log says at start, as an operator reads it
//! from a file or a pipe (`podman logs`, a log collector): plain text (colour
//! codes only on a terminal), and no warning about a setting it was given.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// The orchestrator's text log to a pipe, from its start until it serves,
/// started with `args` on a data directory of its own.
fn log_until_serving(data: &std::path::Path, args: &[&str]) -> Vec<String> {
    let mut child = Command::new(chorus_tests::built_bin(
        "chorus-orchestrator",
        "chorus-orchestrator",
    ))
    .args([
        "--listen",
        "127.0.0.1:0",
        "--tool-exec-listen",
        "127.0.0.1:0",
        "--console-listen",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(data)
    .arg("--database-url")
    .arg(data.join("chorus.db"))
    .arg("--workspace-roots")
    .arg(data)
    .args(["--log-format", "text"])
    .args(args)
    .env_remove("NO_COLOR")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start chorus-orchestrator");
    let mut seen = Vec::new();
    for line in BufReader::new(child.stderr.take().expect("stderr")).lines() {
        let line = line.expect("read the log");
        let serving = line.contains("orchestrator serving");
        seen.push(line);
        if serving {
            break;
        }
    }
    child.kill().expect("stop it");
    child.wait().expect("reap it");
    assert!(
        seen.iter().any(|l| l.contains("orchestrator serving")),
        "the orchestrator did not serve; its log:\n{}",
        seen.join("\n")
    );
    seen
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let data = tempfile::tempdir().expect("data");
    let seen = log_until_serving(data.path(), &[]);
    let coloured: Vec<&String> = seen.iter().filter(|l| l.contains('\u{1b}')).collect();
    assert!(
        coloured.is_empty(),
        "log lines written to a pipe carry terminal escape codes:\n{}",
        coloured
            .iter()
            .map(|l| l.escape_debug().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A separate tool-exec's key given as a file: the log says where it is
/// read, and does not warn that the key is missing (it did).
#[test]
fn a_separate_tool_execs_key_file_is_acknowledged_not_warned_about() {
    let data = tempfile::tempdir().expect("data");
    let key_file = data.path().join("tool-exec.key");
    let key = chorus_auth::ApiKey::generate();
    std::fs::write(&key_file, format!("{}\n", key.expose())).expect("key file");
    let key_arg = key_file.display().to_string();
    let warning = "start chorus-tool-exec with";
    let given = log_until_serving(
        data.path(),
        &["--no-embedded-tool-exec", "--tool-exec-key-file", &key_arg],
    );
    assert!(
        given
            .iter()
            .any(|l| l.contains("presents the key in this file")),
        "{}",
        given.join("\n")
    );
    assert!(
        !given.iter().any(|l| l.contains(warning)),
        "{}",
        given.join("\n")
    );
    // Without the file, the warning says what to do.
    let other = tempfile::tempdir().expect("data");
    let without = log_until_serving(other.path(), &["--no-embedded-tool-exec"]);
    assert!(
        without
            .iter()
            .any(|l| l.contains(warning) && l.contains("WARN")),
        "{}",
        without.join("\n")
    );
}
