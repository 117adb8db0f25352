//! Child processes of tool calls (bash, git), and the promise they keep:
//! **no process of a tool call outlives it.**
//!
//! [`run`] starts a [`ProcessSpec`] through the run sandbox
//! ([`chorus_sandbox`]): its own PID namespace, a view of only the workspace and
//! the system directories, the workspace owner's user (never root), no network
//! unless granted, an allow-listed environment. stdin is closed; stdout and
//! stderr are read concurrently, each up to a byte cap (bytes past the cap are
//! read and dropped, so a chatty child never blocks on a full pipe). The call
//! then ends in one of three ways:
//!
//! - the program exits: its sandbox goes with it, so background jobs it left
//!   behind (`sleep 100 &`, setsid daemons) are dead when [`run`] returns;
//! - the timeout passes, or
//! - the cancellation token fires (the call's deadline passed, its caller went
//!   away, or the service is shutting down): every process of the sandbox is
//!   killed, even ones that ignore SIGTERM.
//!
//! If the future is dropped midway, dropping the child kills the sandbox's
//! launcher, and the kernel the rest.
//!
//! With the sandbox off (`--sandbox off`) the program runs as the service's
//! user, in a process group that is killed at the end; a process that leaves
//! the group escapes that.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use chorus_run_token::RunGrant;
use chorus_sandbox::{EgressRule, Network, ProcessSpec, Sandbox, SandboxError};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How long pipes are still read after the program ended, for a process that
/// escaped (only possible with the sandbox off) and kept them open.
pub const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Read buffer size for each pipe.
const READ_CHUNK: usize = 64 * 1024;

/// The PATH of every tool process: system directories only.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables a tool process may get from the service's environment, when set:
/// the locale. With the network grant, also the proxy and certificate ones.
const LOCALE_ENV: [&str; 2] = ["LANG", "TZ"];

/// The environment every tool process starts from — an allow-list, never the
/// service's own environment: PATH, HOME and TMPDIR (the sandbox's private
/// /tmp), TERM, the locale; with `network`, proxies and certificates.
pub fn base_env(network: bool) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), SYSTEM_PATH.into()),
        ("HOME".into(), "/tmp".into()),
        ("TMPDIR".into(), "/tmp".into()),
        ("TERM".into(), "dumb".into()),
    ];
    let passed = LOCALE_ENV.iter().chain(if network {
        &chorus_sandbox::NETWORK_ENV[..]
    } else {
        &[]
    });
    for name in passed {
        if let Some(value) = std::env::var_os(name) {
            env.push(((*name).into(), value));
        }
    }
    if !env.iter().any(|(k, _)| k == "LANG") {
        env.push(("LANG".into(), "C.UTF-8".into()));
    }
    env
}

/// The network of a tool process of a run: none without the `network`
/// grant; with it, a namespace of its own whose only way out is the
/// launcher's egress proxy, allowing what the token's egress list allows
/// (empty: nothing outside), never the host's loopback.
///
/// # Errors
/// The token carries a rule that does not parse (a token of another
/// version of Chorus).
pub fn network_of(grant: &RunGrant) -> Result<Network, crate::error::ToolError> {
    if !grant.allows(chorus_catalog::NETWORK) {
        return Ok(Network::None);
    }
    let allow = grant
        .egress
        .iter()
        .map(|rule| EgressRule::parse(rule))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            crate::error::ToolError::FailedPrecondition(format!(
                "the run token's egress list holds a rule this tool-exec cannot read ({e}); check that the orchestrator and tool-exec run the same version"
            ))
        })?;
    Ok(Network::Proxied {
        allow,
        forwards: Vec::new(),
    })
}

/// Limits of one process run.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Kill every process when the program has not exited after this long.
    pub timeout: Duration,
    /// Most bytes kept of stdout, and separately of stderr.
    pub max_output_bytes: usize,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandEnd {
    /// The program exited by itself (with any status).
    Exited,
    /// The timeout passed; every process was killed.
    TimedOut,
    /// The cancellation token fired; every process was killed.
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
    pub ending: CommandEnd,
    /// The program's wait status (after the kill when it timed out or was cancelled).
    pub status: ExitStatus,
    pub stdout: Captured,
    pub stderr: Captured,
}

impl Finished {
    /// True when the program exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.ending == CommandEnd::Exited && self.status.success()
    }
}

/// Why a process did not run.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The sandbox refused: unavailable on this host, or no user to run as.
    #[error("{0}")]
    Refused(String),
    /// The program (or the sandbox's launcher) could not be started; the
    /// message says why (not found, not executable, ...).
    #[error("{message}")]
    Failed { message: String, not_found: bool },
    /// The launcher killed everything because the call's fence fell: no
    /// answer came in time that its run is still active. `output`: what the
    /// program printed until then.
    #[error("{message}")]
    Fenced { message: String, output: String },
    /// The launcher killed everything because the processes wrote more than
    /// their limit.
    #[error("{message}")]
    WroteTooMuch { message: String, output: String },
    /// The launcher killed everything because the run's processes held more
    /// memory than their limit (no memory cgroup on the host).
    #[error("{message}")]
    OverMemory { message: String, output: String },
}

/// `message`, then what the program printed before it was stopped.
fn with_output(message: String, output: &str) -> String {
    if output.trim().is_empty() {
        return message;
    }
    format!("{message}\noutput so far:\n{output}")
}

impl StartError {
    /// The tool's error: a refusal or a start failure is a failed
    /// precondition; `missing` says what to do when the program is not there.
    pub fn into_tool_error(self, missing: &str) -> crate::error::ToolError {
        use crate::error::ToolError;
        match self {
            Self::Refused(message) => ToolError::FailedPrecondition(message),
            Self::Failed {
                not_found: true, ..
            } => ToolError::FailedPrecondition(missing.to_owned()),
            Self::Failed { message, .. } => ToolError::FailedPrecondition(message),
            Self::OverMemory { message, output } => ToolError::OverLimit(with_output(
                format!(
                    "{message}; the call was stopped and its processes killed (the operator sets the limit: --sandbox-max-memory-mib)"
                ),
                &output,
            )),
            Self::WroteTooMuch { message, output } => ToolError::OverLimit(with_output(
                format!(
                    "{message}; the call was stopped and its processes killed: what a run writes to files is limited over all its calls (the operator sets the limit: --sandbox-max-written-mib)"
                ),
                &output,
            )),
            Self::Fenced { message, output } => ToolError::Aborted(with_output(
                format!(
                    "{message}; the call was stopped and its processes killed (the run ended, or its orchestrator could not be reached)"
                ),
                &output,
            )),
        }
    }
}

impl From<SandboxError> for StartError {
    fn from(e: SandboxError) -> Self {
        match e {
            SandboxError::Unavailable(m) | SandboxError::Identity(m) => Self::Refused(m),
            SandboxError::Spawn(e) => Self::Failed {
                not_found: e.kind() == io::ErrorKind::NotFound,
                message: e.to_string(),
            },
        }
    }
}

/// Runs `spec` to the end as described in the module documentation. A non-zero
/// exit is a result; the errors are the sandbox's refusal and a program that
/// could not start.
pub async fn run(
    processes: &Sandbox,
    spec: &ProcessSpec,
    limits: RunLimits,
    cancel: &CancellationToken,
) -> Result<Finished, StartError> {
    let mut child = processes.spawn(spec)?;
    let stop_reading = CancellationToken::new();
    let _stop_reading_on_drop = stop_reading.clone().drop_guard();
    let stdout = spawn_reader(child.take_stdout(), limits, &stop_reading);
    let stderr = spawn_reader(child.take_stderr(), limits, &stop_reading);

    let deadline = Instant::now() + limits.timeout;
    let ending = tokio::select! {
        biased;
        _ = child.wait() => CommandEnd::Exited,
        () = cancel.cancelled() => CommandEnd::Cancelled,
        () = sleep_until(deadline) => CommandEnd::TimedOut,
    };
    let status = match ending {
        CommandEnd::Exited => {
            child.clean_up().await;
            child.wait().await
        }
        CommandEnd::TimedOut | CommandEnd::Cancelled => child.kill_all().await,
    }
    .map_err(|e| StartError::Failed {
        message: format!("cannot wait for the process: {e}"),
        not_found: false,
    })?;
    let (stdout, stderr) = collect(stdout, stderr, &stop_reading).await;
    if ending == CommandEnd::Exited
        && let Some(message) = child.launch_failure(status, &stderr.text())
    {
        // What it printed before the launcher stopped it (the launcher's
        // own message, last on stderr, is `message`).
        let output = || {
            let mut printed = stdout.text();
            let own = chorus_sandbox::policy::MESSAGE_PREFIX;
            for line in stderr.text().lines().filter(|l| !l.starts_with(own)) {
                printed.push_str(line);
                printed.push('\n');
            }
            printed
        };
        match status.code() {
            Some(chorus_sandbox::policy::EXIT_FENCED) => {
                return Err(StartError::Fenced {
                    output: output(),
                    message,
                });
            }
            Some(chorus_sandbox::policy::EXIT_WROTE_TOO_MUCH) => {
                return Err(StartError::WroteTooMuch {
                    output: output(),
                    message,
                });
            }
            Some(chorus_sandbox::policy::EXIT_OVER_MEMORY) => {
                return Err(StartError::OverMemory {
                    output: output(),
                    message,
                });
            }
            _ => {}
        }
        return Err(StartError::Failed {
            not_found: status.code() == Some(chorus_sandbox::policy::EXIT_NOT_FOUND),
            message,
        });
    }
    Ok(Finished {
        ending,
        status,
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

/// Waits for both readers; stops them [`PIPE_GRACE`] after the program ended if
/// an escaped process still holds a pipe.
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
            warn!("a process outside the tool call still holds its output pipes; output after this point is dropped");
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
