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
//!   between two looks) cannot fill the disk;
//! - **memory**, where no memory cgroup limits it: the resident memory of the
//!   sandbox's processes (`VmRSS`), and of the run's other live sandboxes
//!   from the ledger, against the run's memory limit.
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

/// Why a sandbox must stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Its run wrote past its limit, or a file system it writes to is
    /// nearly full.
    Wrote(String),
    /// Its run holds more memory than its limit (no memory cgroup).
    Memory(String),
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
    /// Most memory the run's processes may hold, where no cgroup limits it.
    memory: Option<u64>,
    /// The sandbox's processes' resident memory at the last look.
    resident: u64,
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
        let mut budget = Self::new(
            members,
            policy.limits.written_bytes,
            policy.ledger.as_deref(),
            (policy.read_write.clone(), policy.limits.min_free_bytes),
        );
        let cgroup_limits_memory = policy
            .cgroups
            .as_ref()
            .is_some_and(crate::policy::Cgroups::limits_memory);
        if !cgroup_limits_memory {
            budget.memory = Some(policy.limits.memory_bytes);
        }
        budget
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
            memory: None,
            resident: 0,
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
        let mut resident = 0_u64;
        for pid in self.members.list() {
            let Some(Status {
                ppid,
                ignores_children,
                resident: held,
            }) = status_of(pid)
            else {
                continue;
            };
            resident = resident.saturating_add(held);
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
                    .unwrap_or_else(|| status_of(ppid).is_some_and(|p| p.ignores_children));
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
        self.resident = resident;
        let total = live
            .saturating_add(reaped_by_me())
            .saturating_add(self.reaped);
        self.high = self.high.max(total);
        self.high
    }

    /// Why the sandbox must stop, if it must: its run wrote more than its
    /// limit, a file system it writes to is nearly full, or (without a
    /// memory cgroup) its run holds more memory than its limit.
    pub fn check(&mut self) -> Option<Stop> {
        let (written, others) = self.look();
        if let Some(why) = self.over_limit(written, others.written) {
            return Some(Stop::Wrote(why));
        }
        if let Some(why) = self.floor.breached() {
            return Some(Stop::Wrote(why));
        }
        let limit = self.memory?;
        let held = self.resident.saturating_add(others.resident);
        (held > limit).then(|| {
            Stop::Memory(format!(
                "its run's processes held {} MiB of memory ({} MiB in this call), over the run's limit of {} MiB (no memory cgroup on this host: the launcher adds up their resident memory every 100 ms)",
                held >> 20,
                self.resident >> 20,
                limit >> 20
            ))
        })
    }

    /// Adds up once more when the sandbox's processes are gone (its ledger
    /// line then holds all they wrote, and no memory): why the run is over
    /// its written-bytes limit, if it now is.
    pub fn settle(&mut self) -> Option<String> {
        let mine = self.written();
        self.resident = 0;
        let others = match &mut self.ledger {
            Some(ledger) => ledger.close(mine),
            None => Totals::default(),
        };
        self.over_limit(mine, others.written)
    }

    /// This sandbox's total, kept in the ledger, and the others'.
    fn look(&mut self) -> (u64, Totals) {
        let mine = self.written();
        let others = self.record(mine);
        (mine, others)
    }

    fn record(&mut self, written: u64) -> Totals {
        match &mut self.ledger {
            Some(ledger) => {
                ledger.record(written, self.resident);
                ledger.others()
            }
            None => Totals::default(),
        }
    }

    fn over_limit(&self, mine: u64, others: u64) -> Option<String> {
        let written = mine.saturating_add(others);
        (written > self.limit).then(|| {
            if others == 0 {
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
            }
        })
    }
}

/// What a run's other sandboxes wrote, and hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Totals {
    written: u64,
    resident: u64,
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

/// The ledger line that holds what the run's ended sandboxes wrote.
const ENDED: &str = "ended";

/// Writes a ledger line at `path`, `<written> <resident>`: beside it (a
/// name starting with a dot, which readers skip), then renamed over it.
fn write_line(path: &Path, written: u64, resident: u64) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}"));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(format!("{written} {resident}").as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path))
}

/// One sandbox's line in its run's ledger: a file of its own holding its
/// total, in a directory every sandbox of the run shares.
#[derive(Debug)]
struct Ledger {
    dir: PathBuf,
    own: PathBuf,
    recorded: Option<(u64, u64)>,
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

    /// Keeps `written` as this sandbox's total and `resident` as what it
    /// holds now: `<written> <resident>` (written beside, renamed over).
    fn record(&mut self, written: u64, resident: u64) {
        if self.recorded == Some((written, resident)) {
            return;
        }
        if write_line(&self.own, written, resident).is_ok() {
            self.recorded = Some((written, resident));
        }
    }

    /// Folds this sandbox's final total into the run's `ended` line and
    /// removes its own, so a run of many calls keeps one line per live
    /// sandbox, not one per call (each look reads them all). Returns the
    /// others' totals, read under the same lock: none is counted twice or
    /// missed while lines fold.
    fn close(&mut self, written: u64) -> Totals {
        let lock = self.lock(nix::fcntl::FlockArg::LockExclusive);
        let others = self.read_others();
        let ended = std::fs::read_to_string(self.dir.join(ENDED))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let folded = lock.is_some()
            && write_line(&self.dir.join(ENDED), ended.saturating_add(written), 0).is_ok();
        if folded {
            let _ = std::fs::remove_file(&self.own);
        } else {
            // Not folded: the line stays, with the final total.
            self.record(written, 0);
        }
        others
    }

    /// The run's lock file, locked as `how`: folding takes it alone and
    /// reading shares it. Held until dropped; None when it cannot be had.
    fn lock(&self, how: nix::fcntl::FlockArg) -> Option<nix::fcntl::Flock<std::fs::File>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.dir.join(".lock"))
            .ok()?;
        nix::fcntl::Flock::lock(file, how).ok()
    }

    /// What the run's other sandboxes wrote (each one's last total, and
    /// those ended, folded), and what those whose monitor still runs hold
    /// (one killed cannot say it holds nothing any more).
    fn others(&self) -> Totals {
        let _lock = self.lock(nix::fcntl::FlockArg::LockShared);
        self.read_others()
    }

    fn read_others(&self) -> Totals {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Totals::default();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.path() != self.own && !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                let text = std::fs::read_to_string(e.path()).ok()?;
                let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
                let written = fields.next()??;
                let resident = fields.next().flatten().unwrap_or(0);
                let monitor_runs = e
                    .file_name()
                    .to_str()
                    .and_then(|n| n.split('-').next()?.parse::<i32>().ok())
                    .is_some_and(|pid| {
                        nix::sys::signal::kill(Pid::from_raw(pid), None)
                            != Err(nix::errno::Errno::ESRCH)
                    });
                Some(Totals {
                    written,
                    resident: if monitor_runs { resident } else { 0 },
                })
            })
            .fold(Totals::default(), |a, b| Totals {
                written: a.written.saturating_add(b.written),
                resident: a.resident.saturating_add(b.resident),
            })
    }
}

/// What `/proc/<pid>/status` says of a process.
struct Status {
    ppid: i32,
    /// It ignores `SIGCHLD` (its children are reaped by the kernel).
    ignores_children: bool,
    /// Its resident memory (`VmRSS`), in bytes.
    resident: u64,
}

/// What `/proc/<pid>/status` says of `pid`; None when it is gone.
fn status_of(pid: i32) -> Option<Status> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let ppid = field("PPid:")?.parse().ok()?;
    let ignored = field("SigIgn:").and_then(|m| u64::from_str_radix(m, 16).ok())?;
    // "VmRSS:	  1234 kB" (absent for a zombie).
    let resident = field("VmRSS:")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        .saturating_mul(1024);
    Some(Status {
        ppid,
        ignores_children: ignored & SIGCHLD_BIT != 0,
        resident,
    })
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
        first.record(10, 7);
        // A second sandbox of the run, whose monitor (this process) runs.
        let me = std::process::id();
        std::fs::write(run.join(format!("{me}-1")), "32 5").expect("write");
        assert_eq!(
            first.others(),
            Totals {
                written: 32,
                resident: 5
            }
        );
        first.record(11, 0);
        let second = Ledger {
            dir: run.clone(),
            own: run.join(format!("{me}-1")),
            recorded: Some((32, 5)),
        };
        assert_eq!(second.others().written, 11);
        // A half-written line (its temporary file) is not read.
        std::fs::write(run.join(format!(".{me}-1")), "1000 1000").expect("write");
        assert_eq!(second.others().written, 11);
        // A monitor that is gone holds no memory; what it wrote stays.
        std::fs::write(run.join(format!("{}-2", i32::MAX)), "4 1000").expect("write");
        assert_eq!(
            second.others(),
            Totals {
                written: 15,
                resident: 0
            }
        );
    }

    #[test]
    fn ended_sandboxes_fold_into_one_line_that_still_counts() {
        let dir = tempfile::tempdir().expect("dir");
        let run = dir.path().join("run-1");
        let mut live = Ledger::open(&run).expect("ledger");
        live.record(1, 0);
        for (i, written) in [5_u64, 7, 11].into_iter().enumerate() {
            let mut ended = Ledger {
                dir: run.clone(),
                own: run.join(format!("{}-{i}", std::process::id())),
                recorded: None,
            };
            ended.record(written, 3);
            let others = ended.close(written);
            assert!(!ended.own.exists(), "its own line is folded away");
            assert_eq!(others.written, 1 + [0, 5, 12][i]);
        }
        assert_eq!(
            live.others(),
            Totals {
                written: 23,
                resident: 0
            }
        );
        let lines: Vec<_> = std::fs::read_dir(&run)
            .expect("run")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        assert_eq!(
            lines.len(),
            2,
            "the live sandbox's line and the ended one: {lines:?}"
        );
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
        let status = status_of(std::process::id().cast_signed()).expect("status");
        assert_eq!(status.ppid, nix::unistd::getppid().as_raw());
        assert!(!status.ignores_children);
        assert!(status.resident > 0);
    }
}
