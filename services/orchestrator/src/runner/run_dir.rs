//! Preparing a run's directory without following anything an agent left in it.
//!
//! The run directory (HOME, TMPDIR, the CLI's working directory, generated
//! files) belongs to the user the run's processes act as, who may change
//! anything inside it — and a resumed run finds the directory as its agent
//! left it. The service, often root, must never write, chmod or chown through
//! a name in it: every step here works relative to the directory's own
//! descriptor, opens with `O_NOFOLLOW`, makes files with `O_EXCL` under names
//! of its own and renames them into place (a rename replaces a symlink, never
//! its target). Only `<runs>/<run id>` itself is reached by path, through the
//! runs directory, which only the service can change.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, unlinkat};

/// What a run directory holds besides what the agent makes.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    /// Directories made (and kept as directories) inside it.
    pub dirs: &'a [&'a str],
    /// A file written fresh on every preparation: its name and content.
    pub file: Option<(&'a str, &'a [u8])>,
}

/// Makes (or, for a resumed run, repairs) `run_dir` as `layout` says, owned by
/// `owner` (None: the service's own user) and readable by nobody else.
///
/// # Errors
/// A step failed; nothing outside the run directory was touched.
pub fn prepare(
    run_dir: &Path,
    owner: Option<(u32, u32)>,
    layout: Layout<'_>,
) -> std::io::Result<()> {
    let (runs, name) = match (run_dir.parent(), run_dir.file_name()) {
        (Some(runs), Some(name)) => (runs, name),
        _ => {
            return Err(std::io::Error::other(format!(
                "{} is not a directory inside a runs directory",
                run_dir.display()
            )));
        }
    };
    // The runs directory is the service's: owner-only from the start.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(runs)?;
    let runs = open_dir_at(None, runs)?;
    let dir = dir_at(&runs, Path::new(name))?;
    hand_over(&dir, owner)?;
    for sub in layout.dirs {
        let sub = dir_at(&dir, Path::new(sub))?;
        hand_over(&sub, owner)?;
    }
    if let Some((file, content)) = layout.file {
        replace_file(&dir, file, content, owner)?;
    }
    Ok(())
}

/// The directory `name` in `parent`, made when missing; anything else under
/// that name (a symlink, a file an agent put there) is removed first.
fn dir_at(parent: &OwnedFd, name: &Path) -> std::io::Result<OwnedFd> {
    for _ in 0..3 {
        match mkdirat(parent, name, Mode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        match open_dir_at(Some(parent), name) {
            Ok(dir) => return Ok(dir),
            // A symlink (ELOOP with O_NOFOLLOW) or a file: not ours to follow.
            Err(e)
                if e.raw_os_error() == Some(Errno::ELOOP as i32)
                    || e.raw_os_error() == Some(Errno::ENOTDIR as i32) =>
            {
                unlinkat(parent, name, UnlinkatFlags::NoRemoveDir)?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} keeps being replaced while the run directory is prepared",
        name.display()
    )))
}

/// Opens a directory without following a symlink in its last component.
fn open_dir_at(parent: Option<&OwnedFd>, name: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match parent {
        Some(parent) => openat(parent, name, flags, Mode::empty()),
        None => openat(nix::fcntl::AT_FDCWD, name, flags, Mode::empty()),
    };
    fd.map_err(std::io::Error::from)
}

/// Gives an open directory to `owner`, mode 0700, by its descriptor.
fn hand_over(dir: &OwnedFd, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    if let Some((uid, gid)) = owner {
        fchown(dir, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    fchmod(dir, Mode::S_IRWXU)?;
    Ok(())
}

/// Writes `content` as `name` in `dir`: into a new file under a name of its
/// own (O_EXCL, so nothing already there is opened), then renamed over
/// whatever `name` is (a symlink is replaced, not followed).
fn replace_file(
    dir: &OwnedFd,
    name: &str,
    content: &[u8],
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let tmp = format!(".{name}.chorus-{}", uuid::Uuid::new_v4().simple());
    let fd = openat(
        dir,
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )?;
    let written = (|| {
        if let Some((uid, gid)) = owner {
            fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
        }
        let mut file = std::fs::File::from(fd);
        file.write_all(content)?;
        file.sync_all()?;
        // A directory an agent made under the name cannot be renamed over.
        if fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
        {
            return Err(std::io::Error::other(format!(
                "{name} in the run directory is a directory, not the file Chorus writes there"
            )));
        }
        renameat(dir, tmp.as_str(), dir, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = unlinkat(dir.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    written
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    const LAYOUT: Layout<'static> = Layout {
        dirs: &["home", "tmp", "work"],
        file: Some(("chorus-instructions.md", b"the system prompt")),
    };

    /// A file outside the run directory an attacker wants overwritten: the
    /// service's (root's) own, mode 0644.
    fn victim(dir: &Path) -> std::path::PathBuf {
        let victim = dir.join("victim.conf");
        std::fs::write(&victim, "original\n").expect("victim");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("mode");
        victim
    }

    #[test]
    fn a_new_run_directory_is_made_owner_only_with_its_file() {
        let runs = tempfile::tempdir().expect("runs");
        let run_dir = runs.path().join("r1");
        prepare(&run_dir, None, LAYOUT).expect("prepare");
        for sub in ["", "home", "tmp", "work"] {
            let meta = std::fs::symlink_metadata(run_dir.join(sub)).expect("dir");
            assert!(meta.is_dir());
            assert_eq!(meta.mode() & 0o777, 0o700, "{sub}");
        }
        let file = run_dir.join("chorus-instructions.md");
        assert_eq!(std::fs::read(&file).expect("file"), b"the system prompt");
        assert_eq!(
            std::fs::metadata(&file).expect("meta").mode() & 0o777,
            0o600
        );
        // Prepared again (a resumed run): the same, no temporary files left.
        prepare(&run_dir, None, LAYOUT).expect("again");
        let names: Vec<_> = std::fs::read_dir(&run_dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        assert_eq!(names.len(), 4, "{names:?}");
    }

    /// The reported attack: the agent replaced its instructions file with a
    /// symlink to a file outside; the resumed run's preparation wrote the
    /// system prompt through it.
    #[test]
    fn a_symlink_left_for_the_generated_file_is_replaced_not_written_through() {
        let outside = tempfile::tempdir().expect("outside");
        let victim = victim(outside.path());
        let runs = tempfile::tempdir().expect("runs");
        let run_dir = runs.path().join("r1");
        prepare(&run_dir, None, LAYOUT).expect("first");
        let planted = run_dir.join("chorus-instructions.md");
        std::fs::remove_file(&planted).expect("remove");
        std::os::unix::fs::symlink(&victim, &planted).expect("plant");

        prepare(&run_dir, None, LAYOUT).expect("resumed");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "original\n",
            "the preparation wrote through the agent's symlink to a file outside"
        );
        let meta = std::fs::symlink_metadata(&planted).expect("meta");
        assert!(meta.is_file(), "the symlink is replaced by the file");
        assert_eq!(std::fs::read(&planted).expect("file"), b"the system prompt");
    }

    /// The agent replaced HOME with a symlink to a directory outside: the
    /// preparation neither chmods nor chowns it, and HOME is a directory again.
    #[test]
    fn a_symlink_left_for_a_directory_is_removed_and_never_followed() {
        let outside = tempfile::tempdir().expect("outside");
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o755))
            .expect("mode");
        let before = std::fs::metadata(outside.path()).expect("meta");
        let runs = tempfile::tempdir().expect("runs");
        let run_dir = runs.path().join("r1");
        prepare(&run_dir, None, LAYOUT).expect("first");
        std::fs::remove_dir(run_dir.join("home")).expect("rmdir");
        std::os::unix::fs::symlink(outside.path(), run_dir.join("home")).expect("plant");
        std::fs::remove_dir(run_dir.join("work")).expect("rmdir work");
        std::fs::write(run_dir.join("work"), "a file where a directory was").expect("file");

        // A root service gives the run directory to the run's user.
        let owner = nix::unistd::geteuid().is_root().then_some((65_534, 65_534));
        prepare(&run_dir, owner, LAYOUT).expect("resumed");
        let after = std::fs::metadata(outside.path()).expect("meta");
        assert_eq!(
            (after.mode(), after.uid(), after.gid()),
            (before.mode(), before.uid(), before.gid()),
            "the directory outside was changed through the agent's symlink"
        );
        for sub in ["home", "work"] {
            let meta = std::fs::symlink_metadata(run_dir.join(sub)).expect("meta");
            assert!(meta.is_dir(), "{sub} is a directory again");
        }
    }
}
