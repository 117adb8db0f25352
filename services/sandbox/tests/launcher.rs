//! The sandbox as a service uses it: a process started through the launcher,
//! tried the way an attacker would — other files, other processes, the
//! network, root, escaping the run — and how it ends.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chorus_sandbox::testing::{
    ESCAPEES, TEST_UID, await_escapees, escapees, eventually, running_as_root as root, survivors,
};
use chorus_sandbox::{
    Identity, Mode, Network, ProcessSpec, Sandbox, SandboxConfig, SandboxError, SandboxedChild,
    Tier,
};
use tokio::io::AsyncReadExt;

in_both_tiers!(
    only_the_workspace_and_the_system_are_visible,
    the_program_never_runs_as_root_and_holds_no_capability,
    other_processes_cannot_be_seen_or_signalled,
    nothing_outlives_the_program,
    stopping_reaches_every_process_and_killing_ends_them_all,
    the_sandbox_dies_with_the_service,
    exit_codes_signals_and_start_failures_come_through,
    the_environment_is_exactly_what_the_service_gave,
    the_network_is_what_the_policy_grants,
    processes_are_limited,
    a_sandbox_whose_fence_runs_out_kills_everything_by_itself,
    only_the_namespace_tier_covers_files,
);

async fn sandbox(tier: Tier) -> Sandbox {
    let sandbox = support::sandbox_in(tier).await;
    assert_eq!(sandbox.status().tier, tier.as_str());
    sandbox
}

async fn sandbox_with(config: SandboxConfig) -> Sandbox {
    let sandbox = Sandbox::start(SandboxConfig {
        launcher: Some(env!("CARGO_BIN_EXE_chorus-sandbox").into()),
        ..config
    })
    .await;
    if config_mode_is_on(&sandbox) {
        assert_eq!(sandbox.status().state, "enforced", "{:?}", sandbox.status());
    }
    sandbox
}

fn config_mode_is_on(sandbox: &Sandbox) -> bool {
    sandbox.status().state != "off"
}

/// A workspace owned by the user sandboxed programs run as, next to a
/// directory it must not see.
struct Dirs {
    _top: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
}

fn dirs() -> Dirs {
    let top = tempfile::tempdir().expect("tempdir");
    let workspace = top.path().join("ws");
    let outside = top.path().join("secrets");
    std::fs::create_dir(&workspace).expect("ws");
    std::fs::create_dir(&outside).expect("outside");
    std::fs::write(outside.join("key"), "the-signing-key").expect("secret");
    std::fs::write(workspace.join("notes.txt"), "hello").expect("notes");
    if root() {
        for path in [&workspace, &workspace.join("notes.txt")] {
            std::os::unix::fs::chown(path, Some(TEST_UID), Some(TEST_UID)).expect("chown");
        }
    }
    Dirs {
        workspace: workspace.canonicalize().expect("canonical"),
        outside: outside.canonicalize().expect("canonical"),
        _top: top,
    }
}

fn spec(dirs: &Dirs, script: &str) -> ProcessSpec {
    ProcessSpec {
        program: "/bin/bash".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HOME".into(), "/tmp".into()),
        ],
        cwd: dirs.workspace.clone(),
        read_write: vec![dirs.workspace.clone()],
        read_only: Vec::new(),
        network: Network::None,
        identity: if root() {
            Identity::User {
                uid: TEST_UID,
                gid: TEST_UID,
            }
        } else {
            Identity::Service
        },
        address_space_limit: true,
        covers: Vec::new(),
        run: None,
        fence: None,
        network_questions: None,
    }
}

struct Ran {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

async fn run(sandbox: &Sandbox, spec: &ProcessSpec) -> Ran {
    let mut child = sandbox.spawn(spec).expect("spawned");
    let (stdout, stderr) = read_both(&mut child).await;
    let status = child.wait().await.expect("waited");
    Ran {
        status,
        stdout,
        stderr,
    }
}

async fn read_both(child: &mut SandboxedChild) -> (String, String) {
    let mut out = child.take_stdout().expect("stdout");
    let mut err = child.take_stderr().expect("stderr");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let (a, b) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut stderr)
    );
    a.expect("read stdout");
    b.expect("read stderr");
    (stdout, stderr)
}

async fn only_the_workspace_and_the_system_are_visible(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    let script = format!(
        "cat notes.txt; echo; \
         cat {outside}/key || echo no-secret; \
         ls {outside} >/dev/null 2>&1 || echo no-outside; \
         ls /root >/dev/null 2>&1 || echo no-root; ls /home >/dev/null 2>&1 || echo no-home; \
         cat /etc/shadow >/dev/null 2>&1 || echo no-shadow; \
         echo x > {ws}/made && echo wrote-workspace; \
         echo x > /usr/evil 2>/dev/null || echo no-write-usr; \
         echo x > /etc/evil 2>/dev/null || echo no-write-etc; \
         touch /evil 2>/dev/null || echo no-write-root; \
         echo x > ${{TMPDIR:-/tmp}}/t && echo wrote-tmp; \
         echo x > /tmp/shared-$$ 2>/dev/null && echo wrote-shared-tmp || echo no-shared-tmp; \
         pwd",
        outside = dirs.outside.display(),
        ws = dirs.workspace.display()
    );
    let ran = run(&sandbox, &spec(&dirs, &script)).await;
    assert!(ran.status.success(), "{}", ran.stderr);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "hello",
            "no-secret",
            "no-outside",
            "no-root",
            "no-home",
            "no-shadow",
            "wrote-workspace",
            "no-write-usr",
            "no-write-etc",
            "no-write-root",
            "wrote-tmp",
            // The namespace tier's /tmp is its own; the landlock tier's is
            // the service's, of which it gets a directory (TMPDIR) only.
            match tier {
                Tier::Namespaces => "wrote-shared-tmp",
                Tier::Landlock => "no-shared-tmp",
            },
            dirs.workspace.to_str().expect("utf8"),
        ]
    );
    assert!(!ran.stdout.contains("the-signing-key"));
    // The file it made belongs to the workspace's user, not root.
    let made = std::fs::metadata(dirs.workspace.join("made")).expect("made");
    if root() {
        assert_eq!(made.uid(), TEST_UID);
    }
}

async fn the_program_never_runs_as_root_and_holds_no_capability(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    let ran = run(
        &sandbox,
        &spec(
            &dirs,
            "id -u; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status",
        ),
    )
    .await;
    let lines: Vec<&str> = ran.stdout.lines().collect();
    let uid: u32 = lines[0].parse().expect("uid");
    assert_ne!(uid, 0);
    if root() {
        assert_eq!(uid, TEST_UID);
    }
    for line in &lines[1..] {
        let (name, value) = line.split_once(':').expect("field");
        // A service that is not root, without a user namespace, cannot
        // shrink its bounding set: it holds no capability, and with
        // no_new_privs no program it starts gains one.
        if name == "CapBnd" && !root() && tier == Tier::Landlock {
            continue;
        }
        let expected = if name == "NoNewPrivs" {
            "1"
        } else {
            "0000000000000000"
        };
        assert_eq!(value.trim(), expected, "{line}");
    }
    let as_root = Identity::User { uid: 0, gid: 0 };
    let ran = run(
        &sandbox,
        &ProcessSpec {
            identity: as_root,
            ..spec(&dirs, "id -u")
        },
    )
    .await;
    assert_eq!(ran.status.code(), Some(125));
    assert!(
        ran.stderr.contains("refusing to run a program as root"),
        "{}",
        ran.stderr
    );
}

async fn other_processes_cannot_be_seen_or_signalled(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    let me = std::process::id();
    let script = format!(
        "ls /proc | grep -cE '^[0-9]+$'; \
         cat /proc/{me}/environ 2>/dev/null || echo no-environ; \
         kill -0 {me} 2>/dev/null || echo no-signal; \
         cat /proc/1/environ 2>/dev/null || echo no-init-environ"
    );
    let ran = run(&sandbox, &spec(&dirs, &script)).await;
    let lines: Vec<&str> = ran.stdout.lines().collect();
    // The namespace tier shows init, bash, ls and grep at most; the landlock
    // tier shows the host's pids (but nothing of what is behind them).
    let seen: usize = lines[0].parse().expect("count");
    if tier == Tier::Namespaces {
        assert!(seen <= 4, "sees {seen} processes");
    }
    assert_eq!(&lines[1..], ["no-environ", "no-signal", "no-init-environ"]);
}

async fn nothing_outlives_the_program(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    // This binary also runs as nobody at the same time: each run its own marker.
    let marker = &format!(
        "chorus-escapee-outlive-{}-{}",
        tier.as_str(),
        std::process::id()
    );
    let script = format!(
        "{} {} echo started",
        escapees(marker),
        await_escapees(marker)
    );
    let mut child = sandbox.spawn(&spec(&dirs, &script)).expect("spawned");
    let (stdout, stderr) = read_both(&mut child).await;
    let status = child.wait().await.expect("wait");
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "started");
    // Reading ended (every writer of the pipes is gone) and the launcher exited:
    // nothing is left, at once.
    assert_eq!(survivors(marker), Vec::<i32>::new());
}

async fn stopping_reaches_every_process_and_killing_ends_them_all(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    // This binary also runs as nobody at the same time: each run its own marker.
    let marker = &format!(
        "chorus-escapee-stop-{}-{}",
        tier.as_str(),
        std::process::id()
    );
    let script = format!(
        "trap '' TERM; {} while :; do sleep 1; done",
        escapees(marker)
    );
    let mut child = sandbox.spawn(&spec(&dirs, &script)).expect("spawned");
    eventually("the escapees started", || {
        survivors(marker).len() == ESCAPEES
    })
    .await;
    // Everything ignores SIGTERM, so the grace runs out and all are killed.
    let status = child
        .stop(Duration::from_millis(200))
        .await
        .expect("stopped");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9));
    assert_eq!(survivors(marker), Vec::<i32>::new());

    // A program that honours SIGTERM ends with its own status.
    let mut child = sandbox
        .spawn(&spec(
            &dirs,
            "trap 'exit 7' TERM; echo up; while :; do sleep 0.01; done",
        ))
        .expect("spawned");
    let mut out = child.take_stdout().expect("stdout");
    let mut first = [0u8; 3];
    out.read_exact(&mut first).await.expect("up");
    let status = child.stop(Duration::from_secs(20)).await.expect("stopped");
    assert_eq!(status.code(), Some(7));
}

async fn the_sandbox_dies_with_the_service(tier: Tier) {
    let dirs = dirs();
    // This binary also runs as nobody at the same time: each run its own marker.
    let marker = &format!(
        "chorus-escapee-service-{}-{}",
        tier.as_str(),
        std::process::id()
    );
    let script = format!("{} while :; do sleep 1; done", escapees(marker));
    let policy = serde_json::to_string(&chorus_sandbox::Policy {
        parent: None,
        cwd: dirs.workspace.clone(),
        read_write: vec![dirs.workspace.clone()],
        read_only: Vec::new(),
        network: Network::None,
        identity: spec(&dirs, "").identity,
        limits: chorus_sandbox::Limits::default(),
        cgroups: None,
        covers: Vec::new(),
        run: None,
        fence: None,
        ledger: None,
        tier,
        gate_signals: false,
        questions_fd: None,
    })
    .expect("policy");
    // A stand-in service: a shell that starts the launcher and waits.
    let mut service = tokio::process::Command::new("sh")
        .args([
            "-c",
            "\"$0\" --policy \"$1\" -- bash -c \"$2\"; exit 0",
            env!("CARGO_BIN_EXE_chorus-sandbox"),
            &policy,
            &script,
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("service");
    eventually("the escapees started", || {
        survivors(marker).len() == ESCAPEES
    })
    .await;
    service.start_kill().expect("SIGKILL");
    service.wait().await.expect("reaped");
    eventually("every process of the sandbox died with the service", || {
        survivors(marker).is_empty()
    })
    .await;
}

async fn exit_codes_signals_and_start_failures_come_through(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    let ran = run(&sandbox, &spec(&dirs, "echo out; echo err >&2; exit 3")).await;
    assert_eq!(ran.status.code(), Some(3));
    assert_eq!(
        (ran.stdout.as_str(), ran.stderr.as_str()),
        ("out\n", "err\n")
    );
    use std::os::unix::process::ExitStatusExt;
    let ran = run(&sandbox, &spec(&dirs, "kill -9 $$")).await;
    assert_eq!(ran.status.signal(), Some(9));

    for (program, code, message) in [
        (
            "/no/such/program",
            127,
            "cannot execute '/no/such/program': No such file or directory",
        ),
        (
            "no-such-program",
            127,
            "cannot execute 'no-such-program': not found on PATH",
        ),
    ] {
        let spec = ProcessSpec {
            program: program.into(),
            args: Vec::new(),
            ..spec(&dirs, "")
        };
        let mut child = sandbox.spawn(&spec).expect("spawned");
        let (_, stderr) = read_both(&mut child).await;
        let status = child.wait().await.expect("wait");
        assert_eq!(status.code(), Some(code));
        assert_eq!(
            child.launch_failure(status, &stderr).as_deref(),
            Some(message)
        );
    }
    // A file outside every visible path cannot be executed.
    let outside = dirs.outside.join("tool");
    std::fs::write(&outside, "#!/bin/sh\necho escaped\n").expect("tool");
    let spec = ProcessSpec {
        program: outside.clone().into(),
        args: Vec::new(),
        ..spec(&dirs, "")
    };
    let ran = run(&sandbox, &spec).await;
    // Not there at all (namespaces), or not allowed (landlock).
    let expected = match tier {
        Tier::Namespaces => 127,
        Tier::Landlock => 126,
    };
    assert_eq!(ran.status.code(), Some(expected), "{}", ran.stderr);
    assert!(!ran.stdout.contains("escaped"));
}

async fn the_environment_is_exactly_what_the_service_gave(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    let mut spec = spec(&dirs, "env | sort");
    spec.env.push(("ONLY_THIS".into(), "1".into()));
    let ran = run(&sandbox, &spec).await;
    let names: Vec<&str> = ran
        .stdout
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .filter(|k| !matches!(*k, "PWD" | "SHLVL" | "_"))
        .collect();
    match tier {
        Tier::Namespaces => assert_eq!(names, ["HOME", "ONLY_THIS", "PATH"]),
        // Its private /tmp.
        Tier::Landlock => assert_eq!(names, ["HOME", "ONLY_THIS", "PATH", "TMPDIR"]),
    }
}

async fn the_network_is_what_the_policy_grants(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let dirs = dirs();
    let open = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let (port, other_port) = (
        open.local_addr().expect("addr").port(),
        other.local_addr().expect("addr").port(),
    );
    let probe = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo refused; \
         (exec 3<>/dev/tcp/127.0.0.1/{other_port}) 2>/dev/null && echo reached || echo refused"
    );
    // The host's network is never shared: a proxied sandbox reaches the
    // host's loopback only through its forwards (tests/egress.rs has more).
    let forward = chorus_sandbox::Forward {
        listen: format!("127.0.0.1:{port}").parse().expect("addr"),
        connect: format!("127.0.0.1:{port}"),
    };
    for (network, expected) in [
        (Network::None, "refused refused"),
        (
            Network::Proxied {
                allow: Vec::new(),
                forwards: vec![forward],
            },
            "reached refused",
        ),
    ] {
        let ran = run(
            &sandbox,
            &ProcessSpec {
                network: network.clone(),
                ..spec(&dirs, &probe)
            },
        )
        .await;
        assert_eq!(
            ran.stdout.split_whitespace().collect::<Vec<_>>().join(" "),
            expected,
            "{network:?}: {}",
            ran.stderr
        );
    }
    // Without network, the loopback still works inside the sandbox.
    let ran = run(
        &sandbox,
        &spec(
            &dirs,
            "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); c=socket.create_connection(s.getsockname()); print(\"loopback\")'",
        ),
    )
    .await;
    assert_eq!(ran.stdout.trim(), "loopback", "{}", ran.stderr);
}

async fn processes_are_limited(tier: Tier) {
    let sandbox = sandbox_with(SandboxConfig {
        tier: Some(tier),
        limits: chorus_sandbox::Limits {
            processes: 20,
            ..chorus_sandbox::Limits::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let dirs = dirs();
    let ran = run(
        &sandbox,
        &spec(
            &dirs,
            "exec python3 -c 'import os, time\nn = 0\nfor _ in range(60):\n    try:\n        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)'",
        ),
    )
    .await;
    let started: usize = ran.stdout.trim().parse().expect("count");
    assert!(started < 20, "started {started} processes: {}", ran.stderr);
}

#[tokio::test]
async fn an_unavailable_sandbox_starts_nothing_and_off_runs_unconfined() {
    let unavailable = Sandbox::start(SandboxConfig {
        launcher: Some("/no/such/chorus-sandbox".into()),
        ..SandboxConfig::default()
    })
    .await;
    assert_eq!(unavailable.status().state, "unavailable");
    assert!(
        unavailable.status().problems[0]
            .contains("cannot run the sandbox launcher /no/such/chorus-sandbox"),
        "{:?}",
        unavailable.status()
    );
    let dirs = dirs();
    let err = unavailable
        .spawn(&spec(&dirs, "echo hi"))
        .expect_err("refused");
    assert!(matches!(err, SandboxError::Unavailable(_)));
    assert!(err.to_string().contains("--sandbox off"), "{err}");

    let off = sandbox_with(SandboxConfig {
        mode: Mode::Off,
        ..SandboxConfig::default()
    })
    .await;
    assert_eq!(off.status().state, "off");
    assert_eq!(
        off.identity_for(&dirs.workspace).expect("identity"),
        Identity::Service
    );
    let ran = run(&off, &spec(&dirs, "id -u; ls /proc | grep -cE '^[0-9]+$'")).await;
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines[0], nix::unistd::geteuid().to_string());
    let seen: usize = lines[1].parse().expect("count");
    assert!(seen > 4, "an unconfined process sees the host's processes");
}

#[tokio::test]
async fn a_root_service_runs_programs_as_the_workspace_owner() {
    if !root() {
        return;
    }
    let dirs = dirs();
    let sandbox = sandbox(Tier::Namespaces).await;
    assert_eq!(
        sandbox.identity_for(&dirs.workspace).expect("owner"),
        Identity::User {
            uid: TEST_UID,
            gid: TEST_UID
        }
    );
    let err = sandbox
        .identity_for(Path::new("/"))
        .expect_err("root-owned");
    assert!(
        err.to_string()
            .contains("owned by root, and agents never run as root: chown it"),
        "{err}"
    );
    let configured = sandbox_with(SandboxConfig {
        user: Some((4242, 4343)),
        ..SandboxConfig::default()
    })
    .await;
    assert_eq!(
        configured.identity_for(Path::new("/")).expect("configured"),
        Identity::User {
            uid: 4242,
            gid: 4343
        }
    );
}

/// The same tests, run by a service that is not root (the namespace tier
/// then uses a user namespace; the landlock tier shares the service's user):
/// this binary again, as nobody.
#[test]
fn the_sandbox_holds_for_a_service_that_is_not_root() {
    support::again_as_nobody("the_sandbox_holds_for");
}

/// The landlock tier cannot cover a file: such a process is refused before
/// it starts, in the service and in the launcher.
async fn only_the_namespace_tier_covers_files(tier: Tier) {
    let sandbox = sandbox(tier).await;
    let d = dirs();
    let mut covered = spec(&d, "cat config");
    covered.covers = vec![chorus_sandbox::Cover {
        path: d.workspace.join("notes.txt"),
        content: "shown instead\n".into(),
    }];
    match tier {
        Tier::Namespaces => assert!(sandbox.can_cover()),
        Tier::Landlock => {
            assert!(!sandbox.can_cover());
            let err = sandbox.spawn(&covered).expect_err("refused");
            assert!(err.to_string().contains("only the namespace tier"), "{err}");
        }
    }
}

/// A covered file reads as the cover, read-only, inside the sandbox only; a
/// cover is never placed through a symlink the program could have planted.
#[tokio::test]
async fn a_covered_file_shows_its_cover_and_never_follows_a_link() {
    let sandbox = sandbox(Tier::Namespaces).await;
    let d = dirs();
    let config = d.workspace.join("config");
    std::fs::write(&config, "the repository's own\n").expect("config");
    let mut covered = spec(
        &d,
        "cat config; echo changed > config && echo WROTE; echo changed >> config && echo APPENDED; true",
    );
    covered.covers = vec![chorus_sandbox::Cover {
        path: config.clone(),
        content: "shown instead\n".into(),
    }];
    let ran = run(&sandbox, &covered).await;
    assert!(ran.status.success(), "{}", ran.stderr);
    assert_eq!(ran.stdout, "shown instead\n", "{}", ran.stderr);
    assert_eq!(
        std::fs::read_to_string(&config).expect("config"),
        "the repository's own\n",
        "the real file is unchanged"
    );

    // The name is a symlink to a file outside: the launcher refuses rather
    // than cover (or reveal) what it points to.
    std::fs::remove_file(&config).expect("rm");
    std::os::unix::fs::symlink(d.outside.join("key"), &config).expect("link");
    let ran = run(&sandbox, &covered).await;
    assert_eq!(ran.status.code(), Some(125), "{}", ran.stdout);
    assert!(
        ran.stderr.contains("it is not a regular file"),
        "{}",
        ran.stderr
    );
    // A file outside every path of the sandbox cannot be covered at all.
    covered.covers[0].path = d.outside.join("key");
    let ran = run(&sandbox, &covered).await;
    assert_eq!(ran.status.code(), Some(125));
    assert!(ran.stderr.contains("not inside a path"), "{}", ran.stderr);
    assert_eq!(
        std::fs::read_to_string(d.outside.join("key")).expect("key"),
        "the-signing-key"
    );
}

/// The run's fence: a sandbox whose service stops renewing it (paused, cut
/// from its database, hung) kills the program and everything it started by
/// itself; one renewed in time goes on; one already down starts nothing.
async fn a_sandbox_whose_fence_runs_out_kills_everything_by_itself(tier: Tier) {
    use chorus_sandbox::fence::{Fences, now_ms};
    use tokio::io::AsyncBufReadExt;
    let sandbox = sandbox(tier).await;
    let d = dirs();
    let place = tempfile::tempdir().expect("fences");
    let fences = Fences::create(&place.path().join("fences")).expect("fences");
    let marker = &format!(
        "chorus-escapee-fence-{}-{}",
        tier.as_str(),
        std::process::id()
    );

    // Not renewed: gone soon after its time, escapees too, with no help.
    fences.set("lapsed", now_ms() + 300).expect("set");
    let mut lapsed = spec(
        &d,
        &format!(
            "{} {} echo up; while :; do sleep 0.05; done",
            escapees(marker),
            await_escapees(marker)
        ),
    );
    lapsed.fence = Some(fences.path("lapsed"));
    let mut child = sandbox.spawn(&lapsed).expect("spawned");
    let (stdout, stderr) = read_both(&mut child).await;
    let status = child.wait().await.expect("waited");
    assert_eq!(stdout.trim(), "up", "{stderr}");
    assert_eq!(status.code(), Some(124), "{stderr}");
    assert!(stderr.contains("chorus-sandbox: fenced:"), "{stderr}");
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "processes outlived the fence"
    );

    // Renewed on every tick: it runs to its end, well past the first time.
    fences.set("renewed", now_ms() + 300).expect("set");
    let mut renewed = spec(&d, "for i in 1 2 3 4 5 6; do echo tick; sleep 0.1; done");
    renewed.fence = Some(fences.path("renewed"));
    let started = now_ms();
    let mut child = sandbox.spawn(&renewed).expect("spawned");
    let mut lines = tokio::io::BufReader::new(child.take_stdout().expect("stdout")).lines();
    let mut ticks = 0;
    while let Some(line) = lines.next_line().await.expect("read") {
        assert_eq!(line, "tick");
        ticks += 1;
        fences.set("renewed", now_ms() + 300).expect("renew");
    }
    let status = child.wait().await.expect("waited");
    assert!(
        status.success(),
        "a renewed fence stopped the program: {status}"
    );
    assert_eq!(ticks, 6);
    assert!(now_ms() - started > 300, "it ran past its first time");

    // Down before the start (removed: the run ended): nothing runs.
    fences.remove("renewed");
    let mut never = spec(&d, "touch started-anyway");
    never.fence = Some(fences.path("renewed"));
    let ran = run(&sandbox, &never).await;
    assert_eq!(ran.status.code(), Some(124), "{}", ran.stderr);
    assert!(!d.workspace.join("started-anyway").exists());
}
