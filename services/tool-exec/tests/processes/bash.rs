//! bash: cwd, exit codes, streams, stdin, environment, output cap, timeouts,
//! cancellation, and that no process a command starts outlives the call.

use chorus_tool_exec::{Limits, ToolError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use chorus_sandbox::testing::{
    ESCAPEES, await_escapees, escapees, eventually, give_to_test_user, owned_by_test_user,
    survivors,
};

use crate::common::{Harness, in_band_code};

fn output(outcome: &chorus_tool_exec::context::ToolOutcome) -> chorus_catalog::outputs::Bash {
    serde_json::from_value(outcome.output.clone()).expect("bash output")
}

#[tokio::test]
async fn commands_run_in_the_workspace_root() {
    let h = Harness::new().await;
    let out = output(&h.ok("bash", json!({"command": "pwd"})).await);
    assert_eq!(out.stdout.trim(), h.root.to_str().expect("utf8"));
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn a_non_zero_exit_is_a_result_not_an_error() {
    let h = Harness::new().await;
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
    let h = Harness::new().await;
    let out = output(&h.ok("bash", json!({"command": "kill -9 $$"})).await);
    assert_eq!(out.exit_code, None);
    assert_eq!(out.signal, Some(9));
}

#[tokio::test]
async fn stdin_is_closed() {
    let h = Harness::new().await;
    let out = output(
        &h.ok("bash", json!({"command": "cat; echo after-cat"}))
            .await,
    );
    assert_eq!(out.stdout, "after-cat\n");
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn the_workspace_root_is_the_only_chorus_variable() {
    let h = Harness::new().await;
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
    let h = Harness::new().await;
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
async fn a_timeout_kills_every_process_even_ones_that_left_and_ignore_sigterm() {
    let h = Harness::new().await;
    let marker = &format!("chorus-bash-timeout-{}", std::process::id());
    let command = format!(
        "{} {} echo started; sleep 1000",
        escapees(marker),
        await_escapees(marker)
    );
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
    assert_eq!(out.stdout, "started\n", "partial output");
    assert_eq!(survivors(marker), Vec::<i32>::new());
}

#[tokio::test]
async fn nothing_a_command_starts_outlives_it() {
    let h = Harness::new().await;
    let marker = &format!("chorus-bash-background-{}", std::process::id());
    let command = format!(
        "{} {} echo started",
        escapees(marker),
        await_escapees(marker)
    );
    let outcome = h.ok("bash", json!({ "command": command })).await;
    assert_eq!(outcome.error, None);
    let out = output(&outcome);
    assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "started\n"));
    assert_eq!(survivors(marker), Vec::<i32>::new());
}

#[tokio::test]
async fn shutdown_kills_a_running_command_promptly() {
    let h = Harness::new().await;
    let marker = &format!("chorus-bash-shutdown-{}", std::process::id());
    let runner = h.runner.clone();
    let grant = h.grant();
    let command = format!("{} wait", escapees(marker));
    let call = tokio::spawn(async move {
        runner
            .execute(grant, "bash", json!({ "command": command }))
            .await
    });
    eventually("the command's children started", || {
        survivors(marker).len() == ESCAPEES
    })
    .await;
    h.shutdown.cancel();
    let outcome = call.await.expect("call task").expect("an in-band answer");
    assert_eq!(in_band_code(&outcome), Some("cancelled"));
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "the command survived the shutdown"
    );
    assert_eq!(output(&outcome).signal, Some(9));
}

#[tokio::test]
async fn a_command_whose_caller_leaves_is_killed_and_says_so() {
    let h = Harness::new().await;
    let marker = &format!("chorus-bash-caller-left-{}", std::process::id());
    let runner = h.runner.clone();
    let grant = h.grant();
    let caller_gone = CancellationToken::new();
    let command = format!("{} wait", escapees(marker));
    let call = {
        let caller_gone = caller_gone.clone();
        tokio::spawn(async move {
            runner
                .execute_until(grant, "bash", json!({ "command": command }), &caller_gone)
                .await
        })
    };
    eventually("the command's children started", || {
        survivors(marker).len() == ESCAPEES
    })
    .await;
    caller_gone.cancel();
    let outcome = call.await.expect("call task").expect("an in-band answer");
    assert_eq!(in_band_code(&outcome), Some("cancelled"));
    let message = &outcome.error.as_ref().expect("in-band error").message;
    assert!(message.starts_with("the caller went away;"), "{message}");
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "the command survived its caller"
    );
}

#[tokio::test]
async fn commands_act_as_the_workspace_owner_inside_the_workspace_only() {
    let h = Harness::new().await;
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), "not-for-agents").expect("secret");
    give_to_test_user(outside.path());
    let command = format!(
        "echo made > made.txt; cat {}/secret 2>&1; id -u; ls /proc | grep -cE '^[0-9]+$'",
        outside.path().display()
    );
    let out = output(&h.ok("bash", json!({ "command": command })).await);
    assert!(!out.stdout.contains("not-for-agents"), "{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().collect();
    // Not there at all (the namespace tier), or not allowed (the landlock
    // tier, which also shows the host's pids, though nothing behind them).
    let tier = h.runner.processes().tier();
    let refused = match tier {
        Some(chorus_sandbox::Tier::Landlock) => "Permission denied",
        _ => "No such file or directory",
    };
    assert!(lines[0].contains(refused), "{}", lines[0]);
    assert_ne!(lines[1], "0", "bash ran as root");
    let processes: usize = lines[2].parse().expect("count");
    if tier == Some(chorus_sandbox::Tier::Namespaces) {
        assert!(processes <= 4, "bash sees {processes} processes");
    }
    assert!(owned_by_test_user(&h.root.join("made.txt")));
}

#[tokio::test]
async fn the_network_grant_never_reaches_the_hosts_loopback() {
    let mut h = Harness::new().await;
    // A database on the host's loopback, trust authentication.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let command = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo refused; \
         curl -s --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/; \
         curl -s --noproxy '' -o /dev/null -w '%{{http_connect}}\\n' -p http://localhost:{port}/ || true"
    );
    let without = output(&h.ok("bash", json!({ "command": command })).await);
    assert!(
        without.stdout.starts_with("refused\n"),
        "{}",
        without.stdout
    );
    // Even with rules naming it, the grant reaches nothing on the loopback.
    for egress in [
        Vec::new(),
        vec![format!("127.0.0.1:{port}"), format!("localhost:{port}")],
    ] {
        h.egress = egress;
        let with = output(
            &h.call_with_network("bash", json!({ "command": command }))
                .await
                .expect("bash"),
        );
        assert_eq!(with.stdout, "refused\n403\n403\n", "{}", with.stderr);
    }
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(listener.accept().is_err(), "the database was reached");
}

#[tokio::test]
async fn the_network_grant_reaches_what_the_egress_list_names() {
    if !chorus_sandbox::testing::root_for("a test network namespace") {
        return;
    }
    let mut h = Harness::new().await;
    let (_net, ip) = crate::common::outside_server().await;
    let command = format!("curl -sS http://{ip}:8080/f.txt");
    h.egress = vec![format!("{ip}:8080")];
    let with = output(
        &h.call_with_network("bash", json!({ "command": command }))
            .await
            .expect("bash"),
    );
    assert_eq!(with.stdout, "outside\n", "{}", with.stderr);
    h.egress = Vec::new();
    let without = output(
        &h.call_with_network("bash", json!({ "command": command }))
            .await
            .expect("bash"),
    );
    // The proxy's answer, as curl prints it.
    assert!(
        without.stdout.contains("egress list is empty"),
        "{}",
        without.stdout
    );
}

#[tokio::test]
async fn timeouts_of_zero_or_above_the_maximum_are_refused() {
    let h = Harness::new().await;
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
    let h = Harness::new().await;
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
    let h = Harness::new().await;
    h.shutdown.cancel();
    let err = h
        .call("bash", json!({"command": "touch should-not-exist"}))
        .await
        .expect_err("refused");
    assert!(matches!(err, ToolError::ShuttingDown));
    assert!(!h.root.join("should-not-exist").exists());
}

#[tokio::test]
async fn files_the_file_tools_make_are_the_workspace_owners_so_bash_can_change_them() {
    let h = Harness::new().await;
    h.ok(
        "file.create",
        json!({"path": "made/by/tools.txt", "content": "one\n"}),
    )
    .await;
    for path in ["made", "made/by", "made/by/tools.txt"] {
        assert!(owned_by_test_user(&h.root.join(path)), "{path}");
    }
    let out = output(
        &h.ok(
            "bash",
            json!({"command": "echo two >> made/by/tools.txt && touch made/by/more && cat made/by/tools.txt"}),
        )
        .await,
    );
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (Some(0), "one\ntwo\n"),
        "{}",
        out.stderr
    );
    // Replacing a file's content keeps its owner.
    h.ok(
        "file.write",
        json!({"path": "made/by/tools.txt", "content": "three\n"}),
    )
    .await;
    assert!(owned_by_test_user(&h.root.join("made/by/tools.txt")));
}

/// Three bash calls of one run, each holding 200 MiB at once against the
/// run's 256 MiB: the limit is the run's, so at most one holds to the end
/// (the others are killed at the limit). Each call says `held <i>` on a FIFO
/// once it holds; once every call has either said so or ended, none is
/// allocating any more, and the calls are released.
#[tokio::test]
async fn concurrent_calls_of_one_run_share_the_runs_memory() {
    use std::os::unix::fs::OpenOptionsExt;
    use tokio::io::AsyncBufReadExt;

    if !chorus_sandbox::testing::cgroups().is_some_and(|c| c.limits_memory()) {
        eprintln!("skipped: this host gives the service no memory cgroup");
        return;
    }
    const MIB: u64 = 1 << 20;
    let h = Harness::with_sandbox(
        Limits::default(),
        chorus_sandbox::SandboxConfig {
            limits: chorus_sandbox::Limits {
                memory_bytes: 256 * MIB,
                ..chorus_sandbox::Limits::default()
            },
            ..chorus_sandbox::SandboxConfig::default()
        },
    )
    .await;
    let fifo = |name: &str| {
        let path = h.root.join(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        give_to_test_user(&path);
        path
    };
    let (release_path, reports_path) = (fifo("release"), fifo("reports"));
    // Read-write: opening never waits for the other end; the calls see the
    // end of `release` when this handle is dropped.
    let release = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_CLOEXEC)
        .open(&release_path)
        .expect("release");
    let reports = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&reports_path)
        .expect("reports");
    let command = |i: usize| {
        json!({"command": format!(
            "exec python3 -c \"f = open('release'); x = b'x' * (200 << 20); \
             r = open('reports', 'w'); r.write('held {i}\\n'); r.close(); f.read()\""
        )})
    };
    let (ended, mut ends) = tokio::sync::mpsc::unbounded_channel();
    let call = |i: usize| {
        let ended = ended.clone();
        let h = &h;
        async move {
            let outcome = h.call("bash", command(i)).await;
            let _ = ended.send(i);
            outcome
        }
    };
    let coordinate = async {
        let mut lines = tokio::io::BufReader::new(reports).lines();
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < 3 {
            tokio::select! {
                line = lines.next_line() => {
                    let line = line.expect("reports").expect("a report");
                    let i: usize = line.trim_start_matches("held ").parse().expect("held <i>");
                    answered.insert(i);
                }
                Some(i) = ends.recv() => {
                    answered.insert(i);
                }
            }
        }
        drop(release);
    };
    let ((a, b, c), ()) = tokio::join!(
        async { tokio::join!(call(0), call(1), call(2)) },
        coordinate
    );
    let outcomes: Vec<chorus_catalog::outputs::Bash> = [a, b, c]
        .into_iter()
        .map(|o| output(&o.expect("bash ran")))
        .collect();
    let held = outcomes.iter().filter(|o| o.exit_code == Some(0)).count();
    assert!(
        held <= 1,
        "{held} bash calls of one run each held 200 MiB at once against the run's 256 MiB: {:?}",
        outcomes
            .iter()
            .map(|o| (o.exit_code, o.signal))
            .collect::<Vec<_>>()
    );
    for killed in outcomes.iter().filter(|o| o.exit_code != Some(0)) {
        assert_eq!(killed.signal, Some(9), "{}", killed.stderr);
    }
}

/// A bash call whose processes write more than the sandbox's limit (files
/// of children that exit, each under the file size limit) is stopped and
/// answers RESOURCE_EXHAUSTED with what to do.
#[tokio::test]
async fn a_call_that_writes_more_than_its_limit_is_stopped() {
    // With or without a cgroup.
    let h = Harness::with_sandbox(
        Limits::default(),
        chorus_sandbox::SandboxConfig {
            limits: chorus_sandbox::Limits {
                written_bytes: 16 << 20,
                ..chorus_sandbox::Limits::default()
            },
            ..chorus_sandbox::SandboxConfig::default()
        },
    )
    .await;
    let err = h
        .call(
            "bash",
            json!({"command": "for i in $(seq 1 64); do (head -c 2M /dev/zero > f$i); sleep 0.05; done"}),
        )
        .await
        .expect_err("stopped");
    assert!(matches!(err, ToolError::OverLimit(_)), "{err}");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    let message = err.to_string();
    assert!(
        message.contains("limit of 16 MiB") && message.contains("--sandbox-max-written-mib"),
        "{message}"
    );
}
