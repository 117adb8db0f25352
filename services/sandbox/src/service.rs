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

mod child;

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::Serialize;
use tokio::process::Command;
use tokio::time::timeout;
use tracing::{error, info, warn};

pub use self::child::SandboxedChild;
use crate::launcher::cgroup;
use crate::policy::{Cgroups, Cover, Identity, Limits, Network, PROBE_PROGRAM, Policy, Tier};
use crate::questions::NetworkQuestions;
use std::os::fd::AsRawFd as _;

/// The launcher's file name, looked for next to the service's executable and
/// on PATH.
pub const LAUNCHER: &str = "chorus-sandbox";
/// The user a root service's self-check runs as.
const PROBE_USER: u32 = 65_534;

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
    /// The one tier to use; None: the namespace tier where it can start,
    /// else the landlock tier.
    pub tier: Option<Tier>,
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
    /// The seccomp filter as the self-check found it (e.g. `filter (3
    /// programs)`).
    pub seccomp: String,
    /// Who processes run as.
    pub identity: String,
    /// How processes and memory are limited.
    pub limits: String,
    /// What is missing, when unavailable; why, when off.
    pub problems: Vec<String>,
    /// How the sandbox is built, when enforced: `namespaces` or `landlock`.
    pub tier: &'static str,
    /// Why this tier: what the namespace tier lacked, when the landlock tier
    /// stands in for it.
    pub tier_reason: String,
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
    /// The run the process belongs to: the processes, memory and CPU weight
    /// limits bound all of the run's sandboxes on this host together (its
    /// CLI and every tool call). Letters, digits, '-' and '_' only.
    pub run: Option<String>,
    /// The run's fence file (see [`crate::fence`]): the process and all it
    /// started are killed by the launcher once its time has passed. None:
    /// no fence.
    pub fence: Option<PathBuf>,
    /// With a proxied network in an enforced sandbox: asked before each
    /// connection the egress list allows (see [`crate::questions`]).
    pub network_questions: Option<NetworkQuestions>,
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
    tier: Tier,
    /// Runs' ledgers of written bytes.
    ledgers: crate::ledger::Ledgers,
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
            format!("the service's user (uid {})", nix::unistd::geteuid())
        };
        let limits = limits_text(cgroups.as_ref());
        let mut status = SandboxStatus {
            state: "enforced",
            launcher: launcher
                .as_ref()
                .map(|l| l.display().to_string())
                .unwrap_or_default(),
            landlock: String::new(),
            seccomp: String::new(),
            identity,
            limits,
            problems: Vec::new(),
            tier: "",
            tier_reason: String::new(),
        };
        let mut tier = Tier::Namespaces;
        if let Some(plan) = &cgroups {
            cgroup::remove_leftovers(plan);
        }
        match (config.mode, &launcher) {
            (Mode::Off, _) => {
                status.state = "off";
                status.landlock = "not used".to_owned();
                status.seccomp = "not used".to_owned();
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
                tier = choose_tier(
                    path,
                    cgroups.as_ref(),
                    service_is_root,
                    config.tier,
                    &mut status,
                )
                .await;
            }
        }
        log_status(&status);
        Self {
            inner: Arc::new(Inner {
                config,
                status,
                launcher,
                cgroups,
                service_is_root,
                tier,
                ledgers: crate::ledger::Ledgers::open(),
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
                    seccomp: String::new(),
                    identity: String::new(),
                    limits: String::new(),
                    problems: vec![reason.to_owned()],
                    tier: "",
                    tier_reason: String::new(),
                },
                launcher: None,
                cgroups: None,
                service_is_root: nix::unistd::geteuid().is_root(),
                tier: Tier::Namespaces,
                // Never written: this sandbox starts nothing.
                ledgers: crate::ledger::Ledgers::at(&std::env::temp_dir()),
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

    /// Whether a process can be shown files with other content
    /// ([`ProcessSpec::covers`]): only the namespace tier can.
    pub fn can_cover(&self) -> bool {
        self.enforced() && self.inner.tier == Tier::Namespaces
    }

    /// The tier processes start in, when enforced.
    pub fn tier(&self) -> Option<Tier> {
        self.enforced().then_some(self.inner.tier)
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
        if !spec.covers.is_empty() && !self.can_cover() {
            return Err(SandboxError::Unavailable(
                "the process needs files shown with other content, which only the namespace tier of the sandbox can do; it is not started".to_owned(),
            ));
        }
        // The channel of questions: ours is answered here, theirs is
        // inherited by the launcher (for its proxy alone).
        let questions = match (&spec.network_questions, &spec.network) {
            (Some(asked), Network::Proxied { .. }) if enforced => {
                let (ours, theirs) =
                    std::os::unix::net::UnixStream::pair().map_err(SandboxError::Spawn)?;
                Some((asked.clone(), ours, std::os::fd::OwnedFd::from(theirs)))
            }
            _ => None,
        };
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
                run: spec.run.clone(),
                fence: spec.fence.clone(),
                ledger: spec.run.as_deref().map(|run| self.inner.ledgers.of(run)),
                tier: self.inner.tier,
                gate_signals: false,
                questions_fd: questions.as_ref().map(|(_, _, theirs)| theirs.as_raw_fd()),
            };
            let policy = serde_json::to_string(&policy).map_err(|e| {
                SandboxError::Spawn(io::Error::other(format!("cannot write the policy: {e}")))
            })?;
            let mut cmd = Command::new(launcher);
            if let Some((_, _, theirs)) = &questions {
                inherit(&mut cmd, theirs.as_raw_fd());
            }
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
        if let Some((asked, ours, theirs)) = questions {
            drop(theirs);
            ours.set_nonblocking(true).map_err(SandboxError::Spawn)?;
            let ours = tokio::net::UnixStream::from_std(ours).map_err(SandboxError::Spawn)?;
            // Ends when the launcher's proxy, the channel's last holder, does.
            tokio::spawn(asked.answer(ours));
        }
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| SandboxError::Spawn(io::Error::other("the process has no pid")))?;
        Ok(SandboxedChild::new(child, pid, enforced))
    }
}

/// The launcher inherits descriptor `fd` (which, like every descriptor of
/// the service, closes on exec).
fn inherit(cmd: &mut Command, fd: std::os::fd::RawFd) {
    // SAFETY: the closure runs in the child between fork and exec; it makes
    // one async-signal-safe system call (fcntl) and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )
            .map(drop)
            .map_err(io::Error::from)
        });
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

/// What a tier's self-check applied.
struct Checked {
    landlock: String,
    seccomp: String,
}

/// Runs the launcher's self-check in `tier`: every confinement step, then
/// the report of what was applied (which must include a seccomp filter).
async fn self_check(
    launcher: &Path,
    cgroups: Option<&Cgroups>,
    service_is_root: bool,
    tier: Tier,
) -> Result<Checked, String> {
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
        run: None,
        fence: None,
        ledger: None,
        tier,
        gate_signals: false,
        questions_fd: None,
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
    let report: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("the sandbox self-check said something unexpected ({e}): {stdout}"))?;
    let seccomp = report["seccomp"].as_str().unwrap_or("none");
    if seccomp != "filter" {
        return Err(format!(
            "the sandbox self-check ran without a seccomp filter (seccomp: {seccomp})"
        ));
    }
    Ok(Checked {
        landlock: format!(
            "{} ({})",
            report["landlock"].as_str().unwrap_or("?"),
            report["landlock_abi"].as_str().unwrap_or("?")
        ),
        seccomp: format!(
            "{seccomp} ({} programs)",
            report["seccomp_filters"].as_u64().unwrap_or(0)
        ),
    })
}

/// How to get what a tier's self-check found missing.
fn hint(tier: Tier, problem: &str) -> &'static str {
    match tier {
        Tier::Namespaces if problem.contains("mount proc") || problem.contains("proc:") => {
            " — the container masks /proc; the landlock tier needs no new /proc"
        }
        Tier::Namespaces if problem.contains("namespaces") => {
            " — the container's seccomp profile or the kernel refuses new namespaces; the landlock tier needs none"
        }
        Tier::Landlock if problem.contains("Landlock") => {
            " — the landlock tier needs Landlock: Linux 5.13 or later with landlock among the LSMs the kernel enables (CONFIG_SECURITY_LANDLOCK, lsm=...,landlock on its command line)"
        }
        Tier::Landlock if problem.contains("user notification") => {
            " — the landlock tier needs seccomp user notification with descriptors added (Linux 5.9 or later) and a container runtime that lets the seccomp(2) and ioctl(2) calls through (the default profiles of podman, Docker and containerd do)"
        }
        _ => "",
    }
}

/// How runs' resources are bounded, as the status says it.
/// What limits hold without a writable cgroup, and what that leaves open.
const NO_CGROUP: &str = "no writable cgroup: memory and written bytes per run by the launcher (resident memory and write counts every 100 ms: a burst between two looks passes), processes by RLIMIT_NPROC (which counts every process of the user, the service's too), CPU seconds per process; no CPU weight, no swap limit, no per-run process count";

fn limits_text(cgroups: Option<&Cgroups>) -> String {
    match cgroups {
        Some(Cgroups::V2 { parent }) => {
            format!("cgroup v2 per run under {}", parent.display())
        }
        Some(Cgroups::V1 { pids, memory, cpu }) => format!(
            "cgroup v1 ({}) per run, rlimits for the rest{}; written bytes per run by the launcher",
            [
                pids.as_ref().map(|_| "pids"),
                memory.as_ref().map(|_| "memory"),
                cpu.as_ref().map(|_| "cpu weight"),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", "),
            if memory.is_some() {
                ""
            } else {
                "; memory per run by the launcher (resident memory every 100 ms)"
            }
        ),
        None => NO_CGROUP.to_owned(),
    }
}

/// The tier that starts here: `asked`, else the namespace tier and then the
/// landlock tier, each checked by starting the launcher; what was found goes
/// in `status` (unavailable, with each tier's problem, when none starts).
async fn choose_tier(
    path: &Path,
    cgroups: Option<&Cgroups>,
    service_is_root: bool,
    asked: Option<Tier>,
    status: &mut SandboxStatus,
) -> Tier {
    let mut tier = Tier::Namespaces;
    let tiers = asked.map_or(vec![Tier::Namespaces, Tier::Landlock], |t| vec![t]);
    let mut failed = Vec::new();
    for candidate in tiers {
        match self_check(path, cgroups, service_is_root, candidate).await {
            Ok(checked) => {
                tier = candidate;
                status.tier = candidate.as_str();
                status.landlock = checked.landlock;
                status.seccomp = checked.seccomp;
                break;
            }
            Err(problem) => failed.push((candidate, problem)),
        }
    }
    if status.tier.is_empty() {
        status.state = "unavailable";
        status.problems = failed
            .iter()
            .map(|(tier, problem)| {
                format!(
                    "the {} tier: {problem}{}",
                    tier.as_str(),
                    hint(*tier, problem)
                )
            })
            .collect();
    } else if let Some((_, problem)) = failed.first() {
        status.tier_reason = format!(
            "the namespace tier cannot start here ({problem}); the landlock tier stands in for it (docs/sandbox-tiers.md says what each guarantees)"
        );
    }
    if tier == Tier::Landlock && !service_is_root {
        status.identity = format!(
            "the service's user (uid {}), without namespaces",
            nix::unistd::geteuid()
        );
    } else if !service_is_root {
        status.identity = format!(
            "the service's user (uid {}), in a user namespace",
            nix::unistd::geteuid()
        );
    }
    tier
}

/// Logs what the sandbox is: unavailable (an error), enforced (and by which
/// tier, a warning when the landlock tier stands in).
fn log_status(status: &SandboxStatus) {
    if status.state == "unavailable" {
        error!(problems = ?status.problems, "the sandbox is unavailable: bash, git and CLI agents are refused until it is fixed, or until the service runs with --sandbox off");
    } else if status.state == "enforced" {
        if status.tier_reason.is_empty() {
            info!(tier = status.tier, launcher = %status.launcher, landlock = %status.landlock, seccomp = %status.seccomp, limits = %status.limits, "sandbox enforced");
        } else {
            warn!(tier = status.tier, reason = %status.tier_reason, launcher = %status.launcher, landlock = %status.landlock, seccomp = %status.seccomp, limits = %status.limits, "sandbox enforced by the landlock tier");
        }
    }
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
}
