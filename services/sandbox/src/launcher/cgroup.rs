//! Per-sandbox control groups: processes and memory counted for the sandbox
//! alone (an rlimit on processes counts every process of the user).
//!
//! The monitor makes `chorus-sandbox-<its pid>` in each parent of the plan and
//! writes the limits; init moves itself in before it starts anything, so every
//! process of the sandbox is inside; the monitor removes the groups once init is
//! gone (the kernel has then killed every process of the namespace).

use std::io;
use std::path::{Path, PathBuf};

use crate::policy::{CGROUP_PREFIX, Cgroups, Limits};

/// The cgroups of one sandbox.
#[derive(Debug)]
pub struct Created {
    plan: Cgroups,
    dirs: Vec<PathBuf>,
}

impl Created {
    /// Makes the sandbox's cgroups and writes its limits.
    pub fn make(plan: &Cgroups, limits: &Limits) -> io::Result<Self> {
        let name = format!("{CGROUP_PREFIX}{}", std::process::id());
        let mut created = Self {
            plan: plan.clone(),
            dirs: Vec::new(),
        };
        let result = (|| {
            match plan {
                Cgroups::V2 { parent } => {
                    let dir = created.make_dir(parent, &name)?;
                    write(&dir, "pids.max", limits.processes)?;
                    write(&dir, "memory.max", limits.memory_bytes)?;
                    if dir.join("memory.swap.max").exists() {
                        write(&dir, "memory.swap.max", 0)?;
                    }
                }
                Cgroups::V1 { pids, memory } => {
                    if let Some(parent) = pids {
                        let dir = created.make_dir(parent, &name)?;
                        write(&dir, "pids.max", limits.processes)?;
                    }
                    if let Some(parent) = memory {
                        let dir = created.make_dir(parent, &name)?;
                        write(&dir, "memory.limit_in_bytes", limits.memory_bytes)?;
                    }
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(created),
            Err(e) => {
                created.remove();
                Err(e)
            }
        }
    }

    fn make_dir(&mut self, parent: &Path, name: &str) -> io::Result<PathBuf> {
        let dir = parent.join(name);
        if let Err(e) = std::fs::create_dir(&dir) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
            }
            // Left by a launcher that had this pid and was killed: empty, so
            // it can go.
            std::fs::remove_dir(&dir)?;
            std::fs::create_dir(&dir)?;
        }
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    /// Moves the calling process into every cgroup of the sandbox.
    pub fn join_self(&self) -> io::Result<()> {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), "0")
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// Removes the (empty) cgroups. A cgroup whose last process just died can
    /// refuse for a moment; it is tried again briefly.
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
    }

    pub fn plan(&self) -> &Cgroups {
        &self.plan
    }
}

fn write(dir: &Path, file: &str, value: u64) -> io::Result<()> {
    std::fs::write(dir.join(file), value.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{}/{file}: {e}", dir.display())))
}

/// Where this process could make per-sandbox cgroups, if anywhere: its own
/// cgroup in each writable v1 hierarchy (pids, memory), or, on a v2-only host,
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
    (pids.is_some() || memory.is_some()).then_some(Cgroups::V1 { pids, memory })
}

fn v2_usable(dir: &Path) -> bool {
    let controls = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |c: &str| controls.split_whitespace().any(|x| x == c);
    has("pids") && has("memory") && writable(dir)
}

fn writable(dir: &Path) -> bool {
    dir.is_dir() && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Removes the empty per-sandbox cgroups that killed launchers left behind.
pub fn remove_leftovers(plan: &Cgroups) -> usize {
    let mut removed = 0;
    for parent in plan.parents() {
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            // Only those of launchers that are gone: a live one may not have
            // moved its init in yet.
            let monitor = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(CGROUP_PREFIX)?.parse::<i32>().ok());
            let gone = monitor.is_some_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    == Err(nix::errno::Errno::ESRCH)
            });
            if gone && std::fs::remove_dir(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}
