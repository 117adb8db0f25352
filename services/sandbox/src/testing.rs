//! Helpers for tests that check the sandbox holds (feature `testing`): which
//! user sandboxed test programs run as, the launcher built with the tests,
//! children that try every way out of a run, and finding the ones that made it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::service::{Sandbox, SandboxConfig};

/// The user a root test gives its workspaces to (sandboxed programs run as
/// the workspace's owner, never root).
pub const TEST_UID: u32 = 65_534;

pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Gives `path` and everything below it to [`TEST_UID`] (when the test runs
/// as root; otherwise the test's own user owns it already).
pub fn give_to_test_user(path: &Path) {
    if !running_as_root() {
        return;
    }
    let mut pending = vec![path.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(TEST_UID), Some(TEST_UID))
            .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        }
    }
}

/// Whether `path` belongs to the user sandboxed test programs run as.
pub fn owned_by_test_user(path: &Path) -> bool {
    let uid = std::fs::symlink_metadata(path).expect("metadata").uid();
    uid == if running_as_root() {
        TEST_UID
    } else {
        nix::unistd::geteuid().as_raw()
    }
}

/// The launcher cargo built next to the running test binary
/// (`target/<profile>/chorus-sandbox`; test binaries live in `deps/` below).
pub fn built_launcher() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let launcher = profile.join(crate::service::LAUNCHER);
    assert!(
        launcher.is_file(),
        "{} does not exist: build it with `cargo build -p chorus-sandbox` (cargo test --workspace builds it)",
        launcher.display()
    );
    launcher
}

/// Where a service started now would make per-sandbox cgroups, if anywhere
/// (root, and a writable cgroup hierarchy).
pub fn cgroups() -> Option<crate::Cgroups> {
    crate::launcher::cgroup::detect(None)
}

/// The cgroup directories of `run` (one per hierarchy of `plan`), where its
/// limits are and every sandbox of the run has its own child.
pub fn run_cgroup_dirs(plan: &crate::Cgroups, run: &str) -> Vec<PathBuf> {
    plan.parents()
        .into_iter()
        .map(|parent| parent.join(format!("{}{run}", crate::policy::RUN_CGROUP_PREFIX)))
        .collect()
}

/// An enforced sandbox with the built launcher and `config` otherwise.
pub async fn enforced(config: SandboxConfig) -> Sandbox {
    let sandbox = Sandbox::start(SandboxConfig {
        launcher: Some(built_launcher()),
        ..config
    })
    .await;
    assert_eq!(
        sandbox.status().state,
        "enforced",
        "the sandbox must be enforced for these tests: {:?}",
        sandbox.status()
    );
    sandbox
}

/// A shell snippet starting, in the background, children that try every way
/// out of a run: plain, setsid, double-forked, and setsid with a scrubbed
/// environment, each ignoring SIGTERM and carrying `marker` as its `$0`.
pub fn escapees(marker: &str) -> String {
    let sleeper = "trap '' TERM; while :; do sleep 1; done";
    format!(
        "sh -c \"{sleeper}\" {marker} & \
         setsid sh -c \"{sleeper}\" {marker} & \
         (sh -c \"{sleeper}\" {marker} &) ; \
         env -i setsid sh -c \"{sleeper}\" {marker} & "
    )
}

/// How many processes [`escapees`] starts.
pub const ESCAPEES: usize = 4;

/// A shell snippet that returns once the [`escapees`] of `marker` all run
/// (counting only them: `sh -c <script> <marker>`).
pub fn await_escapees(marker: &str) -> String {
    format!("while [ $(pgrep -fc '^sh -c .* {marker}$') -lt {ESCAPEES} ]; do sleep 0.01; done; ")
}

/// Live (non-zombie) processes of this host with `marker` as an argument.
pub fn survivors(marker: &str) -> Vec<i32> {
    processes_where(|arg| arg == marker.as_bytes())
}

/// Live (non-zombie) processes of this host with an argument containing
/// `text` (a host pid: what a sandboxed process knows is its namespace's).
pub fn processes_with_arg_containing(text: &str) -> Vec<i32> {
    let text = text.as_bytes();
    processes_where(|arg| arg.windows(text.len()).any(|w| w == text))
}

/// Live processes of `program` (its canonical path) with an argument
/// containing `text`: a CLI started by the service, not its launcher.
pub fn program_processes(program: &Path, text: &str) -> Vec<i32> {
    let program = std::fs::canonicalize(program).expect("program path");
    processes_with_arg_containing(text)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == program)
        })
        .collect()
}

fn processes_where(matches: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    let me = std::process::id().cast_signed();
    crate::procfs::processes()
        .map(|(pid, _)| pid)
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let running = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|s| s != "Z" && s != "X");
            running && cmdline.split(|b| *b == 0).any(&matches)
        })
        .collect()
}

/// Waits (bounded: a safety net, not a timing assertion) until `done` holds.
pub async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A git daemon on 127.0.0.1 serving the bare repositories below `base`, push
/// allowed (a remote a sandboxed git reaches over the network, with the
/// `network` grant): each connection is handed to `git daemon --inetd`, run as
/// the test user (who owns the repositories).
pub struct GitDaemon {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl GitDaemon {
    pub async fn serve(base: &Path) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let base = base.to_path_buf();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let stream = stream.into_std().expect("std stream");
                stream.set_nonblocking(false).expect("blocking");
                let input = std::os::fd::OwnedFd::from(stream);
                let output = input.try_clone().expect("dup");
                let mut daemon = tokio::process::Command::new("git");
                daemon
                    .args(["daemon", "--inetd", "--export-all", "--enable=receive-pack"])
                    .arg(format!("--base-path={}", base.display()))
                    .arg(&base)
                    .env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .env("HOME", "/tmp")
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .stdin(std::process::Stdio::from(input))
                    .stdout(std::process::Stdio::from(output))
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true);
                if running_as_root() {
                    daemon.uid(TEST_UID).gid(TEST_UID);
                }
                let mut child = daemon.spawn().expect("git daemon");
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
            }
        });
        Self { port, task }
    }

    /// The git:// URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.task.abort();
    }
}
