//! What only the landlock tier has to hold, because it shares the service's
//! user, PID and network namespaces: a sandboxed program tries, the way an
//! attacker would, to reach the service's processes (their memory, files,
//! limits, priority, an abstract socket) and the service's network (listening
//! where others can connect, TCP Fast Open past `connect`). The tests shared
//! with the namespace tier are in launcher.rs, seccomp.rs and egress.rs.

mod support;

use std::os::unix::net::UnixListener;

use chorus_sandbox::Tier;
use support::{answer, answers, bash, run, sandbox_in, workspace};

/// Python that prints `name=ok` or `name=<errno name>` for each attempt.
const PRELUDE: &str = r#"
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f()
        print(name + "=ok", flush=True)
    except OSError as e:
        print(name + "=" + errno.errorcode.get(e.errno, str(e.errno)), flush=True)
def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
"#;

fn python(body: &str) -> String {
    let script = format!("{PRELUDE}\n{body}");
    format!("python3 -c '{}'", script.replace('\'', r"'\''"))
}

#[tokio::test]
async fn the_services_processes_are_out_of_reach_though_they_share_its_user() {
    let sandbox = sandbox_in(Tier::Landlock).await;
    let ws = workspace();
    let service = std::process::id();
    // An abstract socket the service listens on.
    let name = format!("chorus-test-service-{service}");
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let address =
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        UnixListener::bind_addr(&address).expect("abstract listener")
    };
    let body = format!(
        r#"
pid = {service}
attempt("environ", lambda: open("/proc/%d/environ" % pid, "rb").read())
attempt("mem", lambda: open("/proc/%d/mem" % pid, "rb").read(1))
attempt("fd", lambda: os.readlink("/proc/%d/fd/0" % pid))
attempt("open_fd", lambda: open("/proc/%d/fd/0" % pid, "rb"))
attempt("cwd", lambda: os.listdir("/proc/%d/cwd/" % pid))
attempt("root", lambda: os.listdir("/proc/%d/root/" % pid))
for private in ("maps", "smaps", "io", "stack", "syscall", "auxv", "timers", "pagemap", "personality"):
    attempt("proc_" + private, lambda: open("/proc/%d/%s" % (pid, private), "rb").read(1))
for listing in ("fd", "fdinfo", "map_files", "ns"):
    attempt("list_" + listing, lambda: os.listdir("/proc/%d/%s/" % (pid, listing)))
attempt("signal", lambda: os.kill(pid, 0))
attempt("pidfd_signal", lambda: check(libc.syscall(424, os.pidfd_open(pid), 0, None, 0)))
class rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
attempt("prlimit", lambda: check(libc.prlimit(pid, 7, ctypes.byref(rlimit(1, 1)), None)))
attempt("renice", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
attempt("renice_user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt("affinity", lambda: os.sched_setaffinity(pid, {{0}}))
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0{name}")
attempt("abstract", abstract)
"#
    );
    let ran = run(&sandbox, &bash(&ws, &python(&body))).await;
    let got = answers(&ran.stdout);
    for (name, refused) in [
        ("environ", "EACCES"),
        ("mem", "EACCES"),
        ("fd", "EACCES"),
        ("open_fd", "EACCES"),
        ("cwd", "EACCES"),
        ("root", "EACCES"),
        ("signal", "EPERM"),
        ("pidfd_signal", "EPERM"),
        ("prlimit", "EPERM"),
        ("renice", "EPERM"),
        ("renice_user", "EPERM"),
        ("affinity", "EPERM"),
        ("abstract", "EPERM"),
    ] {
        assert_eq!(
            answer(&got, name),
            Some(refused),
            "{name} was not refused as {refused}: {}\n{}",
            ran.stdout,
            ran.stderr
        );
    }
    // What /proc guards with ptrace's read check: refused (EACCES, or EPERM
    // where the kernel answers so for a process of the same user).
    for private in [
        "maps",
        "smaps",
        "io",
        "stack",
        "syscall",
        "auxv",
        "timers",
        "pagemap",
        "personality",
    ] {
        let name = format!("proc_{private}");
        assert!(
            matches!(answer(&got, &name), Some("EACCES" | "EPERM")),
            "/proc/<service>/{private} was read: {}",
            ran.stdout
        );
    }
    // Directories of descriptors and namespaces: listed only by the same
    // user (their numbers; where each leads stays hidden, see "fd" above).
    let same_user = !chorus_sandbox::testing::running_as_root();
    for listing in ["fd", "fdinfo", "map_files", "ns"] {
        let listed = answer(&got, &format!("list_{listing}"));
        let expected = if same_user && matches!(listing, "fd" | "ns") {
            "ok"
        } else {
            "EACCES"
        };
        assert_eq!(
            listed,
            Some(expected),
            "/proc/<service>/{listing}/: {}",
            ran.stdout
        );
    }
    // The same program may still act on itself.
    let ran = run(
        &sandbox,
        &bash(
            &ws,
            &python(
                r#"
attempt("own_priority", lambda: os.setpriority(os.PRIO_PROCESS, 0, 5))
attempt("own_affinity", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
attempt("own_environ", lambda: open("/proc/self/environ", "rb").read())
"#,
            ),
        ),
    )
    .await;
    let got = answers(&ran.stdout);
    for name in ["own_priority", "own_affinity", "own_environ"] {
        assert_eq!(answer(&got, name), Some("ok"), "{name}: {}", ran.stderr);
    }
    drop(abstract_listener);
}

#[tokio::test]
async fn a_program_listens_on_loopback_only_and_connects_nowhere_else() {
    let sandbox = sandbox_in(Tier::Landlock).await;
    let ws = workspace();
    let body = r#"
def any_address():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    print("bound_to=" + s.getsockname()[0], flush=True)
    c = socket.create_connection(("127.0.0.1", s.getsockname()[1]))
attempt("any_address", any_address)
def unbound_listen():
    s = socket.socket()
    s.listen()
attempt("unbound_listen", unbound_listen)
def public_address():
    s = socket.socket()
    s.bind(("192.0.2.1", 0))
attempt("public_address", public_address)
def ipv6():
    s = socket.socket(socket.AF_INET6)
    s.bind(("::", 0))
    s.listen()
    c = socket.create_connection(("::1", s.getsockname()[1]))
attempt("ipv6_loopback", ipv6)
def fast_open():
    s = socket.socket()
    s.sendto(b"x", 0x20000000, ("192.0.2.1", 80))
attempt("fast_open", fast_open)
def outside():
    socket.create_connection(("192.0.2.1", 80), timeout=5)
attempt("outside", outside)
def nonblocking_own():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    c = socket.socket()
    c.setblocking(False)
    r = c.connect_ex(("127.0.0.1", s.getsockname()[1]))
    print("nonblocking_result=" + errno.errorcode.get(r, str(r)), flush=True)
    a, _ = s.accept()
    c.setblocking(True)
    c.sendall(b"hi")
    assert a.recv(2) == b"hi"
attempt("nonblocking_own", nonblocking_own)
"#;
    let ran = run(&sandbox, &bash(&ws, &python(body))).await;
    let got = answers(&ran.stdout);
    let expect = [
        ("any_address", "ok"),
        // What was asked for everywhere is bound on loopback only.
        ("bound_to", "127.0.0.1"),
        ("unbound_listen", "EACCES"),
        ("public_address", "EADDRNOTAVAIL"),
        ("ipv6_loopback", "ok"),
        ("fast_open", "EPERM"),
        ("outside", "ENETUNREACH"),
        ("nonblocking_own", "ok"),
    ];
    for (name, expected) in expect {
        assert_eq!(
            answer(&got, name),
            Some(expected),
            "{name}: {}\n{}",
            ran.stdout,
            ran.stderr
        );
    }
    let nonblocking = answer(&got, "nonblocking_result");
    assert!(
        matches!(nonblocking, Some("EINPROGRESS" | "0")),
        "{nonblocking:?}"
    );
}

#[tokio::test]
async fn the_status_says_which_tier_and_why() {
    let landlock = sandbox_in(Tier::Landlock).await;
    let status = landlock.status();
    assert_eq!((status.state, status.tier), ("enforced", "landlock"));
    assert!(status.landlock.contains("FullyEnforced"), "{status:?}");
    assert!(status.seccomp.starts_with("filter"), "{status:?}");
    // Chosen by hand, not for want of the namespace tier: no reason given.
    assert_eq!(status.tier_reason, "");
    assert!(!landlock.can_cover());
    // Left to choose, on a host where namespaces work, the stronger tier.
    let auto = support::sandbox().await;
    assert_eq!(auto.status().tier, "namespaces");
    assert!(auto.can_cover());
}

/// The same tests, by a service that is not root: the sandbox then runs as
/// the service's own user, which is what the tier must hold against.
#[test]
fn the_tier_holds_for_a_service_that_is_not_root() {
    support::again_as_nobody("the_tier_holds_for");
}

/// A root service's programs run as the workspace owner, who walks the host's
/// own directories here: a workspace below a directory closed to that user is
/// refused before anything starts, naming every directory to open at once.
#[tokio::test]
async fn a_workspace_its_user_cannot_reach_is_refused_with_the_directory_to_open() {
    use std::os::unix::fs::PermissionsExt;
    if !chorus_sandbox::testing::running_as_root() {
        return;
    }
    let sandbox = sandbox_in(Tier::Landlock).await;
    let closed = tempfile::tempdir().expect("dir");
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // Two closed directories, one in the other: both named at once.
    let inner = closed.path().join("inner");
    std::fs::create_dir(&inner).expect("inner");
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let root = inner.join("ws");
    std::fs::create_dir(&root).expect("ws");
    chorus_sandbox::testing::give_to_test_user(&root);
    let ws = support::Workspace::at(root);
    let ran = run(&sandbox, &bash(&ws, "touch reached")).await;
    assert_eq!(ran.status.code(), Some(125), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("cannot reach")
            && ran.stderr.contains(&format!(
                "chmod o+x {} {}",
                closed.path().display(),
                inner.display()
            )),
        "{}",
        ran.stderr
    );
    assert!(!ws.root.join("reached").exists());
    // Opened as the message says, it runs.
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let ran = run(&sandbox, &bash(&ws, "touch reached")).await;
    assert!(ran.status.success(), "{}", ran.stderr);
}

/// On kernels whose Landlock cannot scope signals (before 6.12), the launcher
/// answers every call that signals or opens a process by pid: the sandbox's
/// own processes are reached, nothing else. Forced here (`gate_signals`, which
/// also leaves Landlock's signal scope out), so the answer is the launcher's.
#[tokio::test]
async fn without_landlocks_signal_scope_the_launcher_lets_signals_reach_the_sandbox_only() {
    let ws = workspace();
    let service = std::process::id();
    let body = format!(
        r#"
import signal, subprocess, threading, time
pid = {service}
child = subprocess.Popen(["sleep", "100"])
attempt("own_child", lambda: os.kill(child.pid, 0))
attempt("own_group", lambda: os.killpg(0, 0))
attempt("service", lambda: os.kill(pid, 0))
attempt("service_group", lambda: os.killpg(os.getpgid(pid) if False else pid, 0))
attempt("init", lambda: os.kill(1, 0))
attempt("tgkill_own", lambda: signal.pthread_kill(threading.main_thread().ident, 0))
attempt("tgkill_service", lambda: check(libc.syscall(234, pid, pid, 0)))
attempt("tkill_service", lambda: check(libc.syscall(200, pid, 0)))
attempt("sigqueue_service", lambda: check(libc.syscall(129, pid, 0, None)))
attempt("pidfd_service", lambda: os.pidfd_open(pid))
attempt("pidfd_own", lambda: os.close(os.pidfd_open(child.pid)))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
attempt("everyone", lambda: os.kill(-1, signal.SIGTERM))
child.wait()
print("child_ended=" + str(child.returncode), flush=True)
"#
    );
    let spec = bash(&ws, &python(&body));
    let mut policy = chorus_sandbox::Policy {
        parent: None,
        cwd: spec.cwd.clone(),
        read_write: spec.read_write.clone(),
        read_only: Vec::new(),
        network: chorus_sandbox::Network::None,
        identity: spec.identity,
        limits: chorus_sandbox::Limits::default(),
        cgroups: None,
        covers: Vec::new(),
        run: None,
        fence: None,
        ledger: None,
        tier: Tier::Landlock,
        gate_signals: true,
        questions_fd: None,
    };
    let launcher = env!("CARGO_BIN_EXE_chorus-sandbox");
    let run_with = |policy: &chorus_sandbox::Policy| {
        let json = serde_json::to_string(policy).expect("policy");
        std::process::Command::new(launcher)
            .arg("--policy")
            .arg(json)
            .arg("--")
            .args(std::iter::once(&spec.program).chain(&spec.args))
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("launcher runs")
    };
    let out = run_with(&policy);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got = answers(&stdout);
    for (name, expected) in [
        ("own_child", "ok"),
        ("own_group", "ok"),
        ("service", "EPERM"),
        ("service_group", "EPERM"),
        ("init", "EPERM"),
        ("tgkill_own", "ok"),
        ("tgkill_service", "EPERM"),
        ("tkill_service", "EPERM"),
        ("sigqueue_service", "EPERM"),
        ("pidfd_service", "EPERM"),
        ("pidfd_own", "ok"),
        ("everyone", "ok"),
        // kill(-1) reached the sandbox's own child.
        ("child_ended", "-15"),
    ] {
        assert_eq!(
            answer(&got, name),
            Some(expected),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // This test process was not signalled (it would have died of SIGTERM).
    policy.gate_signals = false;
    assert!(run_with(&policy).status.success());
}

/// Where neither tier can start, nothing runs, and the status says for each
/// tier what it lacked and how to get it. (A stand-in launcher fails as each
/// tier's self-check does on such a host: no new /proc, no Landlock.)
#[tokio::test]
async fn where_neither_tier_starts_the_status_says_what_each_lacks() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    let launcher = dir.path().join("chorus-sandbox");
    std::fs::write(
        &launcher,
        r#"#!/bin/sh
case "$2" in
  *'"tier":"landlock"'*) echo "chorus-sandbox: cannot apply the Landlock rules: this kernel does not enforce Landlock" >&2 ;;
  *) echo "chorus-sandbox: cannot build the sandbox's file system view: /proc: cannot mount proc: EPERM: Operation not permitted" >&2 ;;
esac
exit 125
"#,
    )
    .expect("stand-in");
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sandbox = chorus_sandbox::Sandbox::start(chorus_sandbox::SandboxConfig {
        launcher: Some(launcher),
        ..chorus_sandbox::SandboxConfig::default()
    })
    .await;
    let status = sandbox.status();
    assert_eq!(
        (status.state, status.tier),
        ("unavailable", ""),
        "{status:?}"
    );
    let [namespaces, landlock] = status.problems.as_slice() else {
        panic!("one problem per tier: {status:?}");
    };
    assert!(
        namespaces.starts_with("the namespaces tier:")
            && namespaces.contains("the container masks /proc"),
        "{namespaces}"
    );
    assert!(
        landlock.starts_with("the landlock tier:")
            && landlock.contains("Linux 5.13 or later")
            && landlock.contains("lsm="),
        "{landlock}"
    );
    let ws = workspace();
    let err = sandbox
        .spawn(&bash(&ws, "touch ran"))
        .expect_err("nothing runs");
    assert!(err.to_string().contains("unavailable"), "{err}");
    assert!(!ws.root.join("ran").exists());
}

/// What the host offers beside TCP ports, and its ports reached another way,
/// are out of reach too (issue 37): a port the host listens on at
/// 127.0.0.1, after the sandbox bound the same port at 127.0.0.2 (the
/// launcher once allowed a sandbox's own ports by number only); a Unix
/// socket file the host listens on, open to everyone (Landlock does not
/// check `connect` to one), by stream or by datagram; SysV IPC and POSIX
/// message queues, which one run's processes shared with another's of the
/// same user and which outlived them.
#[tokio::test]
async fn the_hosts_other_ports_sockets_and_ipc_are_out_of_reach() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = sandbox_in(Tier::Landlock).await;
    let ws = workspace();
    let canary = std::net::TcpListener::bind("127.0.0.1:0").expect("a host port");
    let port = canary.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let path = dir.path().join("host.sock");
    let unix = UnixListener::bind(&path).expect("a host socket");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let dgram = dir.path().join("host.dgram");
    let datagrams = std::os::unix::net::UnixDatagram::bind(&dgram).expect("a host datagram socket");
    std::fs::set_permissions(&dgram, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    datagrams.set_nonblocking(true).expect("nonblocking");
    let body = format!(
        r#"
def own_port_trick(host):
    s = socket.socket()
    s.bind(("127.0.0.2", {port}))
    s.listen()
    socket.create_connection((host, {port}), timeout=5)
attempt("own_port_trick", lambda: own_port_trick("127.0.0.1"))
attempt("other_loopback", lambda: socket.create_connection(("127.0.0.3", {port}), timeout=5))
def own_exact():
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.listen()
    socket.create_connection(("127.0.0.2", s.getsockname()[1]), timeout=5)
attempt("own_exact", own_exact)
def unix_stream():
    s = socket.socket(socket.AF_UNIX)
    s.connect("{unix}")
attempt("unix_stream", unix_stream)
def unix_dgram():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"x", "{dgram}")
attempt("unix_dgram", unix_dgram)
def stream_pair():
    a, b = socket.socketpair()
    a.sendall(b"x")
    assert b.recv(1) == b"x"
attempt("stream_pair", stream_pair)
attempt("msgget", lambda: check(libc.msgget(0, 0o1600)))
attempt("shmget", lambda: check(libc.shmget(0, 4096, 0o1600)))
attempt("semget", lambda: check(libc.semget(0, 1, 0o1600)))
rt = ctypes.CDLL("librt.so.1", use_errno=True)
attempt("mq_open", lambda: check(rt.mq_open(b"/chorus-run", os.O_CREAT | os.O_RDWR, 0o600, None)))
"#,
        unix = path.display(),
        dgram = dgram.display(),
    );
    let ran = run(&sandbox, &bash(&ws, &python(&body))).await;
    let got = answers(&ran.stdout);
    for (name, expected) in [
        ("own_port_trick", "ECONNREFUSED"),
        ("other_loopback", "ECONNREFUSED"),
        ("own_exact", "ok"),
        ("unix_stream", "EPERM"),
        ("unix_dgram", "EPERM"),
        ("stream_pair", "ok"),
        ("msgget", "EPERM"),
        ("shmget", "EPERM"),
        ("semget", "EPERM"),
        ("mq_open", "EPERM"),
    ] {
        assert_eq!(
            answer(&got, name),
            Some(expected),
            "{name}: {}\n{}",
            ran.stdout,
            ran.stderr
        );
    }
    unix.set_nonblocking(true).expect("nonblocking");
    assert!(unix.accept().is_err(), "the host's socket was reached");
    let mut buf = [0_u8; 8];
    assert!(
        datagrams.recv(&mut buf).is_err(),
        "a datagram reached the host"
    );
    canary.set_nonblocking(true).expect("nonblocking");
    assert!(canary.accept().is_err(), "the host's port was reached");
}
