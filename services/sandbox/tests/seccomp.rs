//! The sandbox's seccomp filter, tried the way an agent would: a kernel keyring
//! entry left for the next run, UDP and other sockets without the network
//! grant, new namespaces, tracing a sibling, io_uring and the other kernel
//! interfaces a run never needs. Each attempt is made with raw system calls
//! (python3's ctypes), in the sandbox and, where that shows the attempt itself
//! works, unconfined, so a refusal in the sandbox is the filter's.

mod support;

use std::os::unix::process::ExitStatusExt;

use chorus_sandbox::{Network, ProcessSpec, SandboxConfig, Tier};
use nix::libc;

use support::{Ran, answer, answers, bash, run, sandbox_in, workspace};

in_both_tiers!(
    a_keyring_entry_never_passes_from_one_sandbox_to_the_next,
    udp_and_other_sockets_need_the_host_network,
    new_namespaces_cannot_be_made,
    a_sibling_cannot_be_traced_or_read,
    kernel_interfaces_a_run_never_needs_are_refused,
    ordinary_programs_still_work,
    the_self_check_reports_the_filter,
);

/// Python that makes raw system calls: `call(name, nr, *args)` prints
/// `name=ok` or `name=<errno name>` (e.g. `name=EPERM`) and returns the result.
const PRELUDE: &str = r#"
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def arg(a):
    return ctypes.c_long(a) if isinstance(a, int) else a
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    e = ctypes.get_errno()
    print(name + "=" + ("ok" if r >= 0 else errno.errorcode.get(e, str(e))), flush=True)
    return r
def sock(name, family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close()
        print(name + "=ok", flush=True)
    except OSError as e:
        print(name + "=" + errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"#;

/// `python3 -c <PRELUDE + body>` as a bash command line (arguments follow).
fn python(body: &str) -> String {
    let script = format!("{PRELUDE}\n{body}");
    format!("python3 -c '{}'", script.replace('\'', r"'\''"))
}

/// Runs `body` unconfined, as this test's own user: what the same attempts
/// give without the sandbox.
fn unconfined(body: &str) -> Vec<(String, String)> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!("{PRELUDE}\n{body}"))
        .output()
        .expect("python3 runs");
    answers(&String::from_utf8_lossy(&out.stdout))
}

fn spec_with(ws: &support::Workspace, script: &str, network: Network) -> ProcessSpec {
    ProcessSpec {
        network,
        ..bash(ws, script)
    }
}

/// Asserts every named attempt was refused with `errno` in the sandbox.
fn assert_refused(ran: &Ran, names: &[&str], errno: &str, what: &str) {
    let got = answers(&ran.stdout);
    for name in names {
        assert_eq!(
            answer(&got, name),
            Some(errno),
            "{what}: {name} was not refused with {errno} in the sandbox (stdout: {}; stderr: {})",
            ran.stdout,
            ran.stderr
        );
    }
}

async fn a_keyring_entry_never_passes_from_one_sandbox_to_the_next(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let ws = workspace();
    let description = format!("chorus-test-{}", std::process::id());
    // The user keyring (-4) outlives every process of the user: what one run
    // adds there, another run of the same user finds.
    let add = python(&format!(
        "call('add_key', {add_key}, b'user', b'{description}', b'the-run-secret', 14, -4)",
        add_key = libc::SYS_add_key,
    ));
    let first = run(&sandbox, &bash(&ws, &add)).await;
    let read = python(&format!(
        "k = call('request_key', {request_key}, b'user', b'{description}', None, 0)\n\
         k2 = call('keyctl_search', {keyctl}, 10, -4, b'user', b'{description}', 0)\n\
         key = k if k > 0 else k2\n\
         if key > 0:\n\
         \x20   buf = ctypes.create_string_buffer(64)\n\
         \x20   n = libc.syscall(ctypes.c_long({keyctl}), ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_long(64))\n\
         \x20   print('read=' + buf.raw[:max(n, 0)].decode(), flush=True)\n\
         \x20   libc.syscall(ctypes.c_long({keyctl}), ctypes.c_long(9), ctypes.c_long(key), ctypes.c_long(-4))",
        request_key = libc::SYS_request_key,
        keyctl = libc::SYS_keyctl,
    ));
    let second = run(&sandbox, &bash(&ws, &read)).await;
    assert!(
        !second.stdout.contains("the-run-secret"),
        "a keyring entry added by one sandbox was read by the next: {}",
        second.stdout
    );
    assert_refused(&first, &["add_key"], "EPERM", "keyring");
    assert_refused(
        &second,
        &["request_key", "keyctl_search"],
        "EPERM",
        "keyring",
    );
    // Unconfined, the same call works (on the process keyring, -2, which goes
    // with the process).
    let free = unconfined(&format!(
        "call('add_key', {}, b'user', b'{description}', b'x', 1, -2)",
        libc::SYS_add_key
    ));
    assert_eq!(
        answer(&free, "add_key"),
        Some("ok"),
        "add_key fails even unconfined"
    );
}

async fn udp_and_other_sockets_need_the_host_network(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let ws = workspace();
    let body = "sock('udp4', socket.AF_INET, socket.SOCK_DGRAM)\n\
         sock('udp4_flags', socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)\n\
         sock('udp6', socket.AF_INET6, socket.SOCK_DGRAM)\n\
         sock('icmp4', socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)\n\
         sock('raw4', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)\n\
         sock('seqpacket4', socket.AF_INET, socket.SOCK_SEQPACKET)\n\
         sock('tcp4', socket.AF_INET, socket.SOCK_STREAM)\n\
         sock('tcp4_flags', socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)\n\
         sock('tcp6', socket.AF_INET6, socket.SOCK_STREAM)\n\
         sock('unix_stream', socket.AF_UNIX, socket.SOCK_STREAM)\n\
         sock('unix_dgram', socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         sock('netlink_route', socket.AF_NETLINK, socket.SOCK_RAW, 0)\n\
         sock('netlink_uevent', socket.AF_NETLINK, socket.SOCK_DGRAM, 15)\n\
         sock('vsock', 40, socket.SOCK_STREAM)\n\
         sock('packet', socket.AF_PACKET, socket.SOCK_DGRAM)\n\
         try:\n\
         \x20   socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         \x20   print('socketpair_unix=ok')\n\
         except OSError as e:\n\
         \x20   print('socketpair_unix=' + errno.errorcode[e.errno])";
    let probe = python(body);
    let always_refused = ["netlink_uevent", "vsock", "packet"];
    // Unix sockets of their own reach only the sandbox's files in the
    // namespace tier; in the landlock tier, any socket file of the host, so
    // only connected stream pairs are left there.
    let unix = ["unix_stream", "unix_dgram"];
    let mut always_allowed = vec![
        "tcp4",
        "tcp4_flags",
        "tcp6",
        "netlink_route",
        "socketpair_unix",
    ];
    if tier == Tier::Namespaces {
        always_allowed.extend(unix);
    }
    let not_stream = ["udp4", "udp4_flags", "udp6", "icmp4", "raw4", "seqpacket4"];
    let proxied = Network::Proxied {
        allow: Vec::new(),
        forwards: Vec::new(),
    };
    for network in [Network::None, proxied] {
        let ran = run(&sandbox, &spec_with(&ws, &probe, network.clone())).await;
        let what = format!("{network:?}: a socket other than TCP escaped");
        assert_refused(&ran, &not_stream, "EPERM", &what);
        assert_refused(&ran, &always_refused, "EPERM", &what);
        if tier == Tier::Landlock {
            assert_refused(&ran, &unix, "EPERM", "a Unix socket in the landlock tier");
        }
        let got = answers(&ran.stdout);
        for name in &always_allowed {
            assert_eq!(
                answer(&got, name),
                Some("ok"),
                "{network:?}: {name} must still work: {}",
                ran.stderr
            );
        }
    }
    let free = unconfined(body);
    for name in ["udp4", "netlink_uevent"] {
        assert_eq!(
            answer(&free, name),
            Some("ok"),
            "{name} fails even unconfined"
        );
    }
}

async fn new_namespaces_cannot_be_made(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let ws = workspace();
    let clone_user = libc::CLONE_NEWUSER | libc::SIGCHLD;
    let clone_ns = libc::CLONE_NEWNS | libc::CLONE_NEWUSER | libc::SIGCHLD;
    // The user namespace is unshared last: unconfined, the process then has
    // no mapped ids, and can make no other.
    let body = format!(
        "def clone(name, flags):\n\
         \x20   ctypes.set_errno(0)\n\
         \x20   r = libc.syscall(ctypes.c_long({clone}), ctypes.c_long(flags), 0, 0, 0, 0)\n\
         \x20   if r == 0:\n\
         \x20       os._exit(0)\n\
         \x20   e = ctypes.get_errno()\n\
         \x20   if r > 0:\n\
         \x20       os.waitpid(r, 0)\n\
         \x20   print(name + '=' + ('ok' if r > 0 else errno.errorcode.get(e, str(e))), flush=True)\n\
         clone('clone_user', {clone_user})\n\
         clone('clone_ns', {clone_ns})\n\
         call('unshare_user', {unshare}, {newuser})\n\
         call('unshare_net', {unshare}, {newnet})\n\
         call('clone3', {clone3}, None, 0)\n\
         fd = os.open('/proc/self/ns/uts', os.O_RDONLY)\n\
         call('setns', {setns}, fd, 0)",
        clone = libc::SYS_clone,
        unshare = libc::SYS_unshare,
        clone3 = libc::SYS_clone3,
        setns = libc::SYS_setns,
        newuser = libc::CLONE_NEWUSER,
        newnet = libc::CLONE_NEWNET,
    );
    let script = format!(
        "unshare -U true && echo unshare_tool=ok || echo unshare_tool=refused; {}",
        python(&body)
    );
    let ran = run(&sandbox, &bash(&ws, &script)).await;
    let got = answers(&ran.stdout);
    assert_eq!(
        answer(&got, "unshare_tool"),
        Some("refused"),
        "`unshare -U` made a user namespace in the sandbox: {}",
        ran.stderr
    );
    assert_refused(
        &ran,
        &[
            "unshare_user",
            "unshare_net",
            "clone_user",
            "clone_ns",
            "setns",
        ],
        "EPERM",
        "a new namespace was made",
    );
    // clone3 says it does not exist, so libc falls back to clone (whose flags
    // the filter reads).
    assert_refused(&ran, &["clone3"], "ENOSYS", "clone3 was let through");
    let free = unconfined(&body);
    for name in ["unshare_user", "clone_user"] {
        assert_eq!(
            answer(&free, name),
            Some("ok"),
            "{name} fails even unconfined"
        );
    }
}

async fn a_sibling_cannot_be_traced_or_read(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let ws = workspace();
    // A sibling of the same user, started just before: python's parent
    // (bash) started it too.
    let body = format!(
        "target = int(sys.argv[1])\n\
         buf = ctypes.create_string_buffer(8)\n\
         local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)\n\
         remote = (ctypes.c_void_p * 2)(4096, 8)\n\
         call('process_vm_readv', {readv}, target, local, 1, remote, 1, 0)\n\
         call('kcmp', {kcmp}, os.getpid(), target, 1, 0, 0)\n\
         call('ptrace_attach', {ptrace}, 16, target, 0, 0)",
        readv = libc::SYS_process_vm_readv,
        kcmp = libc::SYS_kcmp,
        ptrace = libc::SYS_ptrace,
    );
    let script = format!(
        "sleep 1000 & target=$!; {} \"$target\"; kill -9 \"$target\"",
        python(&body)
    );
    let ran = run(&sandbox, &bash(&ws, &script)).await;
    assert_refused(
        &ran,
        &["ptrace_attach", "process_vm_readv", "kcmp"],
        "EPERM",
        "a sibling process was traced or read",
    );
}

async fn kernel_interfaces_a_run_never_needs_are_refused(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let ws = workspace();
    // Harmless where they work (they touch only the calling process), so also
    // tried unconfined. perf_event_attr: a software task clock of this
    // process, user space only.
    let harmless = format!(
        "params = ctypes.create_string_buffer(120)\n\
         call('io_uring_setup', {io_uring_setup}, 1, params)\n\
         attr = bytearray(128)\n\
         attr[0:4] = (1).to_bytes(4, 'little')\n\
         attr[4:8] = (128).to_bytes(4, 'little')\n\
         attr[8:16] = (1).to_bytes(8, 'little')\n\
         attr[40:48] = ((1 << 0) | (1 << 5) | (1 << 6)).to_bytes(8, 'little')\n\
         attr = ctypes.create_string_buffer(bytes(attr), 128)\n\
         call('perf_event_open', {perf}, attr, 0, -1, -1, 0)\n\
         call('userfaultfd', {uffd}, 1 | os.O_CLOEXEC)\n\
         call('bpf', {bpf}, 0, ctypes.create_string_buffer(72), 72)\n\
         call('personality_no_aslr', {personality}, 0x0040000)\n\
         call('personality_query', {personality}, 0xffffffff)\n\
         call('personality_linux', {personality}, 0)\n\
         handle = ctypes.create_string_buffer(136)\n\
         handle[0:4] = (128).to_bytes(4, 'little')\n\
         mount_id = ctypes.c_int(0)\n\
         call('name_to_handle_at', {name_to_handle_at}, -100, b'.', handle, ctypes.byref(mount_id), 0)",
        io_uring_setup = libc::SYS_io_uring_setup,
        perf = libc::SYS_perf_event_open,
        uffd = libc::SYS_userfaultfd,
        bpf = libc::SYS_bpf,
        personality = libc::SYS_personality,
        name_to_handle_at = libc::SYS_name_to_handle_at,
    );
    // Only ever tried in the sandbox (unconfined, as root, they would change
    // the host); the mount point does not exist, should one get through.
    let privileged = format!(
        "call('fsopen', {fsopen}, b'tmpfs', 0)\n\
         call('mount', {mount}, b'none', b'/no-such-mount-point', b'tmpfs', 0, None)\n\
         call('syslog', {syslog}, 10, None, 0)",
        fsopen = libc::SYS_fsopen,
        mount = libc::SYS_mount,
        syslog = libc::SYS_syslog,
    );
    let body = format!("{harmless}\n{privileged}");
    let ran = run(&sandbox, &bash(&ws, &python(&body))).await;
    assert_refused(
        &ran,
        &[
            "io_uring_setup",
            "perf_event_open",
            "userfaultfd",
            "bpf",
            "personality_no_aslr",
            "name_to_handle_at",
            "fsopen",
            "mount",
            "syslog",
        ],
        "EPERM",
        "a kernel interface a run never needs was reached",
    );
    let got = answers(&ran.stdout);
    for name in ["personality_query", "personality_linux"] {
        assert_eq!(
            answer(&got, name),
            Some("ok"),
            "{name} must work: {}",
            ran.stderr
        );
    }
    let free = unconfined(&harmless);
    for name in [
        "io_uring_setup",
        "perf_event_open",
        "userfaultfd",
        "personality_no_aslr",
        "name_to_handle_at",
    ] {
        assert_eq!(
            answer(&free, name),
            Some("ok"),
            "{name} fails even unconfined"
        );
    }
}

async fn ordinary_programs_still_work(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let ws = workspace();
    let script = "set -e; \
        sh -c 'echo sh-works'; \
        export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null; \
        git init -q -b main repo && cd repo && echo hi > f && git add f && \
        git -c user.name=t -c user.email=t@e commit -qm first && git log --format=%s; cd ..; \
        python3 -c 'import threading, subprocess; t = threading.Thread(target=print, args=(\"thread-works\",)); t.start(); t.join(); print(subprocess.run([\"echo\", \"subprocess-works\"], capture_output=True, text=True).stdout.strip())'; \
        getent hosts localhost >/dev/null && echo resolves-localhost; \
        ip -o link show lo >/dev/null && echo ip-works; \
        grep '^Seccomp:' /proc/self/status";
    let ran = run(&sandbox, &bash(&ws, script)).await;
    assert!(
        ran.status.success(),
        "an ordinary program failed in the sandbox ({:?}, signal {:?}): {}",
        ran.status.code(),
        ran.status.signal(),
        ran.stderr
    );
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(
        lines[..lines.len() - 1],
        [
            "sh-works",
            "first",
            "thread-works",
            "subprocess-works",
            "resolves-localhost",
            "ip-works"
        ],
        "{}",
        ran.stderr
    );
    assert_eq!(
        lines
            .last()
            .map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["Seccomp:", "2"]),
        "the program does not run under a seccomp filter"
    );
}

async fn the_self_check_reports_the_filter(tier: Tier) {
    let sandbox = sandbox_in(tier).await;
    let status = sandbox.status();
    assert!(
        status.seccomp.starts_with("filter"),
        "the self-check does not report a seccomp filter: {status:?}"
    );
}

/// A host where no seccomp filter can be installed (here: a service that
/// itself runs under a filter refusing seccomp(2)) has no sandbox: this test
/// again, in a child whose seccomp(2) fails with EPERM.
#[test]
fn a_host_without_seccomp_has_no_sandbox() {
    const AGAIN: &str = "CHORUS_SANDBOX_TEST_NO_SECCOMP";
    if std::env::var_os(AGAIN).is_some() {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let status = runtime.block_on(chorus_sandbox::Sandbox::start(SandboxConfig {
            launcher: Some(env!("CARGO_BIN_EXE_chorus-sandbox").into()),
            ..SandboxConfig::default()
        }));
        let status = status.status();
        assert_eq!(
            status.state, "unavailable",
            "the sandbox claims to be enforced without seccomp: {status:?}"
        );
        assert!(
            status.problems.iter().any(|p| p.contains("seccomp")),
            "the reason does not name seccomp: {status:?}"
        );
        return;
    }
    let deny_seccomp = seccompiler::SeccompFilter::new(
        [(libc::SYS_seccomp, Vec::new())].into_iter().collect(),
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM.cast_unsigned()),
        std::env::consts::ARCH
            .try_into()
            .expect("a supported architecture"),
    )
    .expect("filter");
    let program: seccompiler::BpfProgram = deny_seccomp.try_into().expect("compiled");
    let mut command = std::process::Command::new(std::env::current_exe().expect("this test"));
    command
        .args([
            "a_host_without_seccomp_has_no_sandbox",
            "--exact",
            "--nocapture",
        ])
        .env(AGAIN, "1");
    // SAFETY: between fork and exec the closure only makes two system calls
    // (prctl and seccomp, in `apply_filter`) on a program compiled before the
    // fork; it allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        use std::os::unix::process::CommandExt;
        command
            .pre_exec(move || seccompiler::apply_filter(&program).map_err(std::io::Error::other));
    }
    let out = command.output().expect("this test runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "without seccomp:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The same tests, in both tiers, by a service that is not root.
#[test]
fn the_filter_holds_for_a_service_that_is_not_root() {
    support::again_as_nobody("holds_for_a_service_that_is_not_root");
}
