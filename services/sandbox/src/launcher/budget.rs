//! What a sandbox's processes write to files, added up for their run, and
//! the free space every sandbox leaves on the file systems it writes to.
//!
//! The monitor looks every [`super::fence::CHECK`]:
//!
//! - **the sandbox's processes**: those its cgroup lists, or without a
//!   cgroup the monitor's descendants (it is their subreaper in the landlock
//!   tier, the parent of the PID namespace's init in the other);
//! - **what they wrote**: each live process's `write_bytes` less its
//!   `cancelled_write_bytes` (`/proc/<pid>/io`, which holds what the children
//!   it waited for wrote); what the processes the monitor reaped wrote (its
//!   `RUSAGE_CHILDREN` output blocks); and what a process wrote when it was
//!   last seen, once it is gone and its parent ignored `SIGCHLD` (the kernel
//!   reaps such a child by itself and its counts go with it). The sandbox's
//!   total only grows;
//! - **the run's total**: each sandbox of a run keeps its total in a file of
//!   the run's ledger (a directory of the service's, outside every sandbox),
//!   and adds up the others' — those still running and those that ended — so
//!   the limit is the run's, over all its calls, however many run at once;
//! - **the floor**: the free space of the file system of every path the
//!   sandbox may write. Below the reserve, the sandbox is stopped whatever it
//!   wrote: whatever the kernel does not count (a child reaped by itself
//!   between two looks) cannot fill the disk.
//!
//! Space taken without writing is refused elsewhere: `fallocate` by the
//! seccomp filter, a file longer than the run's limit (a sparse one too) by
//! `RLIMIT_FSIZE`.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::sys::resource::{UsageWho, getrusage};
use nix::unistd::{Pid, getpid};

use super::tree;

/// `SIGCHLD`'s bit in a `SigIgn` mask of `/proc/<pid>/status`.
const SIGCHLD_BIT: u64 = 1 << (nix::libc::SIGCHLD - 1);

/// Where the sandbox's processes are listed.
#[derive(Debug, Clone)]
pub enum Members {
    /// The sandbox's own cgroup (`cgroup.procs`).
    Cgroup(PathBuf),
    /// The monitor's descendants, but these (its egress proxy).
    Descendants { skip: Vec<Pid> },
}

impl Members {
    fn list(&self) -> Vec<i32> {
        match self {
            Self::Cgroup(procs) => std::fs::read_to_string(procs)
                .unwrap_or_default()
                .lines()
                .filter_map(|pid| pid.trim().parse().ok())
                .collect(),
            Self::Descendants { skip } => tree::descendants(getpid(), skip)
                .into_iter()
                .map(Pid::as_raw)
                .collect(),
        }
    }
}

/// A process as last seen.
#[derive(Debug, Clone, Copy)]
struct Seen {
    written: u64,
    /// Its parent ignores `SIGCHLD`: it is reaped by the kernel, uncounted.
    reaped_unseen: bool,
}

/// The limits a sandbox's processes write within.
#[derive(Debug)]
pub struct Budget {
    members: Members,
    /// Most bytes the run's processes may write, all its sandboxes together.
    limit: u64,
    ledger: Option<Ledger>,
    floor: Floor,
    seen: HashMap<i32, Seen>,
    /// What processes reaped by the kernel wrote, as last seen.
    reaped: u64,
    /// The most this sandbox was seen to have written.
    high: u64,
}

impl Budget {
    /// The budget of a sandbox of `policy`: its processes are its cgroup's
    /// when it has one, else the monitor's descendants but `proxy`.
    pub fn of(
        policy: &crate::policy::Policy,
        cgroups: Option<&super::cgroup::Created>,
        proxy: Option<Pid>,
    ) -> Self {
        let members = cgroups.and_then(super::cgroup::Created::procs).map_or_else(
            || Members::Descendants {
                skip: proxy.into_iter().collect(),
            },
            Members::Cgroup,
        );
        Self::new(
            members,
            policy.limits.written_bytes,
            policy.ledger.as_deref(),
            (policy.read_write.clone(), policy.limits.min_free_bytes),
        )
    }

    /// `ledger`: the run's ledger directory (None: the sandbox is alone);
    /// `floor`: the paths the sandbox may write and the free space kept on
    /// their file systems (0: none).
    pub fn new(
        members: Members,
        limit: u64,
        ledger: Option<&Path>,
        floor: (Vec<PathBuf>, u64),
    ) -> Self {
        Self {
            members,
            limit,
            ledger: ledger.and_then(Ledger::open),
            floor: Floor {
                paths: floor.0,
                reserve: floor.1,
            },
            seen: HashMap::new(),
            reaped: 0,
            high: 0,
        }
    }

    /// What this sandbox's processes have written so far.
    pub fn written(&mut self) -> u64 {
        let mut now = HashMap::new();
        let mut ignoring = HashMap::new();
        let mut live = 0_u64;
        for pid in self.members.list() {
            let Some((ppid, ignores_children)) = status_of(pid) else {
                continue;
            };
            let written = written_by(pid);
            live = live.saturating_add(written);
            ignoring.insert(pid, ignores_children);
            now.insert(pid, (ppid, written));
        }
        let now: HashMap<i32, Seen> = now
            .into_iter()
            .map(|(pid, (ppid, written))| {
                let reaped_unseen = ignoring
                    .get(&ppid)
                    .copied()
                    .unwrap_or_else(|| status_of(ppid).is_some_and(|(_, ignores)| ignores));
                (
                    pid,
                    Seen {
                        written,
                        reaped_unseen,
                    },
                )
            })
            .collect();
        for (pid, gone) in &self.seen {
            if gone.reaped_unseen && !now.contains_key(pid) {
                self.reaped = self.reaped.saturating_add(gone.written);
            }
        }
        self.seen = now;
        let total = live
            .saturating_add(reaped_by_me())
            .saturating_add(self.reaped);
        self.high = self.high.max(total);
        self.high
    }

    /// Why the sandbox must stop, if it must: its run wrote more than its
    /// limit, or a file system it writes to is nearly full.
    pub fn spent(&mut self) -> Option<String> {
        self.over_limit().or_else(|| self.floor.breached())
    }

    /// Why the run is over its limit, if it is (this sandbox's total is
    /// kept in the run's ledger on the way).
    pub fn over_limit(&mut self) -> Option<String> {
        let mine = self.written();
        let others = match &mut self.ledger {
            Some(ledger) => {
                ledger.record(mine);
                ledger.others()
            }
            None => 0,
        };
        let written = mine.saturating_add(others);
        if written > self.limit {
            return Some(if others == 0 {
                format!(
                    "its processes wrote {} MiB to files, over their limit of {} MiB",
                    written >> 20,
                    self.limit >> 20
                )
            } else {
                format!(
                    "the run's processes wrote {} MiB to files ({} MiB in this call, {} MiB in its other calls), over the run's limit of {} MiB",
                    written >> 20,
                    mine >> 20,
                    others >> 20,
                    self.limit >> 20
                )
            });
        }
        None
    }
}

/// The free space kept on the file systems a sandbox writes to.
#[derive(Debug)]
struct Floor {
    paths: Vec<PathBuf>,
    reserve: u64,
}

impl Floor {
    fn breached(&self) -> Option<String> {
        if self.reserve == 0 {
            return None;
        }
        self.paths.iter().find_map(|path| {
            let stat = nix::sys::statvfs::statvfs(path).ok()?;
            let free = stat.blocks_available().saturating_mul(stat.fragment_size());
            (free < self.reserve).then(|| {
                format!(
                    "the file system of {} has {} MiB free, under the {} MiB every sandbox leaves free (--sandbox-min-free-mib)",
                    path.display(),
                    free >> 20,
                    self.reserve >> 20
                )
            })
        })
    }
}

/// One sandbox's line in its run's ledger: a file of its own holding its
/// total, in a directory every sandbox of the run shares.
#[derive(Debug)]
struct Ledger {
    dir: PathBuf,
    own: PathBuf,
    recorded: Option<u64>,
}

impl Ledger {
    fn open(dir: &Path) -> Option<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .ok()?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Some(Self {
            dir: dir.to_path_buf(),
            own: dir.join(format!("{}-{started}", getpid())),
            recorded: None,
        })
    }

    /// Keeps `written` as this sandbox's total (written beside, renamed over).
    fn record(&mut self, written: u64) {
        if self.recorded == Some(written) {
            return;
        }
        let name = self
            .own
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self.dir.join(format!(".{name}"));
        let written_out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(written.to_string().as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &self.own));
        if written_out.is_ok() {
            self.recorded = Some(written);
        }
    }

    /// What the run's other sandboxes wrote (each one's last total).
    fn others(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.path() != self.own && !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                std::fs::read_to_string(e.path())
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .fold(0, u64::saturating_add)
    }
}

/// The parent of `pid` and whether `pid` ignores `SIGCHLD`
/// (`/proc/<pid>/status`); None when it is gone.
fn status_of(pid: i32) -> Option<(i32, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let ppid = field("PPid:")?.parse().ok()?;
    let ignored = field("SigIgn:").and_then(|m| u64::from_str_radix(m, 16).ok())?;
    Some((ppid, ignored & SIGCHLD_BIT != 0))
}

/// `write_bytes` less `cancelled_write_bytes` of `/proc/<pid>/io` (0 when
/// it cannot be read: the process is gone).
fn written_by(pid: i32) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/io")) else {
        return 0;
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    field("write_bytes:").saturating_sub(field("cancelled_write_bytes:"))
}

/// What the processes this monitor reaped wrote, and those they reaped.
fn reaped_by_me() -> u64 {
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0, |usage| {
        u64::try_from(usage.block_writes())
            .unwrap_or(0)
            .saturating_mul(512)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_sandboxes_add_up_in_its_ledger() {
        let dir = tempfile::tempdir().expect("dir");
        let run = dir.path().join("run-1");
        let mut first = Ledger::open(&run).expect("ledger");
        first.record(10);
        // A second sandbox of the run (another monitor's file).
        std::fs::write(run.join("99-1"), "32").expect("write");
        assert_eq!(first.others(), 32);
        first.record(11);
        let second = Ledger {
            dir: run.clone(),
            own: run.join("99-1"),
            recorded: Some(32),
        };
        assert_eq!(second.others(), 11);
        // A half-written line (its temporary file) is not read.
        std::fs::write(run.join(".99-1"), "1000").expect("write");
        assert_eq!(second.others(), 11);
    }

    #[test]
    fn the_floor_is_the_free_space_of_the_written_file_systems() {
        let dir = tempfile::tempdir().expect("dir");
        let floor = |reserve| Floor {
            paths: vec![dir.path().to_path_buf()],
            reserve,
        };
        assert_eq!(floor(0).breached(), None);
        assert_eq!(floor(1).breached(), None);
        let why = floor(u64::MAX).breached().expect("breached");
        assert!(why.contains("--sandbox-min-free-mib"), "{why}");
    }

    #[test]
    fn this_process_is_seen_and_its_sigchld_disposition_read() {
        let (ppid, ignores) = status_of(std::process::id().cast_signed()).expect("status");
        assert_eq!(ppid, nix::unistd::getppid().as_raw());
        assert!(!ignores);
    }
}
