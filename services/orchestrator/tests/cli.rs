//! The `chorus-orchestrator` command line as an operator meets it. (Having an
//! integration test also makes `cargo test --workspace` build the binary, which
//! the end-to-end tests that kill and restart it run.)

use std::process::Command;

#[test]
fn help_documents_the_run_and_handoff_timeouts() {
    let output = Command::new(env!("CARGO_BIN_EXE_chorus-orchestrator"))
        .arg("--help")
        .output()
        .expect("run chorus-orchestrator --help");
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--run-timeout-secs",
        "--handoff-timeout-secs",
        "CHORUS_HANDOFF_TIMEOUT_SECS",
        "--database-url",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn a_bad_flag_value_is_refused_with_the_flag_named() {
    let output = Command::new(env!("CARGO_BIN_EXE_chorus-orchestrator"))
        .args(["--handoff-timeout-secs", "soon"])
        .output()
        .expect("run chorus-orchestrator");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--handoff-timeout-secs"), "{stderr}");
}
