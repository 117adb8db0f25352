//! The file system a sandbox sees: a new root built on an empty tmpfs, holding
//! only
//!
//! - the system directories (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`) read-only,
//!   with the host's secrets in `/etc` (shadow files, sudoers, SSH host keys,
//!   TLS private keys) covered;
//! - a private `/tmp`, a minimal `/dev` (null, zero, full, random, urandom, tty,
//!   a new pts instance, shm) and a `/proc` of the sandbox's own PID namespace;
//! - the policy's read-write and read-only paths, at the same paths as on the
//!   host.
//!
//! Nothing else exists in it: not the service's data directory, not other
//! workspaces, not `/root` or `/home`, not other processes. Every source is
//! opened before anything is mounted, and bound from its descriptor, so the
//! staging tmpfs (mounted over `/tmp` in this mount namespace only) hides no
//! source. After `pivot_root` the old root is detached and the new one made
//! read-only.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::Mode;
use nix::unistd::{chdir, pivot_root};

use crate::policy::Policy;

/// System directories every sandbox sees read-only (or as the symlinks they are).
const SYSTEM: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// Files of `/etc` covered by an empty file.
const SECRET_FILES: [&str; 5] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
];
/// Directories of `/etc` covered by an empty directory.
const SECRET_DIRS: [&str; 2] = ["/etc/sudoers.d", "/etc/ssl/private"];
/// Entries of `/etc` that are often symlinks to files elsewhere (`/run`), which
/// are made visible read-only.
const LINKED_FILES: [&str; 3] = ["/etc/resolv.conf", "/etc/hosts", "/etc/localtime"];
/// Device nodes bound from the host.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// Where the new root is assembled (covered in this mount namespace only).
const STAGES: [&str; 2] = ["/tmp", "/mnt"];

/// How a bound path may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    ReadOnly,
    ReadWrite,
    Device,
}

#[derive(Debug)]
enum Entry {
    Symlink {
        target: PathBuf,
    },
    Bind {
        source: OwnedFd,
        is_dir: bool,
        access: Access,
    },
    Tmpfs {
        options: String,
        read_only: bool,
    },
    Proc,
    Devpts,
    /// An existing file of a bound path, covered read-only by `content`.
    Cover {
        content: String,
    },
}

/// Builds the view and moves this process's root into it.
pub fn build(policy: &Policy) -> Result<(), String> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    let plan = plan(policy)?;
    let stage = STAGES
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .ok_or("neither /tmp nor /mnt exists to assemble the view in")?;
    mount(
        Some("tmpfs"),
        stage,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=4m"),
    )
    .map_err(|e| format!("cannot mount the new root: {e}"))?;
    for (dest, entry) in &plan {
        place(stage, dest, entry).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    chdir(stage).map_err(|e| format!("cannot enter the new root: {e}"))?;
    pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("cannot detach the old root: {e}"))?;
    chdir("/").map_err(|e| format!("cannot enter the new root: {e}"))?;
    set_attributes(Path::new("/"), MOUNT_ATTR_RDONLY, false)
        .map_err(|e| format!("cannot make the new root read-only: {e}"))
}

/// Every entry of the view, parents before what they contain.
fn plan(policy: &Policy) -> Result<Vec<(PathBuf, Entry)>, String> {
    let mut plan = system_entries()?;
    plan.extend(secret_covers()?);
    plan.extend(dev_entries());
    plan.extend(scratch_entries(policy));
    plan.extend(policy_entries(policy)?);
    plan.extend(policy_covers(policy)?);
    // Parents before children; the order within a depth is kept.
    plan.sort_by_key(|(dest, _)| dest.components().count());
    Ok(plan)
}

fn open_path(path: &Path) -> Result<OwnedFd, String> {
    nix::fcntl::open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// A read-only bind of the file or directory at `source`.
fn read_only(source: OwnedFd, is_dir: bool) -> Entry {
    Entry::Bind {
        source,
        is_dir,
        access: Access::ReadOnly,
    }
}

fn tmpfs(options: String, read_only: bool) -> Entry {
    Entry::Tmpfs { options, read_only }
}

/// The system directories read-only (or as the symlinks they are), and the
/// files of `/etc` that link outside them.
fn system_entries() -> Result<Vec<(PathBuf, Entry)>, String> {
    let mut entries = Vec::new();
    for dir in SYSTEM {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(path)
                    .map_err(|e| format!("cannot read the link {dir}: {e}"))?;
                entries.push((path.into(), Entry::Symlink { target }));
            }
            Ok(meta) if meta.is_dir() => {
                entries.push((path.into(), read_only(open_path(path)?, true)));
            }
            _ => {}
        }
    }
    for file in LINKED_FILES {
        let Ok(target) = std::fs::canonicalize(file) else {
            continue;
        };
        if !under_any(&target, &SYSTEM) && target.is_file() {
            let source = open_path(&target)?;
            entries.push((target, read_only(source, false)));
        }
    }
    Ok(entries)
}

/// The host's secrets in `/etc`: files covered by `/dev/null`, directories by
/// an empty read-only tmpfs.
fn secret_covers() -> Result<Vec<(PathBuf, Entry)>, String> {
    let null = Path::new("/dev/null");
    let mut entries = Vec::new();
    let files = SECRET_FILES
        .iter()
        .map(PathBuf::from)
        .filter(|f| f.is_file())
        .chain(ssh_host_keys());
    for file in files {
        entries.push((file, read_only(open_path(null)?, false)));
    }
    for dir in SECRET_DIRS {
        if Path::new(dir).is_dir() {
            entries.push((dir.into(), tmpfs("mode=0755,size=4k".to_owned(), true)));
        }
    }
    Ok(entries)
}

/// A minimal `/dev`: a few host devices, the usual links, a new pts instance.
fn dev_entries() -> Vec<(PathBuf, Entry)> {
    let mut entries = vec![("/dev".into(), tmpfs("mode=0755,size=64k".to_owned(), false))];
    for device in DEVICES {
        let path = Path::new("/dev").join(device);
        if let Ok(source) = open_path(&path) {
            let entry = Entry::Bind {
                source,
                is_dir: false,
                access: Access::Device,
            };
            entries.push((path, entry));
        }
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        let link = Entry::Symlink {
            target: target.into(),
        };
        entries.push((Path::new("/dev").join(name), link));
    }
    entries.push(("/dev/pts".into(), Entry::Devpts));
    entries
}

/// `/proc` of the sandbox's PID namespace, and private `/tmp` and `/dev/shm`.
fn scratch_entries(policy: &Policy) -> Vec<(PathBuf, Entry)> {
    let scratch = || tmpfs(format!("mode=1777,size={}", policy.limits.tmp_bytes), false);
    vec![
        ("/dev/shm".into(), scratch()),
        ("/proc".into(), Entry::Proc),
        ("/tmp".into(), scratch()),
    ]
}

/// The policy's read-write and read-only paths, at their real paths.
fn policy_entries(policy: &Policy) -> Result<Vec<(PathBuf, Entry)>, String> {
    let mut entries = Vec::new();
    for (paths, access) in [
        (&policy.read_write, Access::ReadWrite),
        (&policy.read_only, Access::ReadOnly),
    ] {
        for path in paths {
            let real = std::fs::canonicalize(path)
                .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
            if real == Path::new("/") {
                return Err(format!(
                    "{} is the whole file system; name a directory below /",
                    path.display()
                ));
            }
            if access == Access::ReadOnly && under_any(&real, &SYSTEM) {
                continue;
            }
            let entry = Entry::Bind {
                source: open_path(&real)?,
                is_dir: real.is_dir(),
                access,
            };
            entries.push((real, entry));
        }
    }
    Ok(entries)
}

/// The policy's covers, each of a file inside one of its paths.
fn policy_covers(policy: &Policy) -> Result<Vec<(PathBuf, Entry)>, String> {
    let mut entries = Vec::new();
    for cover in &policy.covers {
        let (Some(parent), Some(name)) = (cover.path.parent(), cover.path.file_name()) else {
            return Err(format!(
                "cannot cover {}: not a file path",
                cover.path.display()
            ));
        };
        let real = std::fs::canonicalize(parent)
            .map_err(|e| format!("cannot resolve {}: {e}", parent.display()))?
            .join(name);
        let visible = policy
            .read_write
            .iter()
            .chain(&policy.read_only)
            .any(|p| std::fs::canonicalize(p).is_ok_and(|p| real.starts_with(&p) && real != p));
        if !visible {
            return Err(format!(
                "cannot cover {}: it is not inside a path of the sandbox",
                cover.path.display()
            ));
        }
        let content = cover.content.clone();
        entries.push((real, Entry::Cover { content }));
    }
    Ok(entries)
}

/// The SSH host private keys in `/etc/ssh`.
fn ssh_host_keys() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc/ssh") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("ssh_host_") && !n.ends_with(".pub")) && p.is_file()
        })
        .collect()
}

fn under_any(path: &Path, dirs: &[&str]) -> bool {
    dirs.iter().any(|d| path.starts_with(d))
}

/// Puts one entry at `dest` inside the view assembled at `stage`.
fn place(stage: &Path, dest: &Path, entry: &Entry) -> Result<(), String> {
    let relative: PathBuf = dest
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let target = stage.join(&relative);
    match entry {
        Entry::Symlink { target: link } => {
            if let Some(parent) = relative.parent() {
                ensure_dir(stage, parent)?;
            }
            std::os::unix::fs::symlink(link, &target).map_err(|e| e.to_string())
        }
        Entry::Bind {
            source,
            is_dir,
            access,
        } => bind(stage, &relative, source, *is_dir, *access),
        Entry::Tmpfs { options, read_only } => {
            ensure_dir(stage, &relative)?;
            mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(options.as_str()),
            )
            .map_err(|e| format!("cannot mount a tmpfs: {e}"))?;
            if *read_only {
                set_attributes(&target, MOUNT_ATTR_RDONLY, false)
                    .map_err(|e| format!("cannot make it read-only: {e}"))?;
            }
            Ok(())
        }
        Entry::Cover { content } => cover(stage, &target, content),
        Entry::Proc => {
            ensure_dir(stage, &relative)?;
            mount(
                Some("proc"),
                &target,
                Some("proc"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(|e| format!("cannot mount proc: {e}"))
        }
        Entry::Devpts => {
            ensure_dir(stage, &relative)?;
            mount(
                Some("devpts"),
                &target,
                Some("devpts"),
                MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
                Some("newinstance,ptmxmode=0666,mode=0620"),
            )
            .map_err(|e| format!("cannot mount devpts: {e}"))
        }
    }
}

/// Binds `source` at `relative` below `stage`, with the mount flags of `access`.
fn bind(
    stage: &Path,
    relative: &Path,
    source: &OwnedFd,
    is_dir: bool,
    access: Access,
) -> Result<(), String> {
    if is_dir {
        ensure_dir(stage, relative)?;
    } else {
        ensure_file(stage, relative)?;
    }
    let target = stage.join(relative);
    let from = format!("/proc/self/fd/{}", source.as_raw_fd());
    mount(
        Some(from.as_str()),
        &target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("cannot bind: {e}"))?;
    let attributes = match access {
        Access::ReadOnly => MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Access::ReadWrite => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Access::Device => MOUNT_ATTR_NOSUID,
    };
    set_attributes(&target, attributes, true).map_err(|e| format!("cannot restrict the mount: {e}"))
}

/// Covers the existing regular file `target` (inside a bound path of the view
/// at `stage`) with `content`, read-only. The file is reached without any
/// symlink (the bound path is the program's to change: a link there could
/// lead anywhere), and the mount is made on the descriptor of the file that
/// was checked.
fn cover(stage: &Path, target: &Path, content: &str) -> Result<(), String> {
    use nix::fcntl::{OpenHow, ResolveFlag, openat2};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let file = openat2(nix::fcntl::AT_FDCWD, target, how)
        .map_err(|e| format!("cannot open the file to cover: {e}"))?;
    let stat = nix::sys::stat::fstat(&file).map_err(|e| format!("cannot read it: {e}"))?;
    if nix::sys::stat::SFlag::from_bits_truncate(stat.st_mode) & nix::sys::stat::SFlag::S_IFMT
        != nix::sys::stat::SFlag::S_IFREG
    {
        return Err("it is not a regular file (a symlink is never followed here)".to_owned());
    }
    // The content, in a file of the staging tmpfs that is gone once bound.
    let source = stage.join(format!(".cover-{}", file.as_raw_fd()));
    std::fs::write(&source, content).map_err(|e| format!("cannot stage the content: {e}"))?;
    std::fs::set_permissions(&source, std::os::unix::fs::PermissionsExt::from_mode(0o444))
        .map_err(|e| format!("cannot stage the content: {e}"))?;
    let on = format!("/proc/self/fd/{}", file.as_raw_fd());
    let bound = mount(
        Some(&source),
        on.as_str(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("cannot bind: {e}"));
    let _ = std::fs::remove_file(&source);
    bound?;
    set_attributes(
        target,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
    )
    .map_err(|e| format!("cannot make it read-only: {e}"))
}

/// Makes the directories of `relative` below `stage`, refusing to go through
/// anything that is not a directory (a symlink of the view could lead out of it).
fn ensure_dir(stage: &Path, relative: &Path) -> Result<(), String> {
    let mut at = stage.to_path_buf();
    for part in relative.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "cannot make the mount point: {} is not a directory",
                    at.display()
                ));
            }
            Err(_) => {
                std::fs::create_dir(&at)
                    .map_err(|e| format!("cannot make the mount point {}: {e}", at.display()))?;
            }
        }
    }
    Ok(())
}

/// Makes an empty file at `relative` (its parents included) as a mount point.
fn ensure_file(stage: &Path, relative: &Path) -> Result<(), String> {
    if let Some(parent) = relative.parent() {
        ensure_dir(stage, parent)?;
    }
    let at = stage.join(relative);
    match std::fs::symlink_metadata(&at) {
        Ok(meta) if meta.is_file() || meta.file_type().is_char_device() => Ok(()),
        Ok(_) => Err(format!(
            "cannot make the mount point: {} is not a file",
            at.display()
        )),
        Err(_) => std::fs::File::create(&at)
            .map(drop)
            .map_err(|e| format!("cannot make the mount point {}: {e}", at.display())),
    }
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Sets mount attributes on the mount at `path` (and every mount below it when
/// `recursive`), keeping the others: mount_setattr(2), which, unlike a
/// remount, reaches submounts and never clears a flag the kernel locked.
fn set_attributes(path: &Path, attributes: u64, recursive: bool) -> std::io::Result<()> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = nix::libc::AT_SYMLINK_NOFOLLOW;
    if recursive {
        flags |= nix::libc::AT_RECURSIVE;
    }
    // SAFETY: `path` is a NUL-terminated string and `attr` a live struct of the
    // size passed; the kernel only reads both.
    #[allow(unsafe_code)]
    let done = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_mount_setattr,
            nix::libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<MountAttr>(),
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_system_directories_are_recognised() {
        assert!(under_any(Path::new("/usr/local/bin/x"), &SYSTEM));
        assert!(under_any(Path::new("/etc"), &SYSTEM));
        assert!(!under_any(Path::new("/usr2/x"), &SYSTEM));
        assert!(!under_any(Path::new("/root/.cache"), &SYSTEM));
    }

    #[test]
    fn mount_points_are_never_made_through_a_symlink() {
        let stage = tempfile::tempdir().expect("stage");
        std::os::unix::fs::symlink("/", stage.path().join("escape")).expect("link");
        let err = ensure_dir(stage.path(), Path::new("escape/x")).expect_err("refused");
        assert!(err.contains("is not a directory"), "{err}");
        ensure_dir(stage.path(), Path::new("a/b/c")).expect("made");
        assert!(stage.path().join("a/b/c").is_dir());
        ensure_file(stage.path(), Path::new("a/f")).expect("file");
        assert!(stage.path().join("a/f").is_file());
        assert!(ensure_file(stage.path(), Path::new("a/b")).is_err());
    }
}
