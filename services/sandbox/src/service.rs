//! How a service runs a process in the sandbox.
//!
//! At start a service makes a [`Sandbox`]: it finds the launcher and runs its
//! self-check once (every confinement step, for real), so it knows — and says,
//! in its log and its status RPC — whether the sandbox is enforced, turned off by
//! the operator, or unavailable (a mechanism is missing). An unavailable
//! sandbox refuses to start anything: never silently unconfined.
//!
//! [`Sandbox::spawn`] starts one process as a [`ProcessSpec`] says, through the
//! launcher, and returns a [`SandboxedChild`], which knows how to stop it and
//! everything it started.
//!
//! With the sandbox off (`--sandbox off`), the program runs directly as the
//! service's user, with the same environment allow-list, in a process group of
//! its own that is killed when it ends; a process that leaves the group
//! (setsid, a daemon) escapes that.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::{Instant, sleep, timeout};
use tracing::{error, info, warn};

use crate::launcher::cgroup;
use crate::policy::{
    Cgroups, Cover, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_SETUP_FAILED, Identity, Limits,
    MESSAGE_PREFIX, Network, PROBE_PROGRAM, Policy,
};

/// The launcher's file name, looked for next to the service's executable and
/// on PATH.
pub const LAUNCHER: &str = "chorus-sandbox";
/// The user a root service's self-check runs as.
const PROBE_USER: u32 = 65_534;
/// How long a stopped sandbox may take to go after SIGUSR1 before its
/// launcher is killed outright.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Whether processes agents cause are sandboxed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Sandboxed; refused where the host lacks a mechanism.
    #[default]
    On,
    /// Run unconfined, as the operator asked.
    Off,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            other => Err(format!("sandbox mode '{other}' is neither on nor off")),
        }
    }
}

/// How a service sandboxes processes.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    pub mode: Mode,
    /// The launcher (default: next to the service's executable, else on PATH).
    pub launcher: Option<PathBuf>,
    /// For a root service: the user and group to run as in a workspace whose
    /// root is owned by root (otherwise the owner of the workspace root).
    pub user: Option<(u32, u32)>,
    pub limits: Limits,
    /// A delegated cgroup v2 directory for per-sandbox cgroups (otherwise
    /// detected).
    pub cgroup_parent: Option<PathBuf>,
}

/// What the sandbox is on this host, as the status RPC shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxStatus {
    /// `enforced`, `off` (the operator turned it off: processes run
    /// unconfined) or `unavailable` (a mechanism is missing: bash, git and
    /// CLI agents are refused).
    pub state: &'static str,
    /// The launcher's path, when found.
    pub launcher: String,
    /// Landlock as the self-check found it.
    pub landlock: String,
    /// Who processes run as.
    pub identity: String,
    /// How processes and memory are limited.
    pub limits: String,
    /// What is missing, when unavailable; why, when off.
    pub problems: Vec<String>,
}

/// Why a process could not be started in the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox cannot be enforced on this host.
    #[error("{0}")]
    Unavailable(String),
    /// No user to run as for this workspace.
    #[error("{0}")]
    Identity(String),
    /// The launcher (or, with the sandbox off, the program) could not start.
    #[error("{0}")]
    Spawn(io::Error),
}

/// One process to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    pub read_write: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    pub network: Network,
    pub identity: Identity,
    /// Cap each process's address space when no memory cgroup exists (not for
    /// JavaScript runtimes, which reserve large ranges).
    pub address_space_limit: bool,
    /// Files shown with other content (only in an enforced sandbox: with the
    /// sandbox off nothing can be covered, and a caller that needs a cover
    /// must not run the process).
    pub covers: Vec<Cover>,
}

/// The sandbox of a service (cheap to clone).
#[derive(Debug, Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SandboxConfig,
    status: SandboxStatus,
    launcher: Option<PathBuf>,
    cgroups: Option<Cgroups>,
    service_is_root: bool,
}

impl Sandbox {
    /// Finds the launcher and runs its self-check (sandbox on), and logs what
    /// the sandbox is.
    pub async fn start(config: SandboxConfig) -> Self {
        let service_is_root = nix::unistd::geteuid().is_root();
        let launcher = config.launcher.clone().or_else(find_launcher);
        let cgroups = cgroup::detect(config.cgroup_parent.as_deref());
        let identity = if service_is_root {
            "the owner of the workspace root (never root)".to_owned()
        } else {
            format!(
                "the service's user (uid {}), in a user namespace",
                nix::unistd::geteuid()
            )
        };
        let limits = match &cgroups {
            Some(Cgroups::V2 { parent }) => format!("cgroup v2 under {}", parent.display()),
            Some(Cgroups::V1 { pids, memory }) => format!(
                "cgroup v1 ({}), rlimits for the rest",
                [
                    pids.as_ref().map(|_| "pids"),
                    memory.as_ref().map(|_| "memory")
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            ),
            None => "rlimits only (no writable cgroup)".to_owned(),
        };
        let mut status = SandboxStatus {
            state: "enforced",
            launcher: launcher
                .as_ref()
                .map(|l| l.display().to_string())
                .unwrap_or_default(),
            landlock: String::new(),
            identity,
            limits,
            problems: Vec::new(),
        };
        if let Some(plan) = &cgroups {
            cgroup::remove_leftovers(plan);
        }
        match (config.mode, &launcher) {
            (Mode::Off, _) => {
                status.state = "off";
                status.landlock = "not used".to_owned();
                status.problems.push(
                    "the operator turned the sandbox off (--sandbox off): bash, git and CLI agents run unconfined as the service's user".to_owned(),
                );
                warn!(
                    "the sandbox is off: bash, git and CLI agents run unconfined as the service's user, and processes that leave their group can outlive their run"
                );
            }
            (Mode::On, None) => {
                status.state = "unavailable";
                status.problems.push(format!(
                    "the sandbox launcher {LAUNCHER} was not found next to this program or on PATH; build it (cargo build --release -p chorus-sandbox) or pass --sandbox-launcher"
                ));
            }
            (Mode::On, Some(path)) => {
                match self_check(path, cgroups.as_ref(), service_is_root).await {
                    Ok(report) => {
                        status.landlock = format!(
                            "{} ({})",
                            report["landlock"].as_str().unwrap_or("?"),
                            report["landlock_abi"].as_str().unwrap_or("?")
                        );
                    }
                    Err(problem) => {
                        status.state = "unavailable";
                        status.problems.push(problem);
                    }
                }
            }
        }
        if status.state == "unavailable" {
            error!(problems = ?status.problems, "the sandbox is unavailable: bash, git and CLI agents are refused until it is fixed, or until the service runs with --sandbox off");
        } else if status.state == "enforced" {
            info!(launcher = %status.launcher, landlock = %status.landlock, limits = %status.limits, "sandbox enforced");
        }
        Self {
            inner: Arc::new(Inner {
                config,
                status,
                launcher,
                cgroups,
                service_is_root,
            }),
        }
    }

    /// A sandbox that starts nothing, saying `reason` (for a service that is
    /// never to run processes, and for tests of everything else).
    pub fn refusing(reason: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                config: SandboxConfig::default(),
                status: SandboxStatus {
                    state: "unavailable",
                    launcher: String::new(),
                    landlock: String::new(),
                    identity: String::new(),
                    limits: String::new(),
                    problems: vec![reason.to_owned()],
                },
                launcher: None,
                cgroups: None,
                service_is_root: nix::unistd::geteuid().is_root(),
            }),
        }
    }

    pub fn status(&self) -> &SandboxStatus {
        &self.inner.status
    }

    /// Whether processes run confined.
    pub fn enforced(&self) -> bool {
        self.inner.status.state == "enforced"
    }

    /// The program a proxied sandbox's git and ssh use to reach the egress
    /// proxy (`GIT_PROXY_COMMAND`; `connect %h %p` as ssh's ProxyCommand):
    /// the launcher, which must then be among the spec's read-only paths.
    /// None unless the sandbox is enforced.
    pub fn connect_helper(&self) -> Option<&Path> {
        self.inner.launcher.as_deref().filter(|_| self.enforced())
    }

    /// The user processes of a run in the workspace at `root` run as: the
    /// service's own when it is not root; else the owner of `root`, or the
    /// configured user when root owns it.
    ///
    /// # Errors
    /// A root service, a root-owned workspace and no configured user.
    pub fn identity_for(&self, root: &Path) -> Result<Identity, SandboxError> {
        if !self.inner.service_is_root || self.inner.config.mode == Mode::Off {
            return Ok(Identity::Service);
        }
        let meta = std::fs::metadata(root).map_err(|e| {
            SandboxError::Identity(format!(
                "cannot read the owner of the workspace root {}: {e}",
                root.display()
            ))
        })?;
        if meta.uid() != 0 {
            // A file's group may be root's while its owner is not: never gid 0.
            let gid = if meta.gid() == 0 {
                PROBE_USER
            } else {
                meta.gid()
            };
            return Ok(Identity::User {
                uid: meta.uid(),
                gid,
            });
        }
        match self.inner.config.user {
            Some((uid, gid)) => Ok(Identity::User { uid, gid }),
            None => Err(SandboxError::Identity(format!(
                "the workspace root {} is owned by root, and agents never run as root: chown it to the user agents should act as (chown -R <uid>:<gid> {}), or start the service with --sandbox-user <uid>:<gid>",
                root.display(),
                root.display()
            ))),
        }
    }

    /// Starts `spec` (sandboxed unless the sandbox is off) with stdin closed,
    /// stdout and stderr piped, as the leader of a new process group.
    ///
    /// # Errors
    /// The sandbox is unavailable, or the process could not be started.
    pub fn spawn(&self, spec: &ProcessSpec) -> Result<SandboxedChild, SandboxError> {
        let enforced = match self.inner.status.state {
            "enforced" => true,
            "off" => false,
            _ => {
                return Err(SandboxError::Unavailable(format!(
                    "the sandbox is unavailable on this host ({}), so no process is started; fix that, or run the service with --sandbox off to run processes unconfined",
                    self.inner.status.problems.join("; ")
                )));
            }
        };
        if !enforced && !spec.covers.is_empty() {
            return Err(SandboxError::Unavailable(
                "the process needs files shown with other content, which only an enforced sandbox can do; it is not started with the sandbox off".to_owned(),
            ));
        }
        let mut cmd = if enforced {
            let launcher = self.inner.launcher.as_ref().ok_or_else(|| {
                SandboxError::Unavailable("the sandbox launcher was not found".to_owned())
            })?;
            let policy = Policy {
                parent: Some(std::process::id().cast_signed()),
                cwd: spec.cwd.clone(),
                read_write: spec.read_write.clone(),
                read_only: spec.read_only.clone(),
                network: spec.network.clone(),
                identity: spec.identity,
                limits: Limits {
                    address_space: spec.address_space_limit,
                    ..self.inner.config.limits
                },
                cgroups: self.inner.cgroups.clone(),
                covers: spec.covers.clone(),
            };
            let policy = serde_json::to_string(&policy).map_err(|e| {
                SandboxError::Spawn(io::Error::other(format!("cannot write the policy: {e}")))
            })?;
            let mut cmd = Command::new(launcher);
            cmd.arg("--policy")
                .arg(policy)
                .arg("--")
                .arg(&spec.program)
                .args(&spec.args)
                .current_dir("/");
            cmd
        } else {
            let mut cmd = Command::new(&spec.program);
            cmd.args(&spec.args).current_dir(&spec.cwd);
            die_with_service(&mut cmd);
            cmd
        };
        cmd.env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(SandboxError::Spawn)?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| SandboxError::Spawn(io::Error::other("the process has no pid")))?;
        Ok(SandboxedChild {
            child,
            pid,
            enforced,
            finished: false,
        })
    }
}

/// With the sandbox off: the kernel kills the program when the service dies
/// (its parent-death signal; the launcher arms its own when the sandbox is on).
fn die_with_service(cmd: &mut Command) {
    let service = nix::unistd::getpid();
    // SAFETY: the closure runs in the child between fork and exec; it makes two
    // async-signal-safe system calls (prctl, getppid) and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            if nix::unistd::getppid() != service {
                return Err(io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
}

/// The launcher next to this executable, else on PATH.
fn find_launcher() -> Option<PathBuf> {
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(LAUNCHER)))
        .filter(|p| p.is_file());
    sibling.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(LAUNCHER))
            .find(|p| p.is_file())
    })
}

/// Runs the launcher's self-check: every confinement step, then the report of
/// what was applied.
async fn self_check(
    launcher: &Path,
    cgroups: Option<&Cgroups>,
    service_is_root: bool,
) -> Result<serde_json::Value, String> {
    let policy = Policy {
        parent: Some(std::process::id().cast_signed()),
        cwd: "/".into(),
        read_write: Vec::new(),
        read_only: Vec::new(),
        network: Network::None,
        identity: if service_is_root {
            Identity::User {
                uid: PROBE_USER,
                gid: PROBE_USER,
            }
        } else {
            Identity::Service
        },
        limits: Limits::default(),
        cgroups: cgroups.cloned(),
        covers: Vec::new(),
    };
    let policy = serde_json::to_string(&policy).map_err(|e| e.to_string())?;
    let run = Command::new(launcher)
        .arg("--policy")
        .arg(policy)
        .arg("--")
        .arg(PROBE_PROGRAM)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = timeout(Duration::from_secs(20), run)
        .await
        .map_err(|_| "the sandbox self-check did not finish in 20 s".to_owned())?
        .map_err(|e| {
            format!(
                "cannot run the sandbox launcher {}: {e}",
                launcher.display()
            )
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "the sandbox self-check failed ({}): {}",
            out.status,
            stderr.trim()
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim())
        .map_err(|e| format!("the sandbox self-check said something unexpected ({e}): {stdout}"))
}

/// A process started by [`Sandbox::spawn`]. In an enforced sandbox the child is
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
            || ![EXIT_SETUP_FAILED, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND].contains(&code)
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
    fn modes_parse_from_the_command_line() {
        assert_eq!("on".parse::<Mode>(), Ok(Mode::On));
        assert_eq!("off".parse::<Mode>(), Ok(Mode::Off));
        assert!("maybe".parse::<Mode>().is_err());
    }

    #[test]
    fn stat_lines_give_state_and_group() {
        assert_eq!(parse_stat(b"12 (a b) c) S 1 12 12 0"), Some((b'S', 12)));
        assert_eq!(parse_stat(b"garbage"), None);
    }
}
