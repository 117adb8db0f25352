//! Fences, as a service keeps them: one file per fence in a directory of the
//! service's own (never inside a sandbox), holding the time until which the
//! processes started with it may run (see the launcher's `fence` module). The
//! service moves it forward while it can prove it still holds what the
//! processes work for; the launcher kills them once it has not.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A directory of fences.
#[derive(Debug)]
pub struct Fences {
    dir: PathBuf,
}

impl Fences {
    /// Makes `dir` (owner-only) for this process's fences; it must be its own
    /// (a process that shared it could keep another's processes alive).
    ///
    /// # Errors
    /// The directory cannot be made.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The file of fence `name` (letters, digits, '-' and '_').
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Moves fence `name` to `until_ms` (milliseconds since the Unix epoch):
    /// written beside it and renamed over it, so a launcher reads the old
    /// time or the new one, never half of one.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn set(&self, name: &str, until_ms: i64) -> std::io::Result<()> {
        let tmp = self.dir.join(format!(".{name}.{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(until_ms.to_string().as_bytes())?;
        drop(file);
        std::fs::rename(&tmp, self.path(name))
    }

    /// Takes fence `name` down: its processes stop at the launcher's next look.
    pub fn remove(&self, name: &str) {
        let _ = std::fs::remove_file(self.path(name));
    }

    /// Removes the directory and every fence in it.
    pub fn remove_all(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Fences {
    /// The fences go with the service that keeps them (whatever still watches
    /// one stops): a directory per process start is not left behind.
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// The directory for this process's fences: `<temp dir>/chorus-fence-<kind>-<pid>-<id>`.
/// The directories that processes of `kind` which are gone left (killed before
/// they could remove theirs) are removed on the way.
pub fn dir_for(kind: &str, id: &str) -> PathBuf {
    let base = std::env::temp_dir();
    let prefix = format!("chorus-fence-{kind}-");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            let gone = rest
                .split('-')
                .next()
                .and_then(|pid| pid.parse::<i32>().ok())
                .is_some_and(|pid| {
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                        == Err(nix::errno::Errno::ESRCH)
                });
            if gone {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    base.join(format!("{prefix}{}-{id}", std::process::id()))
}

/// Now, in milliseconds since the Unix epoch (the clock fences are read by).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
