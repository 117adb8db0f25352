//! One CLI agent process, in the run sandbox: stdout read line by line as it
//! comes (each line capped), the end of stderr kept for the failure message. It
//! ends when the CLI exits — its sandbox, and every process it started, goes
//! with it whatever those hold — when the deadline passes or when the stop
//! token fires; in every case every process of the run is dead before this
//! returns.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use chorus_sandbox::{Identity, Network, ProcessSpec, Sandbox, SandboxError};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

use super::RunClock;

/// Longest stdout line handed on; the rest of a longer line is dropped.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// How much of the end of stderr (and of stdout, for messages) is kept.
const TAIL_BYTES: usize = 16 * 1024;
/// Lines of output quoted in a failure message.
const TAIL_LINES: usize = 20;
/// How long output is still read after the CLI ended (an escaped process can
/// hold the pipes only with the sandbox off).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// What to run: the program, its arguments, its whole environment, where, and
/// what its sandbox shows.
#[derive(Debug, Clone)]
pub struct CliCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The run's directory: the only place the CLI may write.
    pub run_dir: PathBuf,
    /// What it may read besides the system directories.
    pub read_only: Vec<PathBuf>,
    pub network: Network,
    pub identity: Identity,
    /// The run: its CLI and its tool calls share the run's limits.
    pub run: String,
    /// The replica's fence: the CLI is killed by its launcher once the
    /// replica can no longer prove it holds its runs.
    pub fence: Option<PathBuf>,
}

impl CliCommand {
    fn spec(&self) -> ProcessSpec {
        ProcessSpec {
            program: self.program.clone().into(),
            args: self.args.iter().map(Into::into).collect(),
            env: self.env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            cwd: self.cwd.clone(),
            read_write: vec![self.run_dir.clone()],
            read_only: self.read_only.clone(),
            network: self.network.clone(),
            identity: self.identity,
            // JavaScript runtimes reserve large address ranges up front.
            address_space_limit: false,
            covers: Vec::new(),
            run: Some(self.run.clone()),
            fence: self.fence.clone(),
            network_questions: None,
        }
    }
}

/// How the process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliEnd {
    Exited(i32),
    Signaled(i32),
    TimedOut(Duration),
    Stopped,
    /// Its launcher killed everything because the replica's fence fell (or
    /// would not start it behind a fallen fence): the replica could not
    /// prove it still holds the run. Why, in the launcher's words.
    Fenced(String),
}

/// The end of a CLI process.
#[derive(Debug)]
pub struct CliExit {
    pub ending: CliEnd,
    /// The last lines of stderr, or of stdout when stderr was empty.
    pub tail: Vec<String>,
}

impl CliExit {
    /// "exited with code 2", "killed by signal 9 (SIGKILL)", "timed out after 600 s",
    /// each followed by the last lines of output.
    pub fn describe(&self, program: &str) -> String {
        let what = match &self.ending {
            CliEnd::Exited(code) => format!("{program} exited with code {code}"),
            CliEnd::Signaled(signal) => format!(
                "{program} was killed by signal {signal} ({})",
                signal_name(*signal)
            ),
            CliEnd::TimedOut(after) => format!("timed out after {} s", after.as_secs()),
            CliEnd::Stopped => "stopped".to_owned(),
            CliEnd::Fenced(why) => format!("{program} was stopped: {why}"),
        };
        if self.tail.is_empty() {
            what
        } else {
            format!("{what}; last output:\n{}", self.tail.join("\n"))
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(signal).map_or("unknown signal", |s| s.as_str())
}

/// Runs `command` in `processes`, calling `on_line` with each stdout line
/// (without its newline), until it exits, `clock` runs out (`run_timeout` is
/// what the message says) or `stop` fires; then SIGTERM, `kill_grace`, and
/// every process of the run killed. Every process of the run is dead when this
/// returns.
///
/// # Errors
/// The process could not be started (the message names the program and why).
pub async fn run_cli(
    processes: &Sandbox,
    command: &CliCommand,
    clock: &RunClock,
    run_timeout: Duration,
    kill_grace: Duration,
    stop: &CancellationToken,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<CliExit, String> {
    let program = command.program.display().to_string();
    let mut child = processes.spawn(&command.spec()).map_err(|e| match e {
        SandboxError::Spawn(e) => format!("cannot start {program}: {e}"),
        refused => refused.to_string(),
    })?;
    let stderr_task = tokio::spawn(read_tail(child.take_stderr()));
    let mut stdout_tail = Tail::default();
    let mut lines = LineReader::new(child.take_stdout());
    let mut take = |line: String, tail: &mut Tail| {
        tail.push(line.as_bytes());
        tail.push(b"\n");
        on_line(&line);
    };

    // Read stdout while watching the CLI, the clock and the stop token.
    let mut stdout_open = true;
    let mut ending: Option<CliEnd> = None;
    let exited = loop {
        tokio::select! {
            line = lines.next_line(), if stdout_open => match line {
                Some(line) => take(line, &mut stdout_tail),
                None => stdout_open = false,
            },
            status = child.wait() => break Some(status),
            () = clock.expired() => {
                ending = Some(CliEnd::TimedOut(run_timeout));
                break None;
            }
            () = stop.cancelled() => {
                ending = Some(CliEnd::Stopped);
                break None;
            }
        }
    };
    let status: Option<ExitStatus> = match exited {
        Some(status) => {
            child.clean_up().await;
            Some(status.map_err(|e| format!("cannot wait for {program}: {e}"))?)
        }
        None => child.stop(kill_grace).await.ok(),
    };
    // What is left in the pipe (its writers are all dead, but with the sandbox
    // off: bounded).
    if ending.is_none() {
        let _ = timeout(PIPE_GRACE, async {
            while let Some(line) = lines.next_line().await {
                take(line, &mut stdout_tail);
            }
        })
        .await;
    }
    let stderr_tail = match timeout(PIPE_GRACE, stderr_task).await {
        Ok(Ok(tail)) => tail,
        _ => Tail::default(),
    };
    if ending.is_none()
        && let Some(status) = status
        && let Some(reason) = child.launch_failure(status, &stderr_tail.text())
    {
        if status.code() == Some(chorus_sandbox::policy::EXIT_FENCED) {
            return Ok(CliExit {
                ending: CliEnd::Fenced(reason),
                tail: Vec::new(),
            });
        }
        let shown = format!("cannot execute '{program}': ");
        let reason = reason.strip_prefix(&shown).unwrap_or(&reason);
        return Err(format!("cannot start {program}: {reason}"));
    }
    let ending = ending.unwrap_or_else(|| exit_of(status));
    let tail = if stderr_tail.is_empty() {
        stdout_tail.last_lines(TAIL_LINES)
    } else {
        stderr_tail.last_lines(TAIL_LINES)
    };
    Ok(CliExit { ending, tail })
}

/// How a CLI that ended by itself ended, by its status.
fn exit_of(status: Option<ExitStatus>) -> CliEnd {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => CliEnd::Exited(code),
            (None, Some(signal)) => CliEnd::Signaled(signal),
            (None, None) => CliEnd::Exited(-1),
        },
        None => CliEnd::Exited(-1),
    }
}

/// The last [`TAIL_BYTES`] of a stream.
#[derive(Debug, Default)]
struct Tail(VecDeque<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend(bytes);
        let excess = self.0.len().saturating_sub(TAIL_BYTES);
        self.0.drain(..excess);
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(u8::is_ascii_whitespace)
    }

    fn text(&self) -> String {
        let bytes: Vec<u8> = self.0.iter().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn last_lines(&self, n: usize) -> Vec<String> {
        let bytes: Vec<u8> = self.0.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| (*l).to_owned())
            .collect()
    }
}

async fn read_tail(stream: Option<impl AsyncRead + Unpin>) -> Tail {
    let mut tail = Tail::default();
    let Some(mut stream) = stream else {
        return tail;
    };
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.push(&buf[..n]);
    }
    tail
}

/// Splits a stream into lines of at most [`MAX_LINE_BYTES`].
struct LineReader<R> {
    stream: Option<R>,
    buf: Vec<u8>,
    /// The current line is over the cap: drop bytes until its newline.
    skipping: bool,
    chunk: Vec<u8>,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(stream: Option<R>) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            skipping: false,
            chunk: vec![0u8; 64 * 1024],
        }
    }

    /// The next line, or None at end of stream. Cancel-safe: bytes already read
    /// stay in the buffer.
    async fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let rest = self.buf.split_off(pos + 1);
                let mut line = std::mem::replace(&mut self.buf, rest);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if std::mem::take(&mut self.skipping) || line.len() > MAX_LINE_BYTES {
                    continue;
                }
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            if self.buf.len() > MAX_LINE_BYTES {
                self.buf.clear();
                self.skipping = true;
            }
            let stream = self.stream.as_mut()?;
            match stream.read(&mut self.chunk).await {
                Ok(0) | Err(_) => {
                    self.stream = None;
                    if self.buf.is_empty() || self.skipping {
                        return None;
                    }
                    let line = std::mem::take(&mut self.buf);
                    return Some(String::from_utf8_lossy(&line).into_owned());
                }
                Ok(n) => self.buf.extend_from_slice(&self.chunk[..n]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> CliCommand {
        CliCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".to_owned(), script.to_owned()],
            env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            cwd: std::env::temp_dir(),
            run_dir: std::env::temp_dir(),
            read_only: Vec::new(),
            network: Network::None,
            identity: Identity::Service,
            run: "run-test".to_owned(),
            fence: None,
        }
    }

    /// Reading, deadlines and messages, with the sandbox off (tests/ run CLIs
    /// sandboxed).
    async fn off() -> Sandbox {
        Sandbox::start(chorus_sandbox::SandboxConfig {
            mode: chorus_sandbox::Mode::Off,
            ..chorus_sandbox::SandboxConfig::default()
        })
        .await
    }

    async fn run(script: &str, timeout_after: Duration) -> (CliExit, Vec<String>) {
        let mut lines = Vec::new();
        let exit = run_cli(
            &off().await,
            &sh(script),
            &RunClock::start(timeout_after),
            timeout_after,
            Duration::from_millis(200),
            &CancellationToken::new(),
            &mut |line: &str| lines.push(line.to_owned()),
        )
        .await
        .expect("started");
        (exit, lines)
    }

    #[tokio::test]
    async fn lines_arrive_in_order_and_the_exit_code_is_kept() {
        let (exit, lines) = run(
            "echo one; printf 'two\\r\\nthree'; echo oops >&2; exit 3",
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(lines, ["one", "two", "three"]);
        assert_eq!(exit.ending, CliEnd::Exited(3));
        assert_eq!(exit.tail, ["oops"]);
        assert_eq!(
            exit.describe("claude"),
            "claude exited with code 3; last output:\noops"
        );
    }

    #[tokio::test]
    async fn a_timeout_kills_the_group_and_says_so() {
        let (exit, lines) = run(
            "trap '' TERM; echo started; sleep 300 & wait",
            Duration::from_millis(300),
        )
        .await;
        assert_eq!(lines, ["started"]);
        assert_eq!(exit.ending, CliEnd::TimedOut(Duration::from_millis(300)));
        assert!(exit.describe("x").starts_with("timed out after 0 s"));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_clear_error() {
        let mut command = sh("true");
        command.program = "/no/such/cli".into();
        let err = run_cli(
            &off().await,
            &command,
            &RunClock::start(Duration::from_secs(5)),
            Duration::from_secs(5),
            Duration::from_millis(10),
            &CancellationToken::new(),
            &mut |_: &str| {},
        )
        .await
        .expect_err("no such program");
        assert!(err.starts_with("cannot start /no/such/cli:"), "{err}");
    }

    #[tokio::test]
    async fn an_overlong_line_is_dropped_and_reading_goes_on() {
        let script = format!(
            "head -c {} /dev/zero | tr '\\0' x; echo; echo after",
            MAX_LINE_BYTES + 10
        );
        let (exit, lines) = run(&script, Duration::from_secs(30)).await;
        assert_eq!(exit.ending, CliEnd::Exited(0));
        assert_eq!(lines, ["after"]);
    }
}
