//! The landlock tier: a sandbox made without any namespace or privilege, for
//! hosts where the namespace tier cannot start (a container under a
//! restricted security context: no user namespaces, a masked `/proc`).
//!
//! Two processes:
//!
//! - the **monitor** (the process the service started) is the child
//!   subreaper of everything the sandbox starts, so the sandbox's processes
//!   are exactly its descendants (see [`tree`]). It binds the egress
//!   proxy's listeners, answers the sandbox's `connect`, `bind` and `listen`
//!   calls (see [`notify`]), passes stop requests on to every descendant,
//!   and when the program ends kills every process left — setsid,
//!   double-forked and orphaned ones too — then exits the way the program
//!   did;
//! - the **leader** confines itself and becomes the program: a session of
//!   its own, the run's cgroup where there is one, the policy's user and no
//!   capabilities, the limits, Landlock (files, TCP, signal and
//!   abstract-socket scopes, and no ptrace of anything outside — so no
//!   `/proc/<pid>/environ` or memory of the service either), the seccomp
//!   deny list, and last the filter that hands network calls to the monitor.
//!
//! Its `/tmp` is a directory of its own (`TMPDIR`), removed at the end.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};
use nix::sys::wait::WaitStatus;
use nix::unistd::{ForkResult, Pid, chdir, execve, fork, getpid, getppid, pipe2, setsid};

use super::cgroup::Created;
use super::egress::Proxy;
use super::{Started, Target, confine, egress, fence, fenced, notify, seccomp, signals, tree};
use crate::policy::{
    EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_OVER_MEMORY, EXIT_SETUP_FAILED, EXIT_WROTE_TOO_MUCH,
    Identity, MESSAGE_PREFIX, Policy, Tier,
};

/// What the monitor made before the leader, and undoes at the end.
struct Made {
    cgroups: Option<Created>,
    proxy: Option<Proxy>,
    tmp: Option<PathBuf>,
}

impl Made {
    /// Stops the proxy, kills every process of the sandbox, removes the
    /// cgroups and the private `/tmp`.
    fn end(&self) {
        if let Some(proxy) = &self.proxy {
            proxy.stop();
        }
        tree::kill_all(getpid());
        if let Some(cgroups) = &self.cgroups {
            cgroups.remove();
        }
        if let Some(tmp) = &self.tmp {
            remove_tree(tmp);
        }
    }

    fn fail(&self, message: &str) -> ! {
        self.end();
        super::fail(message)
    }
}

/// The monitor's part, from the point where the two tiers part (the cgroups
/// made, the egress proxy started, the signals blocked).
pub fn run(policy: &Policy, target: &Target, started: Started) -> ! {
    let mut made = Made {
        cgroups: started.cgroups,
        proxy: started.proxy,
        tmp: None,
    };
    check_policy(policy, &made);
    become_subreaper(policy, &made);
    if let Some(why) = policy.fence.as_deref().and_then(fence::down) {
        made.end();
        fenced(&why);
    }
    let tmp = private_tmp(policy.identity)
        .unwrap_or_else(|e| made.fail(&format!("cannot make the sandbox's /tmp: {e}")));
    made.tmp = Some(tmp.clone());
    let routes = match started.egress {
        Some(channel) => {
            egress::hand_over_shared(policy, channel).unwrap_or_else(|e| made.fail(&e))
        }
        None => HashMap::new(),
    };
    let (leader, listener) = start_leader(policy, target, &tmp, &made);
    let outside: Vec<Pid> = made.proxy.iter().map(Proxy::pid).collect();
    let supervisor = listener.map(|fd| notify::Supervisor::new(fd, routes, outside));
    watch(policy, leader, &started.mask, supervisor, &made)
}

/// Refuses what this tier cannot do as the policy asks.
fn check_policy(policy: &Policy, made: &Made) {
    if let Err(e) = confine::check_identity(policy.identity) {
        made.fail(&e);
    }
    if let Identity::User { uid, gid } = policy.identity
        && nix::unistd::geteuid().is_root()
    {
        for path in std::iter::once(&policy.cwd)
            .chain(&policy.read_write)
            .chain(&policy.read_only)
        {
            if let Err(e) = confine::check_reachable(path, uid, gid) {
                made.fail(&e);
            }
        }
    }
    if !policy.covers.is_empty() {
        made.fail("the landlock tier cannot show a file with other content (covers need the namespace tier)");
    }
}

/// Makes the monitor the parent of every orphan of the sandbox, and tells it
/// (SIGUSR1) when the service dies.
fn become_subreaper(policy: &Policy, made: &Made) {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        made.fail(&format!("cannot become the sandbox's child subreaper: {e}"));
    }
    // No PID namespace dies with this process: when the service dies, the
    // monitor is told (SIGUSR1, which it waits for) and kills every process
    // of the sandbox before it exits.
    let parent = getppid();
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGUSR1) {
        made.fail(&format!("cannot arm the parent-death signal: {e}"));
    }
    if getppid() != parent || policy.parent.is_some_and(|p| parent.as_raw() != p) {
        made.fail("the service that started the sandbox has exited");
    }
}

/// Forks the leader and waits until it has confined itself: returns its pid
/// and the listener of its network filter (when it has one). A leader that
/// failed to confine itself ends the sandbox with its exit code and reason.
fn start_leader(
    policy: &Policy,
    target: &Target,
    tmp: &Path,
    made: &Made,
) -> (Pid, Option<OwnedFd>) {
    let (notify_ours, notify_theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap_or_else(|e| made.fail(&format!("cannot make a socket pair: {e}")));
    let (errors_read, errors_write) =
        pipe2(OFlag::O_CLOEXEC).unwrap_or_else(|e| made.fail(&format!("cannot make a pipe: {e}")));
    let monitor = getpid();

    // SAFETY: the monitor is single-threaded (the launcher starts no thread
    // in it), so the child may do anything after fork.
    #[allow(unsafe_code)]
    let forked = unsafe { fork() };
    let leader = match forked {
        Ok(ForkResult::Child) => {
            drop(notify_ours);
            drop(errors_read);
            let errors = std::fs::File::from(errors_write);
            let cgroups = made.cgroups.as_ref();
            let Err((code, message)) = lead(policy, target, monitor, tmp, cgroups, &notify_theirs);
            let _ = (&errors).write_all(format!("{code} {message}").as_bytes());
            std::process::exit(code)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => made.fail(&format!("cannot start the program: {e}")),
    };
    drop(notify_theirs);
    drop(errors_write);
    let listener = receive_fd(&notify_ours);
    drop(notify_ours);
    let mut report = String::new();
    let _ = std::fs::File::from(errors_read).read_to_string(&mut report);
    if let Some((code, message)) = report.split_once(' ')
        && let Ok(code) = code.parse::<i32>()
    {
        eprintln!("{MESSAGE_PREFIX}{message}");
        made.end();
        std::process::exit(code);
    }
    (leader, listener)
}

/// The leader: confines itself, hands the monitor its network filter, and
/// becomes the program. Returns only on failure: the exit code and why.
fn lead(
    policy: &Policy,
    target: &Target,
    monitor: Pid,
    tmp: &Path,
    cgroups: Option<&Created>,
    channel: &OwnedFd,
) -> Result<std::convert::Infallible, (i32, String)> {
    let setup = |what: &str, e: &dyn std::fmt::Display| (EXIT_SETUP_FAILED, format!("{what}: {e}"));
    setsid().map_err(|e| setup("cannot start a session", &e))?;
    if let Some(cgroups) = cgroups {
        cgroups
            .join_self()
            .map_err(|e| setup("cannot join the sandbox's cgroup", &e))?;
    }
    confine::identity(policy.identity)
        .map_err(|e| setup("cannot switch to the sandbox's user", &e))?;
    // Changing credentials disarms the parent-death signal.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| setup("cannot arm the parent-death signal", &e))?;
    if getppid() != monitor {
        return Err((EXIT_SETUP_FAILED, "the launcher has exited".to_owned()));
    }
    confine::limits(&policy.limits, cgroups.map(Created::plan))
        .map_err(|e| setup("cannot set resource limits", &e))?;
    let program = match target {
        Target::Program(argv) => {
            let mut env = egress::program_env(&policy.network);
            env.push((OsString::from("TMPDIR"), tmp.as_os_str().to_owned()));
            Some(super::init::exec_args(argv, &env))
        }
        Target::Probe => None,
    };
    let gate_signals = policy.gate_signals || landlock_abi() < SIGNAL_SCOPE_ABI;
    let view = confine::View::Shared {
        tmp,
        scope_signals: !gate_signals,
    };
    let landlock = confine::landlock(policy, &view)
        .map_err(|e| setup("cannot apply the Landlock rules", &e))?;
    seccomp::install(Tier::Landlock).map_err(|e| setup("cannot apply the seccomp filter", &e))?;
    let listener = notify::install(gate_signals).map_err(|e| (EXIT_SETUP_FAILED, e))?;
    send_fd(channel, &listener).map_err(|e| setup("cannot hand the network filter over", &e))?;
    drop(listener);
    let Some(program) = program else {
        // The self-check reports what it applied.
        println!("{}", confine::describe(&landlock));
        std::process::exit(0);
    };
    signals::reset_for_exec().map_err(|e| {
        (
            EXIT_CANNOT_EXECUTE,
            format!("cannot prepare '{}': {e}", program.shown),
        )
    })?;
    chdir(&policy.cwd).map_err(|e| {
        (
            EXIT_CANNOT_EXECUTE,
            format!(
                "cannot enter the working directory {}: {e}",
                policy.cwd.display()
            ),
        )
    })?;
    let Err(e) = execve(&program.path, &program.argv, &program.envp);
    Err((
        if e == Errno::ENOENT {
            EXIT_NOT_FOUND
        } else {
            EXIT_CANNOT_EXECUTE
        },
        format!("cannot execute '{}': {}", program.shown, e.desc()),
    ))
}

/// Waits for the leader, answering network calls and passing stop requests
/// on; then ends everything and exits the way the program did.
fn watch(
    policy: &Policy,
    leader: Pid,
    mask: &SigSet,
    mut supervisor: Option<notify::Supervisor>,
    made: &Made,
) -> ! {
    let budget = Some(super::budget::Budget::of(
        policy,
        made.cgroups.as_ref(),
        made.proxy.as_ref().map(Proxy::pid),
    ));
    let mut waiter = fence::Waiter::new(mask, policy.fence.as_deref(), budget)
        .unwrap_or_else(|e| made.fail(&format!("cannot wait for signals: {e}")));
    if let Some(supervisor) = &supervisor {
        waiter.watch(supervisor.fd().as_raw_fd());
    }
    let proxy: Vec<Pid> = made.proxy.iter().map(Proxy::pid).collect();
    let me = getpid();
    let ending = loop {
        match waiter.next() {
            fence::Event::Signal(Signal::SIGCHLD) => {
                let ended = tree::reap_ready(&proxy)
                    .into_iter()
                    .find(|status| status.pid() == Some(leader));
                if let Some(status) = ended {
                    break status;
                }
            }
            fence::Event::Signal(
                signal @ (Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT),
            ) => tree::signal_all(me, &proxy, signal),
            fence::Event::Signal(Signal::SIGUSR1) => {
                tree::kill_at_once(me, &proxy);
            }
            fence::Event::Signal(_) => {}
            fence::Event::Ready => {
                if let Some(supervisor) = &mut supervisor {
                    supervisor.serve_one();
                }
            }
            fence::Event::Fenced(why) => {
                made.end();
                let _ = waiter.settle();
                fenced(&why)
            }
            fence::Event::WroteTooMuch(why) => {
                made.end();
                let _ = waiter.settle();
                eprintln!("{MESSAGE_PREFIX}wrote too much: {why}");
                std::process::exit(EXIT_WROTE_TOO_MUCH)
            }
            fence::Event::OverMemory(why) => {
                made.end();
                let _ = waiter.settle();
                eprintln!("{MESSAGE_PREFIX}over its memory: {why}");
                std::process::exit(EXIT_OVER_MEMORY)
            }
        }
    };
    drop(supervisor);
    made.end();
    // What was written after the last look counts too: a call that passed
    // its run's limit says so, though its processes had ended.
    if let Some(why) = waiter.settle() {
        eprintln!("{MESSAGE_PREFIX}wrote too much: {why} (its processes had ended)");
        std::process::exit(EXIT_WROTE_TOO_MUCH)
    }
    match ending {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, signal, _) => signals::die_by(signal as i32),
        _ => super::fail("lost track of the program"),
    }
}

/// The Landlock ABI from which signals are scoped (Linux 6.12).
const SIGNAL_SCOPE_ABI: i64 = 6;

/// The kernel's Landlock ABI (0 without Landlock).
fn landlock_abi() -> i64 {
    /// `LANDLOCK_CREATE_RULESET_VERSION`.
    const VERSION: u32 = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) reads no memory and
    // returns the ABI version or -1.
    #[allow(unsafe_code)]
    let abi = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            VERSION,
        )
    };
    abi.max(0)
}

/// A directory of the sandbox's own under the launcher's temporary
/// directory, owned by the sandbox's user, readable by it alone.
fn private_tmp(identity: Identity) -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    let mut last = None;
    for attempt in 0..16u32 {
        let dir = base.join(format!("chorus-sandbox-{}-{attempt}", getpid()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                if let Identity::User { uid, gid } = identity {
                    std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
                }
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// Removes `dir` and all in it, making what its processes left unreadable
/// readable first.
fn remove_tree(dir: &Path) {
    if std::fs::remove_dir_all(dir).is_ok() {
        return;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&d) {
            for entry in entries.filter_map(Result::ok) {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn send_fd(channel: &OwnedFd, fd: &OwnedFd) -> nix::Result<()> {
    sendmsg::<()>(
        channel.as_raw_fd(),
        &[IoSlice::new(b"N")],
        &[ControlMessage::ScmRights(&[fd.as_raw_fd()])],
        MsgFlags::empty(),
        None,
    )
    .map(|_| ())
}

/// The descriptor the leader sent; None when it closed its end first.
fn receive_fd(channel: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let message = loop {
        match recvmsg::<()>(
            channel.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => {}
            other => break other.ok()?,
        }
    };
    for cmsg in message.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg
            && let Some(fd) = raw.first()
        {
            // SAFETY: the kernel installed `fd` in this process's table for
            // this message; nothing else refers to it.
            #[allow(unsafe_code)]
            return Some(unsafe { OwnedFd::from_raw_fd(*fd) });
        }
    }
    None
}
