//! Child processes of tool calls (bash, git), and the promise they keep:
//! **no process of a tool call outlives it.**
//!
//! [`run`] starts a prepared [`Command`] with stdin closed (`/dev/null`) as the
//! leader of its own process group, and reads stdout and stderr concurrently, each
//! up to a byte cap (bytes past the cap are read and dropped, so a chatty child never
//! blocks on a full pipe). The call then ends in one of three ways:
//!
//! - the leader exits: the whole group is sent SIGKILL anyway, so background jobs it
//!   left behind (`sleep 100 &`) die with the call and release the pipes;
//! - the timeout passes, or
//! - the cancellation token fires (service shutdown): the whole group is sent
//!   SIGKILL, grandchildren included, even ones that ignore SIGTERM.
//!
//! In every case the leader is reaped and [`run`] waits (bounded) until no member
//! of the group is still running before it returns. If the future is dropped
//! midway (the gRPC call went away), a guard sends the group SIGKILL and tokio's
//! `kill_on_drop` reaps the leader.
//!
//! After a normal exit the group is signalled once the leader has been reaped, so
//! in principle its id could have been reused by then; that needs a new process to
//! get that very pid and make itself a group leader within microseconds, and is
//! accepted (tokio offers no wait that leaves the child unreaped).
//!
//! Limits: a process that leaves the group (`setsid`, a daemon) escapes the kill.
//! If it still holds stdout or stderr, reading stops [`PIPE_GRACE`] after the
//! group is gone. Killing those needs a cgroup or a subreaper per run, which is the
//! orchestrator's job (DESIGN §3, process control).

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Prefix of the service's own environment variables, never shown to children.
pub const PRIVATE_ENV_PREFIX: &str = "CHORUS_";

/// How long pipes are still read after the group is dead, for a process that left
/// the group and kept them open.
pub const PIPE_GRACE: Duration = Duration::from_secs(2);

/// How long [`run`] waits for killed group members to finish dying.
const DEATH_WAIT: Duration = Duration::from_secs(5);

/// Read buffer size for each pipe.
const READ_CHUNK: usize = 64 * 1024;

/// A command for a tool call: `program` in `cwd`, with the service's environment
/// minus every `CHORUS_*` variable. Callers add arguments and variables.
pub fn command(program: impl AsRef<OsStr>, cwd: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(cwd)
        .env_clear()
        .envs(inherited_env(std::env::vars_os()));
    cmd
}

/// The part of the service's environment a child may see: everything except the
/// service's own `CHORUS_*` variables (run tokens, keys, configuration).
pub fn inherited_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
) -> impl Iterator<Item = (OsString, OsString)> {
    parent.into_iter().filter(|(key, _)| {
        !key.as_encoded_bytes()
            .starts_with(PRIVATE_ENV_PREFIX.as_bytes())
    })
}

/// Limits of one process run.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Kill the group when the leader has not exited after this long.
    pub timeout: Duration,
    /// Most bytes kept of stdout, and separately of stderr.
    pub max_output_bytes: usize,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The leader exited by itself (with any status).
    Exited,
    /// The timeout passed; the group was killed.
    TimedOut,
    /// The cancellation token fired; the group was killed.
    Cancelled,
}

/// Bytes read from one pipe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// At most the cap's worth of bytes, from the start of the stream.
    pub bytes: Vec<u8>,
    /// True when the stream had more bytes than were kept.
    pub truncated: bool,
}

impl Captured {
    /// The bytes as text: invalid UTF-8 is replaced, and a character cut in half
    /// by the cap is dropped.
    pub fn text(&self) -> String {
        lossy_text(&self.bytes, self.truncated)
    }
}

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct Finished {
    pub ending: Ending,
    /// The leader's wait status (after the kill when it timed out or was cancelled).
    pub status: ExitStatus,
    pub stdout: Captured,
    pub stderr: Captured,
}

impl Finished {
    /// True when the leader exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.ending == Ending::Exited && self.status.success()
    }
}

/// Runs `cmd` to the end as described in the module documentation. The only error
/// is failing to start (or to reap) the process; a non-zero exit is a result.
pub async fn run(
    mut cmd: Command,
    limits: RunLimits,
    cancel: &CancellationToken,
) -> io::Result<Finished> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| io::Error::other("the child process has no pid"))?;
    let mut group = GroupKiller::new(Pid::from_raw(pid));

    let stop_reading = CancellationToken::new();
    let _stop_reading_on_drop = stop_reading.clone().drop_guard();
    let stdout = spawn_reader(child.stdout.take(), limits, &stop_reading);
    let stderr = spawn_reader(child.stderr.take(), limits, &stop_reading);

    let deadline = Instant::now() + limits.timeout;
    let (ending, exited) = tokio::select! {
        biased;
        status = child.wait() => (Ending::Exited, Some(status)),
        () = cancel.cancelled() => (Ending::Cancelled, None),
        () = sleep_until(deadline) => (Ending::TimedOut, None),
    };
    // The leader has exited (leftover background jobs must go) or must be stopped.
    group.kill();
    let status = match exited {
        Some(status) => status,
        None => child.wait().await,
    };
    group.wait_until_dead().await;
    let (stdout, stderr) = collect(stdout, stderr, &stop_reading).await;
    group.disarm();
    Ok(Finished {
        ending,
        status: status?,
        stdout,
        stderr,
    })
}

fn spawn_reader<R>(
    pipe: Option<R>,
    limits: RunLimits,
    stop: &CancellationToken,
) -> JoinHandle<Captured>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(read_capped(pipe, limits.max_output_bytes, stop.clone()))
}

/// Waits for both readers; stops them [`PIPE_GRACE`] after the group died if a
/// process outside the group still holds a pipe.
async fn collect(
    stdout: JoinHandle<Captured>,
    stderr: JoinHandle<Captured>,
    stop: &CancellationToken,
) -> (Captured, Captured) {
    let both = async { (stdout.await, stderr.await) };
    tokio::pin!(both);
    let (stdout, stderr) = tokio::select! {
        joined = &mut both => joined,
        () = sleep(PIPE_GRACE) => {
            warn!("a process outside the tool call's process group still holds its output pipes; output after this point is dropped");
            stop.cancel();
            both.await
        }
    };
    (stdout.unwrap_or_default(), stderr.unwrap_or_default())
}

/// Reads `pipe` to its end (or until `stop`), keeping the first `cap` bytes.
async fn read_capped<R>(pipe: Option<R>, cap: usize, stop: CancellationToken) -> Captured
where
    R: AsyncRead + Unpin,
{
    let mut captured = Captured::default();
    let Some(mut pipe) = pipe else {
        return captured;
    };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            read = pipe.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
        };
        let room = cap.saturating_sub(captured.bytes.len());
        if n > room {
            captured.truncated = true;
        }
        captured.bytes.extend_from_slice(&buf[..n.min(room)]);
    }
    captured
}

/// Sends SIGKILL to a process group, explicitly or when dropped before it was
/// disarmed (a run abandoned midway).
#[derive(Debug)]
struct GroupKiller {
    pgid: Pid,
    armed: bool,
}

impl GroupKiller {
    fn new(pgid: Pid) -> Self {
        Self { pgid, armed: true }
    }

    fn kill(&self) {
        kill_group(self.pgid);
    }

    /// Waits (bounded by [`DEATH_WAIT`]) until no member of the group is still
    /// running. SIGKILL is delivered asynchronously: a member may take a moment to
    /// finish exiting. Zombies count as dead (their parent may be an init that
    /// never reaps).
    async fn wait_until_dead(&self) {
        let started = Instant::now();
        let mut pause = Duration::from_micros(100);
        loop {
            // ESRCH: no process, not even a zombie, is left in the group.
            if killpg(self.pgid, None) == Err(Errno::ESRCH) {
                return;
            }
            match running_members(self.pgid) {
                Some(0) | None => return,
                Some(_) if started.elapsed() >= DEATH_WAIT => {
                    warn!(
                        pgid = self.pgid.as_raw(),
                        "processes of a tool call are still running after SIGKILL"
                    );
                    return;
                }
                Some(_) => {
                    // Members got SIGKILL again in case one joined the group late.
                    self.kill();
                    sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
            }
        }
    }

    /// The group is dead and its leader reaped: do not signal its id again (the
    /// number could be reused).
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pgid);
        }
    }
}

fn kill_group(pgid: Pid) {
    match killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            warn!(pgid = pgid.as_raw(), error = %e, "could not kill a tool call's process group")
        }
    }
}

/// How many processes of group `pgid` are neither zombies nor dead, from
/// `/proc`; `None` when `/proc` cannot be read.
fn running_members(pgid: Pid) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let count = entries
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
        .count();
    Some(count)
}

/// State letter and process group id from a `/proc/<pid>/stat` line:
/// `pid (comm) state ppid pgrp ...`, where comm may contain spaces and ')'.
fn parse_stat(stat: &[u8]) -> Option<(u8, i32)> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Bytes as text, replacing invalid UTF-8. When `truncated`, a multi-byte
/// character cut by the cap at the very end is dropped instead of replaced.
pub fn lossy_text(bytes: &[u8], truncated: bool) -> String {
    let bytes = if truncated {
        without_partial_char(bytes)
    } else {
        bytes
    };
    String::from_utf8_lossy(bytes).into_owned()
}

/// `bytes` without a trailing incomplete UTF-8 sequence.
fn without_partial_char(bytes: &[u8]) -> &[u8] {
    let tail_start = bytes.len().saturating_sub(3);
    let Some(lead) = (tail_start..bytes.len())
        .rev()
        .find(|&i| bytes[i] & 0xC0 != 0x80)
    else {
        return bytes;
    };
    let needed = match bytes[lead] {
        b if b & 0xE0 == 0xC0 => 2,
        b if b & 0xF0 == 0xE0 => 3,
        b if b & 0xF8 == 0xF0 => 4,
        _ => 1,
    };
    if bytes.len() - lead < needed {
        &bytes[..lead]
    } else {
        bytes
    }
}

#[cfg(test)]
mod tests;
