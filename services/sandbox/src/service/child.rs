//! A process started by [`Sandbox::spawn`](super::Sandbox::spawn), and
//! stopping it with everything it started.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::time::{Instant, sleep, timeout};
use tracing::warn;

use crate::policy::{
    EXIT_CANNOT_EXECUTE, EXIT_FENCED, EXIT_NOT_FOUND, EXIT_OVER_MEMORY, EXIT_SETUP_FAILED,
    EXIT_WROTE_TOO_MUCH, MESSAGE_PREFIX,
};

/// How long a stopped sandbox may take to go after SIGUSR1 before its
/// launcher is killed outright.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// A process started by [`Sandbox::spawn`](super::Sandbox::spawn). In an enforced sandbox the child is
/// the launcher's monitor: when it has exited, every process of the sandbox is
/// dead. With the sandbox off it is the program, leading its process group.
#[derive(Debug)]
pub struct SandboxedChild {
    child: Child,
    pid: Pid,
    enforced: bool,
    /// The started process has been reaped: its group id may be reused.
    finished: bool,
}

impl SandboxedChild {
    /// The started process: the launcher's monitor when `enforced`.
    pub(super) fn new(child: Child, pid: Pid, enforced: bool) -> Self {
        Self {
            child,
            pid,
            enforced,
            finished: false,
        }
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// The pid of the process the service started (the monitor, or the program
    /// with the sandbox off).
    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Waits until the program exits. In an enforced sandbox every process it
    /// started is dead by then too (with the sandbox off, see [`Self::clean_up`]).
    ///
    /// # Errors
    /// The process could not be waited for.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.child.wait().await;
        self.finished = status.is_ok();
        status
    }

    /// Asks every process to stop (SIGTERM to every process of the sandbox; to
    /// the process group with the sandbox off).
    pub fn terminate(&self) {
        let result = if self.enforced {
            kill(self.pid, Signal::SIGTERM)
        } else {
            killpg(self.pid, Signal::SIGTERM)
        };
        if let Err(e) = result
            && e != Errno::ESRCH
        {
            warn!(pid = self.pid.as_raw(), error = %e, "cannot signal a sandboxed process");
        }
    }

    /// Kills every process now and waits until they are dead; returns how the
    /// started process ended.
    ///
    /// # Errors
    /// The process could not be waited for.
    pub async fn kill_all(&mut self) -> io::Result<ExitStatus> {
        if self.enforced {
            // The monitor kills init (and so the namespace), waits for it,
            // then exits.
            let _ = kill(self.pid, Signal::SIGUSR1);
            if let Ok(status) = timeout(KILL_WAIT, self.wait()).await {
                return status;
            }
            warn!(
                pid = self.pid.as_raw(),
                "the sandbox launcher did not stop in time; killing it"
            );
            let _ = killpg(self.pid, Signal::SIGKILL);
            return self.wait().await;
        }
        let _ = killpg(self.pid, Signal::SIGKILL);
        let status = self.wait().await;
        wait_group_dead(self.pid).await;
        status
    }

    /// After the program exited by itself: with the sandbox off, kills what it
    /// left in its process group (an enforced sandbox is already empty).
    pub async fn clean_up(&mut self) {
        if !self.enforced {
            let _ = killpg(self.pid, Signal::SIGKILL);
            wait_group_dead(self.pid).await;
        }
    }

    /// Stops everything: SIGTERM, up to `grace` to exit, then [`Self::kill_all`].
    ///
    /// # Errors
    /// The process could not be waited for.
    pub async fn stop(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        self.terminate();
        match timeout(grace, self.wait()).await {
            Ok(status) => {
                self.clean_up().await;
                status
            }
            Err(_) => self.kill_all().await,
        }
    }

    /// The launcher's own reason when the sandbox could not start the program
    /// (exit 125, 126 or 127 with its message on stderr).
    pub fn launch_failure(&self, status: ExitStatus, stderr: &str) -> Option<String> {
        let code = status.code()?;
        if !self.enforced
            || ![
                EXIT_SETUP_FAILED,
                EXIT_CANNOT_EXECUTE,
                EXIT_NOT_FOUND,
                EXIT_FENCED,
                EXIT_WROTE_TOO_MUCH,
                EXIT_OVER_MEMORY,
            ]
            .contains(&code)
        {
            return None;
        }
        stderr
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(MESSAGE_PREFIX))
            .map(str::to_owned)
    }
}

impl Drop for SandboxedChild {
    /// Dropped before its end (a caller went away): everything is killed — the
    /// launcher and init with the sandbox on (the kernel then kills the rest),
    /// the process group with it off.
    fn drop(&mut self) {
        if !self.finished {
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
    }
}

/// With the sandbox off: waits (bounded) until no member of group `pgid` is
/// still running; zombies count as dead (their parent may never reap them).
async fn wait_group_dead(pgid: Pid) {
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        if killpg(pgid, None) == Err(Errno::ESRCH) || running_members(pgid) == 0 {
            return;
        }
        if started.elapsed() >= KILL_WAIT {
            warn!(
                pgid = pgid.as_raw(),
                "processes of a group are still running after SIGKILL"
            );
            return;
        }
        // Killed again in case one joined the group late.
        let _ = killpg(pgid, Signal::SIGKILL);
        sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// How many processes of group `pgid` are neither zombies nor dead.
fn running_members(pgid: Pid) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        })
        .filter_map(|e| std::fs::read(e.path().join("stat")).ok())
        .filter_map(|stat| parse_stat(&stat))
        .filter(|(state, pgrp)| *pgrp == pgid.as_raw() && !matches!(state, b'Z' | b'X' | b'x'))
        .count()
}

/// State letter and process group from `/proc/<pid>/stat`
/// (`pid (comm) state ppid pgrp ...`, where comm may hold spaces and ')').
fn parse_stat(stat: &[u8]) -> Option<(u8, i32)> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_state_and_group() {
        assert_eq!(parse_stat(b"12 (a b) c) S 1 12 12 0"), Some((b'S', 12)));
        assert_eq!(parse_stat(b"garbage"), None);
    }
}
