//! Per-run and per-sandbox control groups: processes, memory and CPU weight
//! counted for a run as a whole (an rlimit on processes counts every process
//! of the user; a limit per sandbox lets a run hold one limit per tool call).
//!
//! With a run, the monitor makes `chorus-run-<run>/chorus-sandbox-<its pid>` in
//! each parent of the plan: the run's limits are written on the run's group,
//! which every sandbox of the run on this host shares, and each sandbox has its
//! own child (counted and removed on its own). Without a run (a self-check, a
//! test) the sandbox's group is `chorus-sandbox-<its pid>`, with the limits.
//! init moves itself in before it starts anything, so every process of the
//! sandbox is inside; the monitor removes its group once init is gone (the
//! kernel has then killed every process of the namespace), and the run's group
//! when it was the last sandbox of the run.
//!
//! Launchers of one run race: making the run's group when it exists is fine,
//! every launcher writes the same limits, and one whose child cannot be made
//! because the last sibling just removed the run's group starts over.

use std::io;
use std::path::{Path, PathBuf};

use crate::policy::{CGROUP_PREFIX, Cgroups, Limits, RUN_CGROUP_PREFIX};

/// How often a launcher starts over when the run's group went away under it.
const ATTEMPTS: u32 = 20;

/// The cgroups of one sandbox.
#[derive(Debug)]
pub struct Created {
    plan: Cgroups,
    /// The sandbox's own groups, one per hierarchy: init joins them.
    dirs: Vec<PathBuf>,
    /// The run's groups, one per hierarchy, when the sandbox belongs to a run.
    run_dirs: Vec<PathBuf>,
}

/// What a hierarchy's groups limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controllers {
    /// cgroup v2: pids, memory, and the CPU weight when the parent enables it.
    Unified,
    Pids,
    Memory,
    Cpu,
}

impl Created {
    /// Makes the sandbox's cgroups (in the run's, when `run` is given) and
    /// writes the limits.
    pub fn make(plan: &Cgroups, limits: &Limits, run: Option<&str>) -> io::Result<Self> {
        let name = format!("{CGROUP_PREFIX}{}", std::process::id());
        let mut created = Self {
            plan: plan.clone(),
            dirs: Vec::new(),
            run_dirs: Vec::new(),
        };
        let result =
            hierarchies(plan)
                .into_iter()
                .try_for_each(|(parent, controllers)| match run {
                    None => {
                        let dir = created.make_dir(&parent.join(&name))?;
                        write_limits(&dir, controllers, limits)
                    }
                    Some(run) => created.make_in_run(&parent, run, &name, controllers, limits),
                });
        match result {
            Ok(()) => Ok(created),
            Err(e) => {
                created.remove();
                Err(e)
            }
        }
    }

    /// `<parent>/chorus-run-<run>` with the run's limits, and the sandbox's
    /// child in it; starts over when the run's group went away meanwhile.
    fn make_in_run(
        &mut self,
        parent: &Path,
        run: &str,
        name: &str,
        controllers: Controllers,
        limits: &Limits,
    ) -> io::Result<()> {
        let run_dir = parent.join(format!("{RUN_CGROUP_PREFIX}{run}"));
        self.run_dirs.push(run_dir.clone());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let made = match std::fs::create_dir(&run_dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(located(&run_dir, &e)),
            }
            .and_then(|()| write_limits(&run_dir, controllers, limits))
            .and_then(|()| self.make_dir(&run_dir.join(name)));
            match made {
                Ok(_) => return Ok(()),
                // The last sandbox of the run removed its group just now.
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn make_dir(&mut self, dir: &Path) -> io::Result<PathBuf> {
        if let Err(e) = std::fs::create_dir(dir) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(located(dir, &e));
            }
            // Left by a launcher that had this pid and was killed: empty, so
            // it can go.
            std::fs::remove_dir(dir).map_err(|e| located(dir, &e))?;
            std::fs::create_dir(dir).map_err(|e| located(dir, &e))?;
        }
        self.dirs.push(dir.to_path_buf());
        Ok(dir.to_path_buf())
    }

    /// Moves the calling process into every cgroup of the sandbox.
    pub fn join_self(&self) -> io::Result<()> {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), "0").map_err(|e| located(dir, &e))?;
        }
        Ok(())
    }

    /// Removes the sandbox's (empty) cgroups, then the run's when no other
    /// sandbox of the run is left in them. A cgroup whose last process just
    /// died can refuse for a moment; it is tried again briefly.
    pub fn remove(&self) {
        for dir in &self.dirs {
            for attempt in 0..50u32 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) if attempt < 49 => {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    Err(e) => eprintln!(
                        "{}cannot remove the cgroup {}: {e}",
                        crate::policy::MESSAGE_PREFIX,
                        dir.display()
                    ),
                }
            }
        }
        for dir in &self.run_dirs {
            // EBUSY (or ENOTEMPTY): another sandbox of the run is still in it,
            // and the last one out removes it.
            let _ = std::fs::remove_dir(dir);
        }
    }

    pub fn plan(&self) -> &Cgroups {
        &self.plan
    }

    /// The process list of the sandbox's own group (every hierarchy holds
    /// the same processes).
    pub fn procs(&self) -> Option<PathBuf> {
        self.dirs.first().map(|dir| dir.join("cgroup.procs"))
    }
}

/// Each hierarchy of the plan: the parent, and what its groups limit.
fn hierarchies(plan: &Cgroups) -> Vec<(PathBuf, Controllers)> {
    match plan {
        Cgroups::V2 { parent } => vec![(parent.clone(), Controllers::Unified)],
        Cgroups::V1 { pids, memory, cpu } => [
            (pids, Controllers::Pids),
            (memory, Controllers::Memory),
            (cpu, Controllers::Cpu),
        ]
        .into_iter()
        .filter_map(|(parent, controllers)| Some((parent.clone()?, controllers)))
        .collect(),
    }
}

/// Writes the limits into `dir` (the same values every time: concurrent
/// launchers of a run write them alike).
fn write_limits(dir: &Path, controllers: Controllers, limits: &Limits) -> io::Result<()> {
    match controllers {
        Controllers::Unified => {
            write(dir, "pids.max", limits.processes)?;
            write(dir, "memory.max", limits.memory_bytes)?;
            if dir.join("memory.swap.max").exists() {
                write(dir, "memory.swap.max", 0)?;
            }
            if dir.join("cpu.weight").exists() {
                write(dir, "cpu.weight", limits.cpu_weight)?;
            }
            Ok(())
        }
        Controllers::Pids => write(dir, "pids.max", limits.processes),
        Controllers::Memory => write(dir, "memory.limit_in_bytes", limits.memory_bytes),
        // cgroup v1's shares: 1024 is v2's weight 100.
        Controllers::Cpu => write(dir, "cpu.shares", (limits.cpu_weight * 1024 / 100).max(2)),
    }
}

fn write(dir: &Path, file: &str, value: u64) -> io::Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, value.to_string()).map_err(|e| {
        // A group removed while its file was opened (another process's
        // clean-up of empty run groups) answers ENODEV: it went away, as
        // NotFound says, and the run's group is made again.
        if e.raw_os_error() == Some(nix::errno::Errno::ENODEV as i32) {
            return io::Error::new(io::ErrorKind::NotFound, format!("{}: {e}", path.display()));
        }
        located(&path, &e)
    })
}

/// `e`, saying where (keeping its kind).
fn located(path: &Path, e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Where this process could make per-sandbox cgroups, if anywhere: its own
/// cgroup in each writable v1 hierarchy (pids, memory, cpu), or, on a v2-only host,
/// `configured` (a delegated cgroup with pids and memory in its
/// subtree_control), else its own cgroup when that is the root.
pub fn detect(configured: Option<&Path>) -> Option<Cgroups> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    if let Some(parent) = configured {
        return v2_usable(parent).then(|| Cgroups::V2 {
            parent: parent.to_path_buf(),
        });
    }
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        // cgroup v2 only: a child of our own cgroup can have controllers only
        // if ours is the root (no processes in inner cgroups).
        let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
        return (path == "/" && v2_usable(root)).then(|| Cgroups::V2 {
            parent: root.to_path_buf(),
        });
    }
    let v1 = |controller: &str| -> Option<PathBuf> {
        let path = own.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_owned())
        })?;
        let dir = root.join(controller).join(path.trim_start_matches('/'));
        writable(&dir).then_some(dir)
    };
    let (pids, memory) = (v1("pids"), v1("memory"));
    (pids.is_some() || memory.is_some()).then(|| Cgroups::V1 {
        pids,
        memory,
        cpu: v1("cpu"),
    })
}

fn v2_usable(dir: &Path) -> bool {
    let controls = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |c: &str| controls.split_whitespace().any(|x| x == c);
    has("pids") && has("memory") && writable(dir)
}

fn writable(dir: &Path) -> bool {
    dir.is_dir() && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Removes the empty cgroups that killed launchers left behind: sandboxes'
/// groups whose launcher is gone, and runs' groups left with none of them.
pub fn remove_leftovers(plan: &Cgroups) -> usize {
    let mut removed = 0;
    for parent in plan.parents() {
        removed += remove_gone_sandboxes(parent);
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let is_run = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(RUN_CGROUP_PREFIX));
            if !is_run {
                continue;
            }
            removed += remove_gone_sandboxes(&entry.path());
            // Refused while a sandbox of the run is in it. An empty one a
            // launcher has just made is made again by that launcher.
            if std::fs::remove_dir(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// Removes the groups in `dir` of sandboxes whose launcher is gone.
fn remove_gone_sandboxes(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            // Only those of launchers that are gone: a live one may not have
            // moved its init in yet.
            let monitor = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(CGROUP_PREFIX)?.parse::<i32>().ok());
            monitor.is_some_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    == Err(nix::errno::Errno::ESRCH)
            })
        })
        .filter(|entry| std::fs::remove_dir(entry.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hierarchy_of_a_plan_limits_its_own_controllers() {
        let v1 = Cgroups::V1 {
            pids: Some("/p".into()),
            memory: None,
            cpu: Some("/c".into()),
        };
        assert_eq!(
            hierarchies(&v1),
            [
                (PathBuf::from("/p"), Controllers::Pids),
                (PathBuf::from("/c"), Controllers::Cpu)
            ]
        );
        let v2 = Cgroups::V2 {
            parent: "/u".into(),
        };
        assert_eq!(
            hierarchies(&v2),
            [(PathBuf::from("/u"), Controllers::Unified)]
        );
    }

    #[test]
    fn limits_are_written_as_the_controllers_name_them() {
        let dir = std::env::temp_dir().join(format!("chorus-cgroup-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let limits = Limits {
            processes: 7,
            memory_bytes: 1 << 20,
            cpu_weight: 50,
            ..Limits::default()
        };
        write_limits(&dir, Controllers::Cpu, &limits).expect("cpu");
        write_limits(&dir, Controllers::Pids, &limits).expect("pids");
        write_limits(&dir, Controllers::Memory, &limits).expect("memory");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("written");
        assert_eq!(read("cpu.shares"), "512");
        assert_eq!(read("pids.max"), "7");
        assert_eq!(read("memory.limit_in_bytes"), "1048576");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
