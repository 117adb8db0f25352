use std::os::unix::process::ExitStatusExt;

use super::*;

fn sh(script: &str) -> Command {
    let mut cmd = command("sh", Path::new("/"));
    cmd.arg("-c").arg(script);
    cmd
}

fn limits(timeout_secs: u64, max_output_bytes: usize) -> RunLimits {
    RunLimits {
        timeout: Duration::from_secs(timeout_secs),
        max_output_bytes,
    }
}

#[test]
fn children_never_see_the_services_own_variables() {
    let parent = [
        ("PATH", "/usr/bin"),
        ("CHORUS_RUN_TOKEN", "secret"),
        ("CHORUS_", "x"),
        ("HOME", "/home/u"),
        ("MY_CHORUS_THING", "kept"),
    ]
    .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    let kept: Vec<_> = inherited_env(parent)
        .map(|(k, _)| k.into_string().expect("ascii"))
        .collect();
    assert_eq!(kept, ["PATH", "HOME", "MY_CHORUS_THING"]);
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

#[test]
fn stat_lines_with_odd_command_names_parse() {
    assert_eq!(
        parse_stat(b"42 (a) b (c)) S 1 42 42 0 -1"),
        Some((b'S', 42))
    );
    assert_eq!(parse_stat(b"7 (sleep) Z 1 5 5 0"), Some((b'Z', 5)));
    assert_eq!(parse_stat(b"garbage"), None);
}

#[tokio::test]
async fn exit_status_and_both_streams_are_reported() {
    let out = run(
        sh("echo out; echo err >&2; exit 3"),
        limits(60, 1024),
        &CancellationToken::new(),
    )
    .await
    .expect("runs");
    assert_eq!(out.ending, Ending::Exited);
    assert_eq!(out.status.code(), Some(3));
    assert!(!out.success());
    assert_eq!(out.stdout.text(), "out\n");
    assert_eq!(out.stderr.text(), "err\n");
    assert!(!out.stdout.truncated && !out.stderr.truncated);
}

#[tokio::test]
async fn output_past_the_cap_is_drained_and_dropped() {
    let out = run(
        sh("head -c 1000000 /dev/zero; echo done >&2"),
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
        sh("sleep 1000 & sleep 1000"),
        limits(1, 1024),
        &CancellationToken::new(),
    )
    .await
    .expect("runs");
    assert_eq!(out.ending, Ending::TimedOut);
    assert_eq!(out.status.signal(), Some(libc_sigkill()));
}

#[tokio::test]
async fn a_cancelled_token_stops_the_run() {
    let cancel = CancellationToken::new();
    cancel.cancel();
    let out = run(sh("sleep 1000"), limits(600, 1024), &cancel)
        .await
        .expect("runs");
    assert_eq!(out.ending, Ending::Cancelled);
    assert!(!out.success());
}

#[tokio::test]
async fn a_missing_program_is_a_start_error() {
    let cmd = command("/nonexistent/chorus-no-such-program", Path::new("/"));
    let err = run(cmd, limits(5, 10), &CancellationToken::new())
        .await
        .expect_err("cannot start");
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
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
    let mut cmd = command("sh", dir.path());
    // The background sleep holds the fifo open for writing until it dies.
    cmd.arg("-c").arg("sleep 1000 > held.fifo & wait");
    let cancel = CancellationToken::new();
    let run = tokio::spawn(async move { run(cmd, limits(600, 1024), &cancel).await });

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
    let started = Instant::now();
    let out = run(
        // Waits until the sleep runs in its own session (field 6 of stat).
        sh(r#"setsid sleep 1000 & p=$!
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
