//! A process confined to a share of one core by a cgroup, so that a load it
//! makes costs the machine at most that share (benchmarks: an attacker's own
//! CPU must not be what slows the service down). cgroup v2 (`cpu.max`) where
//! the unified hierarchy is mounted at `/sys/fs/cgroup`, else the v1 `cpu`
//! controller (`cpu.cfs_quota_us`); root is needed either way.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

/// The scheduler's period the quota is a share of (µs).
const PERIOD_US: u64 = 100_000;

/// A child process in a cgroup of its own; killed, and its cgroup removed,
/// when dropped.
pub struct Confined {
    child: Child,
    /// Closing it tells the child to stop.
    stdin: Option<ChildStdin>,
    cgroup: PathBuf,
}

impl Confined {
    /// Starts `command` (stdin and stdout piped) in a new cgroup allowed
    /// `share` of one core (0.5: half a core), and waits for it to print a
    /// line saying it is `ready`.
    pub fn start(mut command: Command, share: f64, name: &str) -> Self {
        let cgroup = make_cgroup(name, share);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string()).unwrap_or_else(|e| {
            let _ = child.kill();
            panic!("putting {name} into {}: {e}", cgroup.display())
        });
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("the child's stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("reading {name}'s first line: {e}"));
        assert_eq!(line.trim(), "ready", "{name} did not say it is ready");
        Self {
            child,
            stdin,
            cgroup,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the child (its stdin closes), waits for it, removes its cgroup.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        self.end();
    }
}

/// A new cgroup named after `name` and this process, allowed `share` of a
/// core.
fn make_cgroup(name: &str, share: f64) -> PathBuf {
    let quota = ((share * PERIOD_US as f64) as u64).max(1_000);
    let unified = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let leaf = format!("chorus-{name}-{}", std::process::id());
    let (dir, file, value) = if unified {
        (
            PathBuf::from("/sys/fs/cgroup").join(leaf),
            "cpu.max",
            format!("{quota} {PERIOD_US}"),
        )
    } else {
        (
            PathBuf::from("/sys/fs/cgroup/cpu").join(leaf),
            "cpu.cfs_quota_us",
            quota.to_string(),
        )
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| {
        panic!(
            "cannot make the cgroup {} to confine {name} ({e}): run the benchmark as root on a \
             machine with the cpu controller (cgroup v1 mounted at /sys/fs/cgroup/cpu, or v2 \
             with cpu enabled in the root's cgroup.subtree_control)",
            dir.display()
        )
    });
    std::fs::write(dir.join(file), value)
        .unwrap_or_else(|e| panic!("setting {} in {}: {e}", file, dir.display()));
    dir
}
