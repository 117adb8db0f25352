//! The processes of a landlock-tier sandbox, found without a PID namespace.
//!
//! The monitor is the child subreaper of its sandbox: whatever a process of
//! the sandbox starts — in a session of its own, double-forked, orphaned — stays
//! below the monitor in the tree of parents, because an orphan goes to its
//! nearest subreaper and nothing can move a process elsewhere. So the
//! sandbox's processes are exactly the monitor's descendants (less its egress
//! proxy), read from `/proc`.
//!
//! A process is signalled through a pidfd taken while it was seen as a
//! descendant, and only if it still was one after the pidfd was taken: a pid
//! freed and reused by another process of the same user (a thread of the
//! service) is never signalled.

use std::collections::{HashMap, HashSet};
use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Every live process below `root` in the tree of parents, except those in
/// `skip` and theirs.
pub fn descendants(root: Pid, skip: &[Pid]) -> Vec<Pid> {
    let parents = parents();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, ppid) in &parents {
        children.entry(*ppid).or_default().push(*pid);
    }
    let mut found = Vec::new();
    let mut queue = vec![root.as_raw()];
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if skip.iter().any(|s| s.as_raw() == *child) {
                continue;
            }
            found.push(Pid::from_raw(*child));
            queue.push(*child);
        }
    }
    found
}

/// Each process's parent, as `/proc` shows them now.
fn parents() -> HashMap<i32, i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect()
}

/// The parent of `pid` from `/proc/<pid>/stat` (the fourth field, after the
/// command name in parentheses, which may itself hold parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `signal` to every process below `root` but those in `skip`.
pub fn signal_all(root: Pid, skip: &[Pid], signal: Signal) {
    let family = family(root, skip);
    for pid in &family {
        if *pid != root.as_raw() {
            send(*pid, &family, signal);
        }
    }
}

/// Signals `pid` if, once a pidfd holds it, its parent is still one of
/// `family`.
fn send(pid: i32, family: &HashSet<i32>, signal: Signal) {
    let _ = send_number(pid, family, signal as libc::c_int);
}

/// [`send`] with a signal's number (0 checks that the process is there;
/// real-time signals too): ESRCH when the process is gone or no longer one
/// of the family.
pub fn send_number(pid: i32, family: &HashSet<i32>, signal: libc::c_int) -> Result<(), Errno> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
    // descriptor or -1; it touches no memory of ours.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let errno = Errno::last();
        if errno == Errno::ESRCH {
            return Err(errno);
        }
        // No pidfds here (an old kernel, or a runtime's filter): the direct
        // children (which only this process reaps, so their pids cannot be
        // reused while they are its children) and the rest as they are.
        if parent_of(pid).is_some_and(|p| family.contains(&p)) {
            // SAFETY: kill(2) reads no memory.
            #[allow(unsafe_code)]
            let done = unsafe { libc::kill(pid, signal) };
            return if done == 0 {
                Ok(())
            } else {
                Err(Errno::last())
            };
        }
        return Err(Errno::ESRCH);
    }
    let raw = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: `raw` is a descriptor pidfd_open just returned to this process;
    // nothing else owns it.
    #[allow(unsafe_code)]
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
    if !parent_of(pid).is_some_and(|p| family.contains(&p)) {
        return Err(Errno::ESRCH);
    }
    // SAFETY: pidfd_send_signal(2) with a null siginfo reads no memory.
    #[allow(unsafe_code)]
    let done = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            raw,
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    drop(pidfd);
    if done == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// The family [`send_number`] checks against: `root` and every process
/// below it but those in `skip`.
pub fn family(root: Pid, skip: &[Pid]) -> HashSet<i32> {
    descendants(root, skip)
        .iter()
        .map(|p| p.as_raw())
        .chain([root.as_raw()])
        .collect()
}

/// The process group of `pid`, from `/proc/<pid>/stat`.
pub fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// The thread group (process) of the thread `tid`.
pub fn process_of(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// Kills every process below `root` but those in `skip`, stopping them all
/// before it kills any: signalled one after the other, a process would
/// otherwise go on for a moment after another died (a shell whose `sleep`
/// was killed first runs its next command, or exits by itself).
pub fn kill_at_once(root: Pid, skip: &[Pid]) {
    signal_all(root, skip, Signal::SIGSTOP);
    signal_all(root, skip, Signal::SIGKILL);
}

/// Kills every process below `root` and reaps them, until none is left: a
/// process that was forking when it was killed has its child found and
/// killed in the next round. `root` has no other child (its proxy is gone).
pub fn kill_all(root: Pid) {
    loop {
        if descendants(root, &[]).is_empty() {
            reap_ready(&[]);
            return;
        }
        kill_at_once(root, &[]);
        // Each killed child of ours ends, and each killed grandchild ends or
        // is handed to this subreaper: wait for one of them.
        while waitpid(None::<Pid>, Some(WaitPidFlag::__WALL)) == Err(Errno::EINTR) {}
    }
}

/// Reaps every child that has ended, without waiting.
pub fn reap_ready(skip: &[Pid]) -> Vec<WaitStatus> {
    let mut reaped = Vec::new();
    loop {
        match waitpid(
            None::<Pid>,
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            Ok(WaitStatus::StillAlive) | Err(_) => return reaped,
            Ok(status) => {
                if !status.pid().is_some_and(|p| skip.contains(&p)) {
                    reaped.push(status);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_is_read_past_a_name_with_parentheses() {
        let me = std::process::id().cast_signed();
        assert_eq!(parent_of(me), Some(nix::unistd::getppid().as_raw()));
        assert_eq!(parent_of(i32::MAX), None);
    }
}
