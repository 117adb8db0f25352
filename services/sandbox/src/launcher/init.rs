//! init: PID 1 of the sandbox's namespaces. It confines itself (everything it
//! starts inherits that: identity, limits, Landlock, the seccomp filter),
//! starts the leader, reaps orphans, passes stop requests on to every process
//! of the namespace, and exits when the leader exits.

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, chdir, execve, fork, pipe2, setsid};

use super::cgroup::Created;
use super::{Target, confine, egress, fail, mounts, net, seccomp, signals};
use crate::policy::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_SETUP_FAILED, Policy};

/// How the leader ended, as init reports it to the monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderExit {
    Exited(i32),
    Signaled(i32),
}

/// PATH for finding the program when the environment has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub fn run(
    policy: &Policy,
    target: &Target,
    report: OwnedFd,
    lifeline: &OwnedFd,
    cgroups: Option<&Created>,
    egress_channel: Option<OwnedFd>,
) -> ! {
    die_with_monitor(lifeline);
    let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWUTS;
    if policy.network.own_namespace() {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if let Err(e) = unshare(flags) {
        fail(&format!("cannot create namespaces: {e}"));
    }
    if let Some(cgroups) = cgroups
        && let Err(e) = cgroups.join_self()
    {
        fail(&format!("cannot join the sandbox's cgroup: {e}"));
    }
    if let Err(e) = mounts::build(policy) {
        fail(&format!("cannot build the sandbox's file system view: {e}"));
    }
    if policy.network.own_namespace()
        && let Err(e) = net::loopback_up()
    {
        fail(&format!("cannot bring up the loopback interface: {e}"));
    }
    // Proxied: the proxy's and the forwards' listeners, bound in here, go to
    // the proxy process outside (see `egress`).
    if let Some(channel) = egress_channel
        && let Err(e) = egress::hand_over(policy, channel)
    {
        fail(&e);
    }
    let _ = nix::unistd::sethostname("chorus-sandbox");
    if let Err(e) = confine::identity(policy.identity) {
        fail(&format!("cannot switch to the sandbox's user: {e}"));
    }
    // Changing credentials disarms the parent-death signal.
    die_with_monitor(lifeline);
    // Not dumpable: the program (same user) can neither trace init nor read
    // its /proc files. The program itself is dumpable again after exec.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        fail(&format!("cannot make init undumpable: {e}"));
    }
    if let Err(e) = confine::limits(&policy.limits, cgroups.map(Created::plan)) {
        fail(&format!("cannot set resource limits: {e}"));
    }
    let program = match target {
        Target::Program(argv) => Some(exec_args(argv, &egress::program_env(&policy.network))),
        Target::Probe => None,
    };
    let landlock = confine::landlock(policy, &confine::View::Namespaces)
        .unwrap_or_else(|e| fail(&format!("cannot apply the Landlock rules: {e}")));
    // After Landlock (which set no_new_privs), before the leader: init and
    // everything it starts run under the filter.
    if let Err(e) = seccomp::install(crate::policy::Tier::Namespaces) {
        fail(&format!("cannot apply the seccomp filter: {e}"));
    }
    if program.is_none() {
        // The self-check reports what it applied.
        println!("{}", confine::describe(&landlock));
    }
    let mask = signals::block();
    let leader = start_leader(program.as_ref(), &policy.cwd);
    reap(leader, &mask, report)
}

/// Arms the parent-death signal and exits if the monitor is already gone.
fn die_with_monitor(lifeline: &OwnedFd) {
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        fail(&format!("cannot arm the parent-death signal: {e}"));
    }
    let mut fds = [PollFd::new(lifeline.as_fd(), PollFlags::POLLIN)];
    let gone = poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR));
    if gone {
        std::process::exit(EXIT_SETUP_FAILED);
    }
}

/// The program's path (found on PATH when it has no slash), argv and environment.
pub(super) struct ExecArgs {
    pub(super) path: CString,
    pub(super) shown: String,
    pub(super) argv: Vec<CString>,
    pub(super) envp: Vec<CString>,
}

/// `overrides` replace variables of the launcher's environment (the program's).
pub(super) fn exec_args(argv: &[OsString], overrides: &[(OsString, OsString)]) -> ExecArgs {
    let c_string = |s: &[u8]| {
        CString::new(s).unwrap_or_else(|_| fail("an argument or variable contains a NUL byte"))
    };
    let program = argv.first().map(OsString::as_os_str).unwrap_or_default();
    let shown = program.to_string_lossy().into_owned();
    let path = match find_program(Path::new(program)) {
        Some(path) => path,
        None => {
            eprintln!(
                "{}cannot execute '{shown}': not found on PATH",
                crate::policy::MESSAGE_PREFIX
            );
            std::process::exit(EXIT_NOT_FOUND);
        }
    };
    ExecArgs {
        path: c_string(path.as_os_str().as_bytes()),
        shown,
        argv: argv.iter().map(|a| c_string(a.as_bytes())).collect(),
        envp: std::env::vars_os()
            .filter(|(k, _)| !overrides.iter().any(|(name, _)| name == k))
            .chain(overrides.iter().cloned())
            .map(|(k, v)| {
                let mut entry = k.as_bytes().to_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                c_string(&entry)
            })
            .collect(),
    }
}

/// `program` itself when it has a slash, else the first executable file of
/// that name on PATH (as the sandbox sees the file system).
fn find_program(program: &Path) -> Option<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            nix::unistd::access(candidate, nix::unistd::AccessFlags::X_OK).is_ok()
                && candidate.is_file()
        })
}

/// Starts the leader: default signals, a session of its own, the working
/// directory, then the program. An exec failure comes back on a pipe, so init
/// can say why and exit 126 or 127.
fn start_leader(program: Option<&ExecArgs>, cwd: &Path) -> Pid {
    let (errors_read, errors_write) =
        pipe2(OFlag::O_CLOEXEC).unwrap_or_else(|e| fail(&format!("cannot make a pipe: {e}")));
    // SAFETY: init is single-threaded; the child only makes system calls and
    // exits.
    #[allow(unsafe_code)]
    let forked = unsafe { fork() };
    match forked {
        Ok(ForkResult::Child) => {
            drop(errors_read);
            let errors = std::fs::File::from(errors_write);
            let stage = |what: u8, e: Errno| -> ! {
                let mut message = vec![what];
                message.extend_from_slice(&(e as i32).to_ne_bytes());
                let _ = (&errors).write_all(&message);
                std::process::exit(if e == Errno::ENOENT {
                    EXIT_NOT_FOUND
                } else {
                    EXIT_CANNOT_EXECUTE
                });
            };
            if let Err(e) = signals::reset_for_exec() {
                stage(b's', e);
            }
            if let Err(e) = setsid() {
                stage(b's', e);
            }
            if let Err(e) = chdir(cwd) {
                stage(b'c', e);
            }
            let Some(program) = program else {
                std::process::exit(0);
            };
            let Err(e) = execve(&program.path, &program.argv, &program.envp);
            stage(b'x', e)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(errors_write);
            let mut report = Vec::new();
            let _ = std::fs::File::from(errors_read).read_to_end(&mut report);
            if let [what, errno @ ..] = report.as_slice()
                && let Ok(errno) = <[u8; 4]>::try_from(errno)
            {
                let errno = Errno::from_raw(i32::from_ne_bytes(errno));
                let shown = program.map_or("the self-check", |p| p.shown.as_str());
                let message = match what {
                    b'c' => format!(
                        "cannot enter the working directory {}: {errno}",
                        cwd.display()
                    ),
                    b'x' => format!("cannot execute '{shown}': {}", errno.desc()),
                    _ => format!("cannot prepare '{shown}': {errno}"),
                };
                eprintln!("{}{message}", crate::policy::MESSAGE_PREFIX);
                // The leader has exited; its status is the one reported.
                let _ = waitpid(child, None);
                std::process::exit(if errno == Errno::ENOENT && *what == b'x' {
                    EXIT_NOT_FOUND
                } else {
                    EXIT_CANNOT_EXECUTE
                });
            }
            child
        }
        Err(e) => fail(&format!("cannot start the program: {e}")),
    }
}

/// Reaps every child until the leader exits; passes SIGTERM (and the like) on
/// to every process of the namespace.
fn reap(leader: Pid, mask: &nix::sys::signal::SigSet, report: OwnedFd) -> ! {
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => loop {
                match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) if pid == leader => {
                        finish(report, LeaderExit::Exited(code), code)
                    }
                    Ok(WaitStatus::Signaled(pid, signal, _)) if pid == leader => finish(
                        report,
                        LeaderExit::Signaled(signal as i32),
                        128 + signal as i32,
                    ),
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            },
            Ok(signal @ (Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT)) => {
                // -1 from a namespace's init: every other process of the namespace.
                let _ = kill(Pid::from_raw(-1), signal);
            }
            _ => {}
        }
    }
}

/// Tells the monitor how the leader ended and exits; the kernel then kills
/// whatever is left in the namespace.
fn finish(report: OwnedFd, ending: LeaderExit, code: i32) -> ! {
    let line = match ending {
        LeaderExit::Exited(code) => format!("exited {code}"),
        LeaderExit::Signaled(signal) => format!("signaled {signal}"),
    };
    let _ = std::fs::File::from(report).write_all(line.as_bytes());
    std::process::exit(code)
}

/// What init reported, if it got to report.
pub fn read_report(report: OwnedFd) -> Option<LeaderExit> {
    let mut text = String::new();
    std::fs::File::from(report).read_to_string(&mut text).ok()?;
    let (kind, number) = text.trim().split_once(' ')?;
    let number: i32 = number.parse().ok()?;
    match kind {
        "exited" => Some(LeaderExit::Exited(number)),
        "signaled" => Some(LeaderExit::Signaled(number)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_says_how_the_leader_ended() {
        for (ending, code) in [(LeaderExit::Exited(3), 3), (LeaderExit::Signaled(9), 137)] {
            let (read, write) = pipe2(OFlag::O_CLOEXEC).expect("pipe");
            let line = match ending {
                LeaderExit::Exited(c) => format!("exited {c}"),
                LeaderExit::Signaled(s) => format!("signaled {s}"),
            };
            std::fs::File::from(write)
                .write_all(line.as_bytes())
                .expect("write");
            assert_eq!(read_report(read), Some(ending), "{code}");
        }
        let (read, write) = pipe2(OFlag::O_CLOEXEC).expect("pipe");
        drop(write);
        assert_eq!(read_report(read), None);
    }

    #[test]
    fn programs_without_a_slash_are_found_on_path() {
        assert_eq!(
            find_program(Path::new("/no/such")),
            Some(PathBuf::from("/no/such"))
        );
        let sh = find_program(Path::new("sh")).expect("sh on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(find_program(Path::new("no-such-program-anywhere")), None);
    }
}
