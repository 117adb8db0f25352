//! Runs' ledgers of written bytes, as a service keeps them: a directory per
//! run under one of this user's own (never inside a sandbox), where each
//! sandbox of the run keeps what its processes wrote (see the launcher's
//! `budget` module). Services of one user on one host (an orchestrator and
//! its tool-exec) share it, so a run's limit holds over every call either
//! makes; it outlives a restart, so a resumed run goes on from what it wrote.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a run's ledger is kept after its last change.
pub const KEPT: Duration = Duration::from_secs(24 * 3600);

/// The directory of this user's run ledgers.
#[derive(Debug, Clone)]
pub struct Ledgers {
    dir: PathBuf,
}

impl Ledgers {
    /// `<temp dir>/chorus-written-<uid>`, made owner-only; refused when it is
    /// not this user's own directory (another user could reset or fill a
    /// run's ledger), and then a directory of this process's own is used.
    /// Ledgers of runs unchanged for [`KEPT`] are removed on the way.
    pub fn open() -> Self {
        let uid = nix::unistd::geteuid().as_raw();
        let shared = std::env::temp_dir().join(format!("chorus-written-{uid}"));
        let dir = if own_private_dir(&shared, uid) {
            shared
        } else {
            let private =
                std::env::temp_dir().join(format!("chorus-written-{uid}-{}", std::process::id()));
            let _ = std::fs::DirBuilder::new().mode(0o700).create(&private);
            private
        };
        let ledgers = Self { dir };
        ledgers.remove_old();
        ledgers
    }

    /// A ledger directory for tests.
    pub fn at(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// The ledger of run `run` (a valid run id).
    pub fn of(&self, run: &str) -> PathBuf {
        self.dir.join(run)
    }

    /// Removes the ledgers of runs unchanged for [`KEPT`].
    pub fn remove_old(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.filter_map(Result::ok) {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > KEPT));
            if old {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Makes `dir` if missing; whether it is a directory (not a link) of `uid`'s
/// that no one else may enter.
fn own_private_dir(dir: &Path, uid: u32) -> bool {
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    std::fs::symlink_metadata(dir).is_ok_and(|meta| {
        meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_another_user_could_enter_is_not_used() {
        let base = tempfile::tempdir().expect("dir");
        let uid = nix::unistd::geteuid().as_raw();
        let open = base.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(!own_private_dir(&open, uid));
        let link = base.path().join("link");
        std::os::unix::fs::symlink(base.path(), &link).expect("link");
        assert!(!own_private_dir(&link, uid));
        assert!(own_private_dir(&base.path().join("mine"), uid));
    }

    #[test]
    fn old_ledgers_go_and_recent_ones_stay() {
        let base = tempfile::tempdir().expect("dir");
        let ledgers = Ledgers::at(base.path());
        let (old, new) = (ledgers.of("run-old"), ledgers.of("run-new"));
        std::fs::create_dir(&old).expect("mkdir");
        std::fs::create_dir(&new).expect("mkdir");
        let long_ago = SystemTime::now() - KEPT - Duration::from_secs(60);
        std::fs::File::open(&old)
            .and_then(|f| f.set_modified(long_ago))
            .expect("age it");
        ledgers.remove_old();
        assert!(!old.exists());
        assert!(new.exists());
    }
}
