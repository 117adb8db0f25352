//! The launcher, `chorus-sandbox --policy <json> -- <program> [args...]`: runs
//! one program confined as its policy says, and makes sure that nothing it
//! starts outlives it. Its environment is the program's.
//!
//! Three processes, each with one job:
//!
//! - the **monitor** (the process the service started) dies with the service
//!   (parent-death signal), makes the sandbox's cgroups, creates the PID (and,
//!   for a service that is not root, user) namespace and waits for init. SIGTERM asks every process of the sandbox to stop;
//!   SIGUSR1 kills them all at once. When init is gone, every process of the
//!   sandbox is gone (the kernel kills a PID namespace with its init), so the
//!   monitor removes the cgroups and exits the way the program did: with its
//!   exit code, or killed by its signal;
//! - **init**, PID 1 of the new PID namespace, dies with the monitor, creates
//!   the mount, IPC, UTS and (without network) network namespaces, builds
//!   the mount view (see [`mounts`]), gives up root and capabilities, applies
//!   the limits and Landlock (see [`confine`]) and the seccomp filter (see
//!   [`seccomp`]), starts the program and reaps
//!   every orphan. When the program (the leader) exits, init exits, and with
//!   it every process left in the namespace: setsid, double-forked and
//!   environment-scrubbed ones too;
//! - the **leader**, the program itself, in a session of its own.
//!
//! Exit codes of its own: 125 the sandbox could not be set up, 126 the program
//! could not be executed, 127 it was not found; the reason is on stderr after
//! `chorus-sandbox: `.

mod bpf;
mod budget;
pub(crate) mod cgroup;
mod confine;
mod egress;
mod fence;
mod init;
mod landlock_tier;
mod mounts;
mod net;
mod notify;
mod proxy;
mod seccomp;
mod signals;
mod tree;

use std::ffi::OsString;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, getegid, geteuid, getppid, pipe2};

use crate::policy::{
    EXIT_FENCED, EXIT_OVER_MEMORY, EXIT_SETUP_FAILED, EXIT_WROTE_TOO_MUCH, Identity,
    MESSAGE_PREFIX, PROBE_PROGRAM, Policy, Tier,
};

/// What the launcher was asked to run.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A program and its arguments (argv[0] is the program).
    Program(Vec<OsString>),
    /// The self-check: every step is taken, then the leader exits 0.
    Probe,
}

/// The launcher's `main`.
pub fn main() -> ! {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Some((host, port)) = connect_args(&args) {
        egress::connect_main(&host, &port);
    }
    match parse(args) {
        Ok((policy, target)) => run(&policy, target),
        Err(message) => fail(&message),
    }
}

fn parse(args: Vec<OsString>) -> Result<(Policy, Target), String> {
    const USAGE: &str = "usage: chorus-sandbox --policy <json> -- <program> [args...]";
    let mut args = args.into_iter();
    if args.next().as_deref() != Some("--policy".as_ref()) {
        return Err(USAGE.to_owned());
    }
    let json = args.next().ok_or(USAGE)?;
    let json = json.to_str().ok_or("the policy is not UTF-8")?;
    let policy: Policy =
        serde_json::from_str(json).map_err(|e| format!("the policy is not valid: {e}"))?;
    policy
        .validate()
        .map_err(|e| format!("the policy is not valid: {e}"))?;
    if args.next().as_deref() != Some("--".as_ref()) {
        return Err(USAGE.to_owned());
    }
    let program: Vec<OsString> = args.collect();
    let target = match program.first() {
        None => return Err(USAGE.to_owned()),
        Some(first) if first == PROBE_PROGRAM => Target::Probe,
        Some(_) => Target::Program(program),
    };
    Ok((policy, target))
}

/// `connect <host> <port>`, or `<host> <port>` (how git calls
/// GIT_PROXY_COMMAND): the CONNECT client of a proxied sandbox.
fn connect_args(args: &[OsString]) -> Option<(String, String)> {
    let words: Vec<&str> = args.iter().map(|a| a.to_str()).collect::<Option<_>>()?;
    match words.as_slice() {
        ["connect", host, port] => Some(((*host).to_owned(), (*port).to_owned())),
        [host, port] if !host.starts_with('-') => Some(((*host).to_owned(), (*port).to_owned())),
        _ => None,
    }
}

/// Prints why the sandbox could not be set up and exits 125.
pub(crate) fn fail(message: &str) -> ! {
    eprintln!("{MESSAGE_PREFIX}{message}");
    std::process::exit(EXIT_SETUP_FAILED)
}

/// The monitor: what both tiers share, then the chosen tier.
fn run(policy: &Policy, target: Target) -> ! {
    let started = Started::start(policy);
    let service_is_root = geteuid().is_root();
    if service_is_root && policy.identity == Identity::Service {
        started.unwind("refusing to run a program as root: the policy must name a user");
    }
    if policy.tier == Tier::Landlock {
        landlock_tier::run(policy, &target, started)
    }
    namespace_tier(policy, &target, started, service_is_root)
}

/// What the monitor sets up before the tiers part: the parent-death signal,
/// the blocked signals, the run's cgroups and the egress proxy.
pub(crate) struct Started {
    mask: SigSet,
    cgroups: Option<cgroup::Created>,
    proxy: Option<egress::Proxy>,
    /// The monitor's end of the proxy's channel, for the sandbox's side.
    egress: Option<OwnedFd>,
}

impl Started {
    fn start(policy: &Policy) -> Self {
        // Die with the service, even one killed by SIGKILL. If it died before
        // the signal was armed, this process already has another parent.
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            fail(&format!("cannot arm the parent-death signal: {e}"));
        }
        if policy.parent.is_some_and(|p| getppid().as_raw() != p) {
            fail("the service that started the sandbox has exited");
        }
        signals::close_inherited_descriptors();
        let mask = signals::block();
        let cgroups = policy.cgroups.as_ref().map(|plan| {
            cgroup::Created::make(plan, &policy.limits, policy.run.as_deref())
                .unwrap_or_else(|e| fail(&format!("cannot make the sandbox's cgroup: {e}")))
        });
        let mut started = Self {
            mask,
            cgroups,
            proxy: None,
            egress: None,
        };
        // The egress proxy (a proxied network) starts while this process is
        // still single-threaded and outside the new namespaces, before any
        // pipe init watches exists.
        let questions = policy
            .questions_fd
            .map(egress::questions_channel)
            .transpose()
            .unwrap_or_else(|e| started.unwind(&e));
        match egress::start(policy, questions) {
            Ok(Some((proxy, channel))) => {
                started.proxy = Some(proxy);
                started.egress = Some(channel);
            }
            Ok(None) => {}
            Err(e) => started.unwind(&e),
        }
        started
    }

    /// Stops the proxy, removes the cgroups, and fails with `message`.
    fn unwind(&self, message: &str) -> ! {
        if let Some(proxy) = &self.proxy {
            proxy.stop();
        }
        self.remove_cgroups();
        fail(message)
    }

    fn remove_cgroups(&self) {
        if let Some(cgroups) = &self.cgroups {
            cgroups.remove();
        }
    }
}

/// The namespace tier's monitor: makes the PID (and user) namespace, forks
/// init into it, and waits for init.
fn namespace_tier(policy: &Policy, target: &Target, started: Started, service_is_root: bool) -> ! {
    // init reports how the program ended on `report`; it watches `lifeline`
    // (whose other end only this process holds) to tell that this process died.
    let pipe = || {
        pipe2(OFlag::O_CLOEXEC)
            .unwrap_or_else(|e| started.unwind(&format!("cannot make a pipe: {e}")))
    };
    let (report_read, report_write) = pipe();
    let (lifeline_read, lifeline_write) = pipe();
    enter_namespaces(&started, service_is_root);
    // A run whose fence is already down starts nothing.
    if let Some(why) = policy.fence.as_deref().and_then(fence::down) {
        started.remove_cgroups();
        fenced(&why);
    }
    let mut started = started;
    let egress = started.egress.take();
    // SAFETY: this process is single-threaded (the launcher starts no thread),
    // so the child may do anything after fork.
    #[allow(unsafe_code)]
    let forked = unsafe { fork() };
    let cgroups = started.cgroups.as_ref();
    match forked {
        Ok(ForkResult::Child) => {
            drop((report_read, lifeline_write));
            init::run(
                policy,
                target,
                report_write,
                &lifeline_read,
                cgroups,
                egress,
            )
        }
        Ok(ForkResult::Parent { child }) => {
            drop((report_write, lifeline_read, egress));
            let budget = Some(budget::Budget::of(
                policy,
                cgroups,
                started.proxy.as_ref().map(egress::Proxy::pid),
            ));
            monitor(
                child,
                &started.mask,
                (policy.fence.as_deref(), budget),
                report_read,
                lifeline_write,
                cgroups,
                started.proxy.as_ref(),
            )
        }
        Err(e) => started.unwind(&format!("cannot start the sandbox's init: {e}")),
    }
}

/// Only the PID (and user) namespace here: the monitor must keep seeing the
/// host's file system (to remove the cgroups); init makes the others.
fn enter_namespaces(started: &Started, service_is_root: bool) {
    let mut flags = CloneFlags::CLONE_NEWPID;
    if !service_is_root {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    let (uid, gid) = (geteuid(), getegid());
    if let Err(e) = unshare(flags) {
        let hint = if service_is_root {
            ""
        } else {
            " (a service that is not root needs unprivileged user namespaces: sysctl user.max_user_namespaces)"
        };
        started.unwind(&format!("cannot create namespaces: {e}{hint}"));
    }
    if !service_is_root && let Err(e) = map_own_ids(uid.as_raw(), gid.as_raw()) {
        started.unwind(&format!("cannot map the user namespace: {e}"));
    }
}

/// In a new user namespace: the service's own uid and gid, mapped to themselves.
fn map_own_ids(uid: u32, gid: u32) -> std::io::Result<()> {
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

/// Kills init — the kernel kills the namespace with it — and removes the
/// sandbox's cgroups.
fn kill_all(init: Pid, cgroups: Option<&cgroup::Created>) {
    let _ = kill(init, Signal::SIGKILL);
    let _ = waitpid(init, None);
    if let Some(cgroups) = cgroups {
        cgroups.remove();
    }
}

/// Prints why the run's fence is down and exits 124.
fn fenced(why: &str) -> ! {
    eprintln!("{MESSAGE_PREFIX}fenced: {why}");
    std::process::exit(EXIT_FENCED)
}

/// Waits for init, passing stop requests on, then exits the way the program
/// did; kills everything by itself once the run's `fence` is down or the
/// processes wrote more than their `budget`.
fn monitor(
    init: Pid,
    mask: &SigSet,
    (fence, budget): (Option<&std::path::Path>, Option<budget::Budget>),
    report: OwnedFd,
    _lifeline: OwnedFd,
    cgroups: Option<&cgroup::Created>,
    proxy: Option<&egress::Proxy>,
) -> ! {
    let mut waiter = fence::Waiter::new(mask, fence, budget).unwrap_or_else(|e| {
        let _ = kill(init, Signal::SIGKILL);
        fail(&format!("cannot wait for signals: {e}"))
    });
    let status = loop {
        match waiter.next() {
            fence::Event::Signal(Signal::SIGCHLD) => {
                match waitpid(init, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {}
                    Ok(status) => break Some(status),
                    Err(_) => break None,
                }
            }
            fence::Event::Signal(
                Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT,
            ) => {
                let _ = kill(init, Signal::SIGTERM);
            }
            fence::Event::Signal(Signal::SIGUSR1) => {
                let _ = kill(init, Signal::SIGKILL);
            }
            fence::Event::Signal(_) | fence::Event::Ready => {}
            fence::Event::Fenced(why) => {
                kill_all(init, cgroups);
                let _ = waiter.settle();
                fenced(&why)
            }
            fence::Event::WroteTooMuch(why) => {
                kill_all(init, cgroups);
                let _ = waiter.settle();
                eprintln!("{MESSAGE_PREFIX}wrote too much: {why}");
                std::process::exit(EXIT_WROTE_TOO_MUCH)
            }
            fence::Event::OverMemory(why) => {
                kill_all(init, cgroups);
                let _ = waiter.settle();
                eprintln!("{MESSAGE_PREFIX}over its memory: {why}");
                std::process::exit(EXIT_OVER_MEMORY)
            }
        }
    };
    // What was written after the last look counts too: a call that passed
    // its run's limit says so, though its processes had ended.
    if let Some(why) = waiter.settle() {
        eprintln!("{MESSAGE_PREFIX}wrote too much: {why} (its processes had ended)");
        std::process::exit(EXIT_WROTE_TOO_MUCH)
    }
    // init has exited: the kernel has killed and reaped every other process of
    // its namespace, so the cgroups are empty, and nothing needs the proxy.
    if let Some(proxy) = proxy {
        proxy.stop();
    }
    if let Some(cgroups) = cgroups {
        cgroups.remove();
    }
    match init::read_report(report) {
        Some(init::LeaderExit::Exited(code)) => std::process::exit(code),
        Some(init::LeaderExit::Signaled(signal)) => signals::die_by(signal),
        None => match status {
            Some(WaitStatus::Exited(_, code)) => std::process::exit(code),
            Some(WaitStatus::Signaled(_, signal, _)) => signals::die_by(signal as i32),
            _ => fail("lost track of the sandbox's init"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Network;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn policy_json() -> String {
        serde_json::to_string(&Policy {
            parent: None,
            cwd: "/".into(),
            read_write: vec![],
            read_only: vec![],
            network: Network::None,
            identity: Identity::Service,
            limits: crate::policy::Limits::default(),
            cgroups: None,
            covers: Vec::new(),
            run: None,
            fence: None,
            ledger: None,
            tier: crate::policy::Tier::Namespaces,
            gate_signals: false,
            questions_fd: None,
        })
        .expect("json")
    }

    #[test]
    fn the_command_line_is_policy_then_program() {
        let json = policy_json();
        let (policy, target) =
            parse(args(&["--policy", &json, "--", "/bin/echo", "hi"])).expect("parses");
        assert_eq!(policy.cwd, std::path::PathBuf::from("/"));
        assert!(matches!(target, Target::Program(p) if p == args(&["/bin/echo", "hi"])));
        let (_, probe) = parse(args(&["--policy", &json, "--", PROBE_PROGRAM])).expect("probe");
        assert!(matches!(probe, Target::Probe));
    }

    #[test]
    fn a_bad_command_line_is_refused_with_its_usage() {
        let json = policy_json();
        for bad in [
            args(&[]),
            args(&["--policy"]),
            args(&["--policy", &json, "/bin/echo"]),
            args(&["--policy", &json, "--"]),
        ] {
            let err = parse(bad).expect_err("refused");
            assert!(err.starts_with("usage:"), "{err}");
        }
        let err = parse(args(&["--policy", "{}", "--", "x"])).expect_err("bad policy");
        assert!(err.starts_with("the policy is not valid"), "{err}");
        let escaping = json.replace(r#""run":null"#, r#""run":"../../x""#);
        assert_ne!(escaping, json);
        let err = parse(args(&["--policy", &escaping, "--", "x"])).expect_err("bad run id");
        assert!(err.contains("the run id '../../x' must be"), "{err}");
    }
}
