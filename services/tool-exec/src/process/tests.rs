use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use chorus_sandbox::{Identity, Mode, Network, SandboxConfig};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::*;

/// These tests are about capturing and ending processes, with the sandbox off;
/// tests/processes run them sandboxed.
async fn off() -> Sandbox {
    Sandbox::start(SandboxConfig {
        mode: Mode::Off,
        ..SandboxConfig::default()
    })
    .await
}

fn sh_in(script: &str, cwd: &Path) -> ProcessSpec {
    ProcessSpec {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: base_env(false),
        cwd: cwd.to_path_buf(),
        read_write: vec![cwd.to_path_buf()],
        read_only: Vec::new(),
        network: Network::None,
        identity: Identity::Service,
        address_space_limit: false,
        covers: Vec::new(),
        run: None,
        fence: None,
        network_questions: None,
    }
}

fn sh(script: &str) -> ProcessSpec {
    sh_in(script, Path::new("/"))
}

fn limits(timeout_secs: u64, max_output_bytes: usize) -> RunLimits {
    RunLimits {
        timeout: Duration::from_secs(timeout_secs),
        max_output_bytes,
    }
}

#[test]
fn tool_processes_get_an_allow_listed_environment() {
    let names = |network| -> Vec<String> {
        base_env(network)
            .into_iter()
            .map(|(k, _)| k.into_string().expect("ascii"))
            .collect()
    };
    for name in names(false) {
        assert!(
            ["PATH", "HOME", "TMPDIR", "TERM", "LANG", "TZ"].contains(&name.as_str()),
            "{name} is not on the allow-list"
        );
    }
    let path = base_env(false)
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| PathBuf::from(v))
        .expect("PATH");
    assert_eq!(path, PathBuf::from(SYSTEM_PATH));
}

#[test]
fn a_character_cut_by_the_cap_is_dropped_not_replaced() {
    let text = "ab€".as_bytes(); // € is 3 bytes
    assert_eq!(lossy_text(&text[..4], true), "ab");
    assert_eq!(lossy_text(&text[..3], true), "ab");
    assert_eq!(lossy_text(text, true), "ab€");
    // Untruncated invalid bytes are replaced, as anywhere else.
    assert_eq!(lossy_text(&text[..4], false), "ab\u{FFFD}");
    assert_eq!(lossy_text(b"a\xffb", true), "a\u{FFFD}b");
    assert_eq!(lossy_text(b"", true), "");
}

#[tokio::test]
async fn exit_status_and_both_streams_are_reported() {
    let out = run(
        &off().await,
        &sh("echo out; echo err >&2; exit 3"),
        limits(60, 1024),
        &CancellationToken::new(),
    )
    .await
    .expect("runs");
    assert_eq!(out.ending, CommandEnd::Exited);
    assert_eq!(out.status.code(), Some(3));
    assert!(!out.success());
    assert_eq!(out.stdout.text(), "out\n");
    assert_eq!(out.stderr.text(), "err\n");
    assert!(!out.stdout.truncated && !out.stderr.truncated);
}

#[tokio::test]
async fn output_past_the_cap_is_drained_and_dropped() {
    let out = run(
        &off().await,
        &sh("head -c 1000000 /dev/zero; echo done >&2"),
        limits(60, 100),
        &CancellationToken::new(),
    )
    .await
    .expect("runs");
    assert!(out.success());
    assert_eq!(out.stdout.bytes.len(), 100);
    assert!(out.stdout.truncated);
    assert_eq!(out.stderr.text(), "done\n");
}

#[tokio::test]
async fn a_timed_out_group_is_killed() {
    let out = run(
        &off().await,
        &sh("sleep 1000 & sleep 1000"),
        limits(1, 1024),
        &CancellationToken::new(),
    )
    .await
    .expect("runs");
    assert_eq!(out.ending, CommandEnd::TimedOut);
    assert_eq!(out.status.signal(), Some(libc_sigkill()));
}

#[tokio::test]
async fn a_cancelled_token_stops_the_run() {
    let cancel = CancellationToken::new();
    cancel.cancel();
    let out = run(&off().await, &sh("sleep 1000"), limits(600, 1024), &cancel)
        .await
        .expect("runs");
    assert_eq!(out.ending, CommandEnd::Cancelled);
    assert!(!out.success());
}

#[tokio::test]
async fn a_missing_program_is_a_start_error() {
    let mut spec = sh("");
    spec.program = "/nonexistent/chorus-no-such-program".into();
    let err = run(
        &off().await,
        &spec,
        limits(5, 10),
        &CancellationToken::new(),
    )
    .await
    .expect_err("cannot start");
    assert!(
        matches!(
            err,
            StartError::Failed {
                not_found: true,
                ..
            }
        ),
        "{err}"
    );
}

fn libc_sigkill() -> i32 {
    Signal::SIGKILL as i32
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
}

#[tokio::test]
async fn dropping_a_run_midway_kills_its_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("held.fifo");
    mkfifo(&fifo);
    // The background sleep holds the fifo open for writing until it dies.
    let spec = sh_in("sleep 1000 > held.fifo & wait", dir.path());
    let sandbox = off().await;
    let cancel = CancellationToken::new();
    let run = tokio::spawn(async move { run(&sandbox, &spec, limits(600, 1024), &cancel).await });

    let (opened_tx, opened_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        // Returns once the sleep has opened its end.
        let mut file = std::fs::File::open(fifo).expect("opens the fifo");
        let _ = opened_tx.send(());
        let mut rest = Vec::new();
        // Returns at end of file: when the last writer, the sleep, is gone.
        file.read_to_end(&mut rest).expect("reads")
    });
    opened_rx.await.expect("the command opened the fifo");
    run.abort();
    assert!(run.await.expect_err("aborted").is_cancelled());
    assert_eq!(reader.await.expect("reader"), 0);
}

#[tokio::test]
async fn a_process_that_left_the_group_cannot_hold_the_call_open() {
    // setsid puts the sleep in a session of its own: the group kill misses it
    // (documented), but reading its inherited stdout stops after PIPE_GRACE.
    let started = std::time::Instant::now();
    let out = run(
        &off().await,
        // Waits until the sleep runs in its own session (field 6 of stat).
        &sh(r#"setsid sleep 1000 & p=$!
              until [ "$(cut -d' ' -f6 /proc/$p/stat)" = "$p" ]; do :; done
              echo $p"#),
        limits(600, 1024),
        &CancellationToken::new(),
    )
    .await
    .expect("runs");
    let elapsed = started.elapsed();
    assert!(elapsed >= PIPE_GRACE, "{elapsed:?}");
    assert!(out.success());
    let pid: i32 = out.stdout.text().trim().parse().expect("a pid");
    // Clean up the escaped process this test started.
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
}
