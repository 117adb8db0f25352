//! Finding and killing every process of a run, including ones that left its
//! process group.
//!
//! Each agent process is started with `CHORUS_RUN_ID=<run id>` in its
//! environment, and every process it starts inherits it, including ones that call
//! `setsid` or daemonize (they leave the process group, not the environment). At
//! the end of a run [`kill_run_processes`] kills the group and then every process
//! of this user whose `/proc/<pid>/environ` carries the marker, until none is left.
//! A process that deliberately scrubs its environment *and* leaves the group would
//! escape; only a cgroup per run closes that (see docs/decisions/0010).

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::time::{Instant, sleep};
use tracing::{debug, warn};

/// The environment variable that marks every process of a run.
pub const RUN_MARKER: &str = "CHORUS_RUN_ID";

/// How often the sweep looks again while processes are still dying.
const POLL: Duration = Duration::from_millis(20);

/// A process as `/proc` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcInfo {
    pid: i32,
    pgid: i32,
    /// `Z` for a zombie (dead, not yet reaped).
    state: char,
    /// When it started, in clock ticks since boot.
    start: u64,
}

/// Reads `/proc/<pid>/stat`: state, process group and start time.
fn proc_info(pid: i32) -> Option<ProcInfo> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state (3rd field of the file), ppid, pgrp, ..., starttime (22nd).
    Some(ProcInfo {
        pid,
        state: fields.first()?.chars().next()?,
        pgid: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// When a process started (clock ticks since boot): every process a run's CLI
/// starts is at least as young as the CLI, so older ones need not be examined.
pub fn start_time(pid: i32) -> Option<u64> {
    proc_info(pid).map(|p| p.start)
}

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn is_alive(pid: i32) -> bool {
    proc_info(pid).is_some_and(|p| p.state != 'Z')
}

/// Every pid in `/proc`.
fn all_pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether the process's environment holds `CHORUS_RUN_ID=<marker>`.
fn carries_marker(pid: i32, entry: &[u8]) -> bool {
    fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == entry))
}

/// The live processes of a run: members of its process group, and processes
/// carrying its marker (only those started at `born_after` or later are
/// examined for it). Never this process itself.
fn run_processes(pgid: Option<i32>, marker: &str, born_after: Option<u64>) -> BTreeSet<i32> {
    let me = std::process::id().cast_signed();
    let entry = format!("{RUN_MARKER}={marker}").into_bytes();
    all_pids()
        .into_iter()
        .filter(|pid| *pid != me)
        .filter_map(proc_info)
        .filter(|p| p.state != 'Z')
        .filter(|p| {
            Some(p.pgid) == pgid
                || (born_after.is_none_or(|t| p.start >= t) && carries_marker(p.pid, &entry))
        })
        .map(|p| p.pid)
        .collect()
}

/// Whether a live (non-zombie) process is still in group `pgid`.
fn group_alive(pgid: i32) -> bool {
    // No member at all (the usual end: the leader reaped, nothing left): no scan.
    if killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH) {
        return false;
    }
    all_pids()
        .into_iter()
        .filter_map(proc_info)
        .any(|p| p.pgid == pgid && p.state != 'Z')
}

/// Kills every process of a run: SIGTERM to the group, up to `grace` for it to
/// go, then SIGKILL to the group and to every process carrying the run's marker,
/// again until none is alive (bounded by `grace` plus five seconds). Processes
/// started before `born_after` (the CLI's start, when known) cannot be the run's
/// and are not examined for the marker. Returns the pids that were still alive
/// at the end (normally none).
pub async fn kill_run_processes(
    pgid: Option<i32>,
    marker: &str,
    born_after: Option<u64>,
    grace: Duration,
) -> Vec<i32> {
    if let Some(group) = pgid {
        signal_group(group, Signal::SIGTERM);
        let until = Instant::now() + grace;
        // Only the group is waited for here: the marker scan (which reads every
        // candidate's environment) runs once the grace is over or the group gone.
        while Instant::now() < until && group_alive(group) {
            sleep(POLL).await;
        }
    }
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(group) = pgid {
            signal_group(group, Signal::SIGKILL);
        }
        let left = run_processes(pgid, marker, born_after);
        if left.is_empty() {
            return Vec::new();
        }
        for pid in &left {
            debug!(pid, marker, "killing a process of the run");
            match kill(Pid::from_raw(*pid), Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => warn!(pid, error = %e, "cannot kill a process of the run"),
            }
        }
        if Instant::now() >= until {
            let left: Vec<i32> = run_processes(pgid, marker, born_after)
                .into_iter()
                .collect();
            if !left.is_empty() {
                warn!(
                    ?left,
                    marker, "processes of the run are still alive after SIGKILL"
                );
            }
            return left;
        }
        sleep(POLL).await;
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pgid, ?signal, error = %e, "cannot signal the run's process group"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_never_a_run_process() {
        let me = std::process::id().cast_signed();
        assert!(is_alive(me));
        let info = proc_info(me).expect("own stat");
        assert!(!run_processes(Some(info.pgid), "no-such-run", None).contains(&me));
    }

    #[tokio::test]
    async fn a_marked_process_outside_the_group_is_killed() {
        let marker = uuid::Uuid::new_v4().to_string();
        // setsid: its own session and group, so only the marker finds it; it
        // ignores SIGTERM.
        let mut child = tokio::process::Command::new("setsid")
            .args(["sh", "-c", "trap '' TERM; exec sleep 300"])
            .env(RUN_MARKER, &marker)
            .spawn()
            .expect("spawn setsid");
        let pid = child.id().expect("pid").cast_signed();
        // Wait until the marked process exists (setsid execs in place).
        let until = Instant::now() + Duration::from_secs(10);
        while run_processes(None, &marker, None).is_empty() {
            assert!(Instant::now() < until, "the marked process never appeared");
            tokio::task::yield_now().await;
        }
        let left = kill_run_processes(None, &marker, None, Duration::from_millis(100)).await;
        assert!(left.is_empty(), "still alive: {left:?}");
        let status = child.wait().await.expect("reap");
        assert!(!status.success());
        assert!(!is_alive(pid));
    }
}
