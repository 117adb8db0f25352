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

/// Whether a test that needs root (for `what`) can run: as root, yes; else
/// it fails under `CHORUS_TEST_REQUIRE_ROOT=1` (CI), and otherwise says it
/// did not run.
pub fn root_for(what: &str) -> bool {
    if running_as_root() {
        return true;
    }
    assert!(
        std::env::var("CHORUS_TEST_REQUIRE_ROOT").as_deref() != Ok("1"),
        "CHORUS_TEST_REQUIRE_ROOT=1 but the tests do not run as root, which {what} needs: run them as root (CI does)"
    );
    eprintln!("not run: {what} needs root");
    false
}

/// One way a test binary runs again: as whom, and in which tier.
#[derive(Debug, Clone, Copy)]
pub struct Configuration {
    pub name: &'static str,
    /// As nobody ([`TEST_UID`]): a service that is not root, with no
    /// capability and no cgroup.
    pub as_nobody: bool,
    /// `CHORUS_SANDBOX_TIER`, as the services read it (empty: as it is).
    pub tier: &'static str,
}

/// The configurations an attack suite runs in besides the one `cargo test`
/// starts it in (root, the tier the host gives: the namespace tier here).
pub const OTHER_CONFIGURATIONS: [Configuration; 3] = [
    Configuration {
        name: "root service, landlock tier",
        as_nobody: false,
        tier: "landlock",
    },
    Configuration {
        name: "non-root service, namespace tier",
        as_nobody: true,
        tier: "namespaces",
    },
    Configuration {
        name: "non-root service, landlock tier",
        as_nobody: true,
        tier: "landlock",
    },
];

/// Set in a test binary that runs again in another configuration (its
/// name): it does not run itself again.
pub const AGAIN_ENV: &str = "CHORUS_TEST_CONFIGURATION";
/// The marker the sandbox crate's own runs as nobody use.
const AGAIN_AS_NOBODY_ENV: &str = "CHORUS_SANDBOX_TEST_UNPRIVILEGED";

/// Runs this test binary again — all its tests but those whose names hold
/// `skip` (the caller) — in each of [`OTHER_CONFIGURATIONS`], one after the
/// other, and asserts each passes with tests run. Needs root (to become
/// nobody); in a configuration run, or without root, nothing (a suite that
/// must run as root fails with `CHORUS_TEST_REQUIRE_ROOT=1`).
pub fn again_in_every_configuration(skip: &str) {
    if std::env::var_os(AGAIN_ENV).is_some()
        || std::env::var_os(AGAIN_AS_NOBODY_ENV).is_some()
        || !root_for("running the suite again as a non-root service and in the landlock tier")
    {
        return;
    }
    let forced = std::env::var("CHORUS_SANDBOX_TIER").ok();
    for configuration in OTHER_CONFIGURATIONS {
        if !configuration.as_nobody && forced.as_deref() == Some(configuration.tier) {
            continue;
        }
        again_in(configuration, skip);
    }
}

/// Runs this test binary again in `configuration`, but the tests whose
/// names hold `skip`; asserts they pass.
pub fn again_in(configuration: Configuration, skip: &str) {
    let this = std::env::current_exe().expect("this test binary");
    let home = tempfile::tempdir().expect("a home");
    let mut command = if configuration.as_nobody {
        give_to_test_user(home.path());
        let mut setpriv = std::process::Command::new("setpriv");
        setpriv.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            // As an operator starts a service that is not root: no
            // capability, the bounding set left as it is (full).
            "--inh-caps=-all",
        ]);
        setpriv.arg(&this);
        // What needs root is not run (not failed) as nobody.
        setpriv.env_remove("CHORUS_TEST_REQUIRE_ROOT");
        setpriv
    } else {
        std::process::Command::new(&this)
    };
    if !configuration.tier.is_empty() {
        command.env("CHORUS_SANDBOX_TIER", configuration.tier);
    }
    let started = std::time::Instant::now();
    let out = command
        // Uncaptured: what was not run (it needs root) is counted from stderr.
        .args(["--test-threads", "2", "--nocapture", "--skip", skip])
        .env(AGAIN_ENV, configuration.name)
        .env(AGAIN_AS_NOBODY_ENV, "1")
        .env("HOME", home.path())
        .current_dir("/")
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout
        .lines()
        .rfind(|l| l.starts_with("test result:"))
        .unwrap_or("no test result");
    assert!(
        out.status.success()
            && result.starts_with("test result: ok.")
            && !result.contains("ok. 0 passed"),
        "the suite again as a {}:\n{stdout}\n{}",
        configuration.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let not_run = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("not run:"))
        .count();
    eprintln!(
        "{}: {result} ({not_run} tests or parts not run: they need root; {:.1} s)",
        configuration.name,
        started.elapsed().as_secs_f64()
    );
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

/// An enforced sandbox with the built launcher and `config` otherwise; in
/// the tier `CHORUS_SANDBOX_TIER` names (`namespaces` or `landlock`, as the
/// services read it) when `config` names none, so a whole suite can be run
/// in either tier.
pub async fn enforced(config: SandboxConfig) -> Sandbox {
    let tier = config.tier.or_else(
        || match std::env::var("CHORUS_SANDBOX_TIER").ok()?.as_str() {
            "namespaces" => Some(crate::Tier::Namespaces),
            "landlock" => Some(crate::Tier::Landlock),
            _ => None,
        },
    );
    let sandbox = Sandbox::start(SandboxConfig {
        launcher: Some(built_launcher()),
        tier,
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

/// A network namespace a test makes, joined to the host by a veth pair of
/// its own (a /30 in 10.200.0.0/16): a place outside the sandbox and off the
/// host's loopback for servers a sandboxed program may be allowed to reach.
/// Needs root. Dropping it kills what runs in it and deletes it.
pub struct TestNet {
    pub name: String,
    /// The host's end of the pair.
    pub host_ip: std::net::Ipv4Addr,
    /// The namespace's end: where its servers listen.
    pub ip: std::net::Ipv4Addr,
    children: Vec<tokio::process::Child>,
}

impl TestNet {
    /// Makes the namespace and the pair, both ends up.
    pub fn create() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        assert!(running_as_root(), "a test network namespace needs root");
        let unique =
            (std::process::id().wrapping_mul(13) + NEXT.fetch_add(1, Ordering::Relaxed)) % 16_384;
        let (block, slot) = (
            u8::try_from(unique / 64).unwrap_or(0),
            u8::try_from(unique % 64).unwrap_or(0),
        );
        let host_ip = std::net::Ipv4Addr::new(10, 200, block, slot * 4 + 1);
        let ip = std::net::Ipv4Addr::new(10, 200, block, slot * 4 + 2);
        let name = format!("chorus-test-{unique:x}");
        let (outer, inner) = (format!("ce{unique:x}h"), format!("ce{unique:x}n"));
        let net = Self {
            name: name.clone(),
            host_ip,
            ip,
            children: Vec::new(),
        };
        for args in [
            vec!["netns", "add", &name],
            vec![
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ],
            vec!["link", "set", &inner, "netns", &name],
            vec!["addr", "add", &format!("{host_ip}/30"), "dev", &outer],
            vec!["link", "set", &outer, "up"],
            vec![
                "-n",
                &name,
                "addr",
                "add",
                &format!("{ip}/30"),
                "dev",
                &inner,
            ],
            vec!["-n", &name, "link", "set", &inner, "up"],
            vec!["-n", &name, "link", "set", "lo", "up"],
        ] {
            let out = std::process::Command::new("ip")
                .args(&args)
                .output()
                .expect("ip (iproute2) must be installed for these tests");
            assert!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        net
    }

    /// Serves the files of `dir` (given to the test user) over HTTP at
    /// `ip`:`port`, and waits until it serves.
    pub async fn serve_files(&mut self, dir: &Path, port: u16) {
        give_to_test_user(dir);
        let (ip, port, dir) = (
            self.ip.to_string(),
            port.to_string(),
            dir.display().to_string(),
        );
        self.serve(
            "python3",
            &[
                "-u",
                "-m",
                "http.server",
                &port,
                "--bind",
                &ip,
                "--directory",
                &dir,
            ],
            "Serving HTTP",
        )
        .await;
    }

    /// Starts `program args` in the namespace as the test user, and waits
    /// until it writes a line containing `ready` (on stdout or stderr).
    pub async fn serve(&mut self, program: &str, args: &[&str], ready: &str) {
        use tokio::io::AsyncBufReadExt;
        let uid = TEST_UID.to_string();
        let mut child = tokio::process::Command::new("ip")
            .args(["netns", "exec", &self.name, "setpriv"])
            .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--"])
            .arg(program)
            .args(args)
            .env_clear()
            // The system's programs: the test user cannot run root's own
            // (pyenv shims and the like).
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/tmp")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // A group of its own: servers that fork (git daemon) go with it.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("start a server in the test namespace");
        let stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stderr = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(pump(stdout, tx.clone()));
        tokio::spawn(pump(stderr, tx.clone()));
        drop(tx);
        let mut said = Vec::new();
        let waited = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = rx.recv().await {
                if line.contains(ready) {
                    return true;
                }
                said.push(line);
            }
            false
        })
        .await;
        assert!(
            matches!(waited, Ok(true)),
            "{program} never said '{ready}' in {}; it said:\n{}",
            self.name,
            said.join("\n")
        );
        self.children.push(child);
    }
}

/// Sends every line on (and keeps reading once nobody listens, so the child
/// never blocks on a full pipe).
async fn pump<R: tokio::io::AsyncBufRead + Unpin>(
    mut lines: tokio::io::Lines<R>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) {
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = tx.send(line);
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.start_kill();
        }
        // The pair goes with the namespace.
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A git daemon in a [`TestNet`] of its own serving the bare repositories below `base`,
/// push allowed, as the test user (who owns the repositories): a remote a
/// sandboxed git reaches through the egress proxy when the run's egress list
/// names it ([`Self::rule`]).
pub struct GitDaemon {
    pub host: std::net::Ipv4Addr,
    pub port: u16,
    _net: TestNet,
}

impl GitDaemon {
    /// Serves `base` from a test network namespace of its own.
    pub async fn serve(base: &Path) -> Self {
        let mut net = TestNet::create();
        let port = 9418;
        net.serve(
            "git",
            &[
                "daemon",
                "--verbose",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                &format!("--listen={}", net.ip),
                &format!("--port={port}"),
                &format!("--base-path={}", base.display()),
                &base.display().to_string(),
            ],
            "Ready to rumble",
        )
        .await;
        Self {
            host: net.ip,
            port,
            _net: net,
        }
    }

    /// The git:// URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://{}:{}/{name}", self.host, self.port)
    }

    /// The egress rule that lets a sandboxed git reach it.
    pub fn rule(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}
