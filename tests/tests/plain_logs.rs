//! Text logs written to a file or a pipe (`podman logs`, a log collector) are
//! plain text: colour codes only on a terminal.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let data = tempfile::tempdir().expect("data");
    let mut child = Command::new(chorus_tests::built_bin(
        "chorus-orchestrator",
        "chorus-orchestrator",
    ))
    .args([
        "--listen",
        "127.0.0.1:0",
        "--tool-exec-listen",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(data.path())
    .arg("--database-url")
    .arg(data.path().join("chorus.db"))
    .arg("--workspace-roots")
    .arg(data.path())
    .args(["--log-format", "text"])
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
