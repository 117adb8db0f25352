//! Owner-only files and directories. What the orchestrator keeps — the data
//! directory, the SQLite database and its `-wal`/`-shm` files, the secrets key —
//! is readable by the service's user alone: made so when created, and tightened
//! at start when an earlier version or an operator left it open.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use tracing::{info, warn};

/// What [`tighten`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tightened {
    /// Group and others had no access already.
    Private,
    /// Their access was removed: the modes before and after.
    Changed { from: u32, to: u32 },
    /// Group or others have access, but the path belongs to another user
    /// (`owner`), so it was left alone.
    NotOwned { owner: u32, mode: u32 },
}

/// Removes every group and other permission of `path` (a directory 0755
/// becomes 0700, a file 0644 becomes 0600) when the service's user owns it.
/// A directory others may only search (0711: pass through, never list or
/// read; see [`open_for_search`]) is private already.
///
/// # Errors
/// `path` cannot be read or changed.
pub fn tighten(path: &Path) -> io::Result<Tightened> {
    let meta = std::fs::metadata(path)?;
    let mode = meta.mode() & 0o7777;
    let open = if meta.is_dir() { 0o066 } else { 0o077 };
    if mode & open == 0 {
        return Ok(Tightened::Private);
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Ok(Tightened::NotOwned {
            owner: meta.uid(),
            mode,
        });
    }
    let to = mode & !0o077;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(to))?;
    Ok(Tightened::Changed { from: mode, to })
}

/// [`tighten`], logging what it changed, or why it could not (`what` names
/// the path in the log: "data directory", "database file", ...).
pub fn tighten_logged(path: &Path, what: &str) {
    match tighten(path) {
        Ok(Tightened::Private) => {}
        Ok(Tightened::Changed { from, to }) => info!(
            path = %path.display(),
            "{what} was readable by others (mode {from:04o}); made it owner-only ({to:04o})"
        ),
        Ok(Tightened::NotOwned { owner, mode }) => warn!(
            path = %path.display(),
            "{what} is readable by others (mode {mode:04o}) and belongs to uid {owner}, not to this service's user, so it was left as it is; make it owner-only (chmod go= {})",
            path.display()
        ),
        Err(e) => warn!(
            path = %path.display(),
            error = %e,
            "cannot make the {what} owner-only; make it so (chmod go= {})",
            path.display()
        ),
    }
}

/// Creates `dir` and its missing parents owner-only (0700); an existing one
/// is left as it is.
///
/// # Errors
/// `dir` cannot be created.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The data directory at start: created owner-only when missing, tightened
/// (and logged) when it exists and group or others can use it.
///
/// # Errors
/// It cannot be created.
pub fn secure_data_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        tighten_logged(dir, "data directory");
        return Ok(());
    }
    create_dir(dir)
}

/// Lets other users search (never list or read) `dir` and each of its
/// parents this service's user owns: a root service's landlock-tier
/// sandboxes run as the workspace's owner and reach their run directory
/// through the host's own directories, so each must let that user pass.
/// Everything inside stays owner-only (the run directories belong to their
/// run's user, 0700). `dir` is made first when missing. Returns the
/// directories changed.
///
/// # Errors
/// `dir` cannot be made, or a directory changed.
pub fn open_for_search(dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
    create_dir(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    let mut changed = Vec::new();
    for at in dir.ancestors() {
        let Ok(meta) = std::fs::metadata(at) else {
            break;
        };
        if meta.uid() != me {
            break;
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o011 != 0o011 {
            std::fs::set_permissions(at, std::fs::Permissions::from_mode(mode | 0o011))?;
            changed.push(at.to_path_buf());
        }
    }
    Ok(changed)
}

/// Why this process may not use `path` (its data directory, or a file in
/// it), when the reason is who owns what: the first of `path` and its
/// parents it cannot enter or use, its owner and mode, this process's uid,
/// and the two ways out. None when it may use it, or it is missing.
pub fn denied(path: &Path) -> Option<String> {
    use nix::unistd::{AccessFlags, access};
    let me = nix::unistd::geteuid().as_raw();
    let mut chain: Vec<&Path> = path.ancestors().collect();
    chain.reverse();
    for at in chain {
        let Ok(meta) = std::fs::metadata(at) else {
            return None;
        };
        let need = if at == path {
            // Read and entered: a read-only data directory is fine when
            // what is written lies elsewhere.
            if meta.is_dir() {
                AccessFlags::R_OK | AccessFlags::X_OK
            } else {
                AccessFlags::R_OK
            }
        } else {
            AccessFlags::X_OK
        };
        if access(at, need).is_ok() {
            continue;
        }
        let (owner, mode) = (meta.uid(), meta.mode() & 0o7777);
        return Some(format!(
            "{} belongs to uid {owner} (mode {mode:04o}) and this process runs as uid {me}, which may not {}: run the service as uid {owner} (podman/docker run --user {owner}; Kubernetes securityContext.runAsUser: {owner}), or give the directory to uid {me} (chown -R {me} {}; for a podman volume, podman unshare chown -R {me} on its path; in Kubernetes, securityContext.fsGroup)",
            at.display(),
            if at == path { "use it" } else { "enter it" },
            at.display()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("exists").mode() & 0o7777
    }

    #[test]
    fn group_and_others_lose_their_access_and_the_owner_keeps_it() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("chorus.db");
        std::fs::write(&file, "x").expect("file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(
            tighten(&file).expect("tighten"),
            Tightened::Changed {
                from: 0o644,
                to: 0o600
            }
        );
        assert_eq!(mode(&file), 0o600);
        assert_eq!(tighten(&file).expect("again"), Tightened::Private);

        let sub = dir.path().join("data");
        std::fs::create_dir(&sub).expect("dir");
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        secure_data_dir(&sub).expect("secure");
        assert_eq!(mode(&sub), 0o700);
    }

    #[test]
    fn directories_others_may_only_search_stay_so_and_their_files_private() {
        let top = tempfile::tempdir().expect("dir");
        let data = top.path().join("data");
        create_dir(&data).expect("data");
        let runs = data.join("runs");
        let changed = open_for_search(&runs).expect("open for search");
        assert!(
            changed.contains(&runs) && changed.contains(&data),
            "{changed:?}"
        );
        assert_eq!(mode(&runs), 0o711);
        assert_eq!(mode(&data), 0o711);
        // A restart's tightening leaves them passable.
        secure_data_dir(&data).expect("secure");
        assert_eq!(tighten(&runs).expect("tighten"), Tightened::Private);
        assert_eq!(mode(&data), 0o711);
        // Opened for reading, a directory is made owner-only again.
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        secure_data_dir(&data).expect("secure");
        assert_eq!(mode(&data), 0o700);
        assert!(open_for_search(&runs).expect("again").contains(&data));
    }

    #[test]
    fn a_directory_this_user_may_use_or_that_is_missing_needs_no_explanation() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(denied(dir.path()), None);
        assert_eq!(denied(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_new_directory_and_its_parents_are_owner_only() {
        let dir = tempfile::tempdir().expect("dir");
        let deep = dir.path().join("a").join("b");
        create_dir(&deep).expect("create");
        assert_eq!(mode(&deep), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
    }
}
