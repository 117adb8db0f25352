//! The one gate to the filesystem.
//!
//! Every path that arrives in a request goes through [`FileRoot::resolve`], and every
//! file operation goes through a method of [`FileRoot`], which works on a directory
//! handle of the workspace root (cap-std). Resolution is done per path component
//! relative to that handle, so `..`, absolute symlinks, symlinks that lead outside
//! the root and directories swapped for symlinks mid-operation cannot escape: the
//! kernel is asked about each component, not a string prefix.
//!
//! Files are opened for reading non-blocking and checked on the opened handle,
//! so a FIFO or device, even one swapped in between a look and the open, is
//! refused and never waited on. Writes open only new temporary files.
//!
//! Paths shown to agents are always relative to the root ("." for the root itself).

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, FileTypeExt, Metadata, OpenOptions, OpenOptionsExt};

use crate::error::ToolError;
use crate::stop::CallStop;

/// Longest accepted path (bytes), as Linux's PATH_MAX.
const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted path component (bytes), as Linux's NAME_MAX.
const MAX_NAME_BYTES: usize = 255;
/// How much of a file is read between two checks of the call's stop.
const READ_CHUNK_BYTES: u64 = 1024 * 1024;

/// A workspace root opened as a directory handle.
#[derive(Debug)]
pub struct FileRoot {
    /// The root as named in the run token.
    root: PathBuf,
    /// The same root with symlinks resolved, for recognising absolute paths.
    canonical_root: PathBuf,
    dir: Dir,
    /// Who file tools act as (uid, gid), when the service runs as root: the
    /// user the run's processes act as (see [`ActingAs`]). None: the
    /// service's own user.
    owner: Option<(u32, u32)>,
    /// Whether regular files with more than one link may be read.
    hard_links: HardLinks,
}

/// Whether file tools read regular files that have other links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HardLinks {
    /// Refused: a hard link planted in a workspace can name a file that lies
    /// outside it, which the sandbox's path checks never see.
    #[default]
    Refuse,
    /// Read like any file (the operator's choice, for workspaces made with
    /// hard links such as `cp -al` copies).
    Allow,
}

/// A path inside the workspace: relative, normalised, with no `.` or `..`.
/// Empty means the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspacePath(PathBuf);

impl WorkspacePath {
    /// The root itself.
    pub fn root() -> Self {
        Self(PathBuf::new())
    }

    /// Builds a workspace path from a path already known to be relative and
    /// normalised (tests only: real paths come from [`FileRoot::resolve`]).
    #[cfg(test)]
    pub(crate) fn from_relative(rel: PathBuf) -> Self {
        Self(rel)
    }

    /// The path to hand to the directory handle ("." for the root).
    pub fn as_path(&self) -> &Path {
        if self.0.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.0
        }
    }

    pub fn is_root(&self) -> bool {
        self.0.as_os_str().is_empty()
    }

    /// The path as agents see it: relative to the root, "." for the root.
    pub fn display(&self) -> String {
        if self.is_root() {
            ".".to_owned()
        } else {
            self.0.to_string_lossy().into_owned()
        }
    }

    /// The last component, if any.
    pub fn file_name(&self) -> Option<&std::ffi::OsStr> {
        self.0.file_name()
    }

    /// The parent directory (the root for top-level entries).
    pub fn parent(&self) -> WorkspacePath {
        Self(self.0.parent().map(Path::to_path_buf).unwrap_or_default())
    }

    /// A child of this path.
    pub fn join(&self, name: impl AsRef<Path>) -> WorkspacePath {
        Self(self.0.join(name))
    }

    /// True when any component is `.git`: the repository's own files.
    pub fn is_in_git_dir(&self) -> bool {
        self.0.components().any(|c| c.as_os_str() == ".git")
    }
}

/// How [`FileRoot::write_atomic`] treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Fail if the file exists; create missing parent directories.
    CreateNew,
    /// Fail if the file does not exist; replace its content, keeping its permissions.
    Replace,
}

impl FileRoot {
    /// Opens the workspace root. It must be an absolute path to a directory.
    pub fn open(root: &Path) -> Result<Self, ToolError> {
        let unusable = |reason: String| ToolError::WorkspaceUnavailable {
            root: root.to_owned(),
            reason,
        };
        if !root.is_absolute() {
            return Err(unusable("it is not an absolute path".to_owned()));
        }
        let dir = Dir::open_ambient_dir(root, ambient_authority())
            .map_err(|e| unusable(e.to_string()))?;
        let canonical_root = root.canonicalize().map_err(|e| unusable(e.to_string()))?;
        Ok(Self {
            root: root.to_owned(),
            canonical_root,
            dir,
            owner: None,
            hard_links: HardLinks::Refuse,
        })
    }

    /// File tools will act as `uid:gid` (a root service acting for the
    /// workspace's user): see [`FileRoot::act`].
    #[must_use]
    pub fn owned_by(mut self, owner: Option<(u32, u32)>) -> Self {
        self.owner = owner;
        self
    }

    /// Whether files with more than one link are read.
    #[must_use]
    pub fn with_hard_links(mut self, hard_links: HardLinks) -> Self {
        self.hard_links = hard_links;
        self
    }

    /// The calling thread acts as the workspace's user until the result is
    /// dropped: every file operation of a tool runs so.
    ///
    /// # Errors
    /// The switch was refused.
    pub fn act(&self) -> Result<ActingAs, ToolError> {
        ActingAs::user(self.owner)
    }

    /// The root as named in the run token.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root with symlinks resolved; processes (bash, git) run here.
    pub fn canonical_root(&self) -> &Path {
        &self.canonical_root
    }

    /// The directory handle every operation goes through.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Checks a requested path and normalises it to a [`WorkspacePath`].
    ///
    /// Relative paths are taken from the root; absolute paths must lie under the
    /// root. `.` and `..` are resolved lexically and may not climb above the root.
    /// Symlinks are not looked at here: the directory handle refuses any that lead
    /// out when the path is used.
    pub fn resolve(&self, input: &str) -> Result<WorkspacePath, ToolError> {
        let invalid = |reason: &str| ToolError::InvalidPath {
            path: shorten(input),
            reason: reason.to_owned(),
        };
        if input.trim().is_empty() {
            return Err(invalid(
                "the path is empty; use \".\" for the workspace root",
            ));
        }
        if input.contains('\0') {
            return Err(invalid("it contains a NUL byte"));
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(invalid("it is longer than 4096 bytes"));
        }
        let path = Path::new(input);
        let relative = if path.is_absolute() {
            [&self.root, &self.canonical_root]
                .iter()
                .find_map(|root| path.strip_prefix(root).ok())
                .ok_or_else(|| ToolError::OutsideWorkspace {
                    path: shorten(input),
                })?
        } else {
            path
        };
        let mut normal = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::CurDir => {}
                Component::ParentDir => {
                    if !normal.pop() {
                        return Err(ToolError::OutsideWorkspace {
                            path: shorten(input),
                        });
                    }
                }
                Component::Normal(name) => {
                    if name.len() > MAX_NAME_BYTES {
                        return Err(invalid("a path component is longer than 255 bytes"));
                    }
                    normal.push(name);
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::OutsideWorkspace {
                        path: shorten(input),
                    });
                }
            }
        }
        Ok(WorkspacePath(normal))
    }

    /// Resolves a path that the caller means to change: refuses the `.git` directory.
    pub fn resolve_for_write(&self, input: &str) -> Result<WorkspacePath, ToolError> {
        let path = self.resolve(input)?;
        if path.is_in_git_dir() {
            return Err(ToolError::ProtectedPath {
                path: path.display(),
            });
        }
        if path.is_root() {
            return Err(ToolError::IsDirectory {
                path: path.display(),
            });
        }
        Ok(path)
    }

    /// Metadata, following symlinks that stay inside the root.
    pub fn metadata(&self, path: &WorkspacePath) -> Result<Metadata, ToolError> {
        self.dir
            .metadata(path.as_path())
            .map_err(|e| self.fs_error(path, e))
    }

    /// Metadata of the entry itself (a symlink is not followed).
    pub fn symlink_metadata(&self, path: &WorkspacePath) -> Result<Metadata, ToolError> {
        self.dir
            .symlink_metadata(path.as_path())
            .map_err(|e| self.fs_error(path, e))
    }

    /// Opens a regular file for reading, following symlinks that stay inside
    /// the root. Returns the file with the metadata of the open handle.
    pub fn open_file(&self, path: &WorkspacePath) -> Result<(File, Metadata), ToolError> {
        // A look first, so that a FIFO or device named directly is not even
        // opened; the open and the check on its handle below cover an entry
        // swapped meanwhile.
        require_regular_file(path, &self.metadata(path)?)?;
        self.open_for_reading(path, FollowSymlinks::Yes)
    }

    /// Opens a regular file found by a directory walk, for reading: a symlink in
    /// the last component is not followed. Returns the file with the metadata
    /// of the open handle, so the size and type checked are those of the file
    /// actually read.
    pub fn open_walked_file(&self, path: &WorkspacePath) -> Result<(File, Metadata), ToolError> {
        self.open_for_reading(path, FollowSymlinks::No)
    }

    /// Opens `path` so that nothing can block the open, then checks the type of
    /// what was opened, on its handle. O_NONBLOCK: a FIFO opens at once instead
    /// of waiting for a writer, a device does not wait for its line. O_NOCTTY: a
    /// terminal does not become the service's. O_NONBLOCK stays set: a regular
    /// file ignores it, and a file that says it is regular but behaves like a
    /// pipe (`/proc/kmsg`, were procfs mounted inside a workspace) answers
    /// "would block" instead of blocking the read.
    fn open_for_reading(
        &self,
        path: &WorkspacePath,
        follow: FollowSymlinks,
    ) -> Result<(File, Metadata), ToolError> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .follow(follow)
            .nonblock(true)
            .custom_flags(nix::fcntl::OFlag::O_NOCTTY.bits());
        let file = self
            .dir
            .open_with(path.as_path(), &options)
            .map_err(|e| self.fs_error(path, e))?;
        let meta = file.metadata().map_err(|e| self.fs_error(path, e))?;
        require_regular_file(path, &meta)?;
        self.refuse_other_links(path, &meta)?;
        Ok((file, meta))
    }

    /// Refuses a regular file that has other links, unless the operator allows
    /// them: one of them may lie outside the workspace.
    fn refuse_other_links(&self, path: &WorkspacePath, meta: &Metadata) -> Result<(), ToolError> {
        use cap_std::fs::MetadataExt;
        if self.hard_links == HardLinks::Allow || meta.nlink() <= 1 {
            return Ok(());
        }
        Err(ToolError::FailedPrecondition(format!(
            "'{}' has {} hard links, and file tools do not read a file linked from elsewhere (a link can lead outside the workspace); copy it to a file of its own (cp), or have the operator start tool-exec with --allow-hard-links",
            path.display(),
            meta.nlink()
        )))
    }

    /// Opens a directory below the root as its own handle.
    pub fn open_dir(&self, path: &WorkspacePath) -> Result<Dir, ToolError> {
        if path.is_root() {
            return self.dir.try_clone().map_err(|e| self.fs_error(path, e));
        }
        let meta = self.metadata(path)?;
        if !meta.is_dir() {
            return Err(ToolError::NotADirectory {
                path: path.display(),
            });
        }
        self.dir
            .open_dir(path.as_path())
            .map_err(|e| self.fs_error(path, e))
    }

    /// Reads a whole regular file, refusing files over `limit` bytes. Reads in
    /// chunks and stops between them when the call is stopped.
    pub fn read_file(
        &self,
        path: &WorkspacePath,
        limit: u64,
        stop: &CallStop,
    ) -> Result<Vec<u8>, ToolError> {
        use std::io::Read;
        let (file, meta) = self.open_file(path)?;
        let size = meta.len();
        if size > limit {
            return Err(ToolError::TooLarge {
                path: path.display(),
                size,
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // Read at most limit + 1 bytes: a file that grew meanwhile is still refused.
        let mut rest = file.take(limit + 1);
        loop {
            stop.check()?;
            let read = (&mut rest)
                .take(READ_CHUNK_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|e| self.fs_error(path, e))?;
            if read == 0 {
                break;
            }
        }
        if bytes.len() as u64 > limit {
            return Err(ToolError::TooLarge {
                path: path.display(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(bytes)
    }

    /// The workspace-relative form of a real path found by a directory walk under
    /// [`FileRoot::canonical_root`], or `None` when it is not under the root.
    pub fn relative_of(&self, real: &Path) -> Option<WorkspacePath> {
        let rel = real.strip_prefix(&self.canonical_root).ok()?;
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return None;
        }
        Some(WorkspacePath(rel.to_path_buf()))
    }

    /// Maps an I/O error on `path` to the error an agent can act on.
    pub fn fs_error(&self, path: &WorkspacePath, err: io::Error) -> ToolError {
        fs_error(path, err)
    }
}

/// Refuses anything but a regular file: a directory, a FIFO, a socket, a device.
pub(crate) fn require_regular_file(path: &WorkspacePath, meta: &Metadata) -> Result<(), ToolError> {
    if meta.is_dir() {
        return Err(ToolError::IsDirectory {
            path: path.display(),
        });
    }
    if !meta.is_file() {
        return Err(not_a_file(path, meta));
    }
    Ok(())
}

/// The error for an entry that is neither a regular file nor a directory,
/// naming what it is.
pub(crate) fn not_a_file(path: &WorkspacePath, meta: &Metadata) -> ToolError {
    let kind = meta.file_type();
    let kind = if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_symlink() {
        "a symlink"
    } else {
        "a special file"
    };
    ToolError::NotAFile {
        path: path.display(),
        kind,
    }
}

/// Maps an I/O error on `path` to the error an agent can act on.
pub fn fs_error(path: &WorkspacePath, err: io::Error) -> ToolError {
    let shown = path.display();
    let invalid = |reason: &str| ToolError::InvalidPath {
        path: shown.clone(),
        reason: reason.to_owned(),
    };
    match err.raw_os_error() {
        Some(libc_errno::ELOOP) => {
            return invalid("it goes through a symlink loop (too many levels of symbolic links)");
        }
        Some(libc_errno::ENAMETOOLONG) => {
            return invalid("a name in it is too long for the filesystem");
        }
        Some(libc_errno::ENOTDIR) => return invalid("a parent in it is a file, not a directory"),
        Some(libc_errno::EISDIR) => return ToolError::IsDirectory { path: shown },
        Some(libc_errno::EACCES | libc_errno::EPERM) => {
            return ToolError::FailedPrecondition(format!(
                "cannot access '{shown}': permission denied by the filesystem"
            ));
        }
        _ => {}
    }
    match err.kind() {
        io::ErrorKind::NotFound => ToolError::NotFound { path: shown },
        io::ErrorKind::AlreadyExists => ToolError::AlreadyExists { path: shown },
        // cap-std reports a path that would leave the root as PermissionDenied
        // with no OS error number.
        io::ErrorKind::PermissionDenied => ToolError::OutsideWorkspace { path: shown },
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => invalid(&err.to_string()),
        // Files are opened non-blocking: one that behaves like a pipe says so.
        io::ErrorKind::WouldBlock => ToolError::FailedPrecondition(format!(
            "'{shown}' has no data to read now: it behaves like a pipe or a device, not a \
             regular file; read it with bash if you must"
        )),
        _ => ToolError::io(format!("accessing '{shown}'"), err),
    }
}

/// errno values used above (Linux).
mod libc_errno {
    pub const EPERM: i32 = nix::errno::Errno::EPERM as i32;
    pub const EACCES: i32 = nix::errno::Errno::EACCES as i32;
    pub const ELOOP: i32 = nix::errno::Errno::ELOOP as i32;
    pub const ENAMETOOLONG: i32 = nix::errno::Errno::ENAMETOOLONG as i32;
    pub const ENOTDIR: i32 = nix::errno::Errno::ENOTDIR as i32;
    pub const EISDIR: i32 = nix::errno::Errno::EISDIR as i32;
}

fn shorten(input: &str) -> String {
    const SHOWN: usize = 200;
    if input.len() <= SHOWN {
        return input.replace('\0', "\\0");
    }
    let cut = (0..=SHOWN)
        .rev()
        .find(|i| input.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}...", input[..cut].replace('\0', "\\0"))
}

mod identity;
mod write;

pub use identity::{ActingAs, drop_supplementary_groups};

#[cfg(test)]
mod tests;
