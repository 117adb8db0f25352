//! The one gate to the filesystem.
//!
//! Every path that arrives in a request goes through [`Sandbox::resolve`], and every
//! file operation goes through a method of [`Sandbox`], which works on a directory
//! handle of the workspace root (cap-std). Resolution is done per path component
//! relative to that handle, so `..`, absolute symlinks, symlinks that lead outside
//! the root and directories swapped for symlinks mid-operation cannot escape: the
//! kernel is asked about each component, not a string prefix.
//!
//! Paths shown to agents are always relative to the root ("." for the root itself).

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, OpenOptions};

use crate::error::ToolError;

/// Longest accepted path (bytes), as Linux's PATH_MAX.
const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted path component (bytes), as Linux's NAME_MAX.
const MAX_NAME_BYTES: usize = 255;

/// A workspace root opened as a directory handle.
#[derive(Debug)]
pub struct Sandbox {
    /// The root as named in the run token.
    root: PathBuf,
    /// The same root with symlinks resolved, for recognising absolute paths.
    canonical_root: PathBuf,
    dir: Dir,
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
    /// normalised (tests only: real paths come from [`Sandbox::resolve`]).
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

/// How [`Sandbox::write_atomic`] treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Fail if the file exists; create missing parent directories.
    CreateNew,
    /// Fail if the file does not exist; replace its content, keeping its permissions.
    Replace,
}

impl Sandbox {
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
        })
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

    /// Opens a regular file for reading.
    pub fn open_file(&self, path: &WorkspacePath) -> Result<File, ToolError> {
        // Look before opening: opening a FIFO for reading would block until a
        // writer appears. The check after opening covers an entry swapped meanwhile.
        let meta = self.metadata(path)?;
        if meta.is_dir() {
            return Err(ToolError::IsDirectory {
                path: path.display(),
            });
        }
        if !meta.is_file() {
            return Err(ToolError::NotAFile {
                path: path.display(),
            });
        }
        let file = self
            .dir
            .open(path.as_path())
            .map_err(|e| self.fs_error(path, e))?;
        let meta = file.metadata().map_err(|e| self.fs_error(path, e))?;
        if meta.is_dir() {
            return Err(ToolError::IsDirectory {
                path: path.display(),
            });
        }
        if !meta.is_file() {
            return Err(ToolError::NotAFile {
                path: path.display(),
            });
        }
        Ok(file)
    }

    /// Opens a regular file found by a directory walk, for reading: a symlink in
    /// the last component is not followed and a FIFO or device cannot block the
    /// caller. Returns the file with the metadata of the open handle, so the
    /// size and type checked are those of the file actually read.
    pub fn open_walked_file(&self, path: &WorkspacePath) -> Result<(File, Metadata), ToolError> {
        use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No).nonblock(true);
        let file = self
            .dir
            .open_with(path.as_path(), &options)
            .map_err(|e| self.fs_error(path, e))?;
        let meta = file.metadata().map_err(|e| self.fs_error(path, e))?;
        if !meta.is_file() {
            return Err(ToolError::NotAFile {
                path: path.display(),
            });
        }
        Ok((file, meta))
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

    /// Reads a whole regular file, refusing files over `limit` bytes.
    pub fn read_file(&self, path: &WorkspacePath, limit: u64) -> Result<Vec<u8>, ToolError> {
        use std::io::Read;
        let file = self.open_file(path)?;
        let size = file.metadata().map_err(|e| self.fs_error(path, e))?.len();
        if size > limit {
            return Err(ToolError::TooLarge {
                path: path.display(),
                size,
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // Read at most limit + 1 bytes: a file that grew meanwhile is still refused.
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.fs_error(path, e))?;
        if bytes.len() as u64 > limit {
            return Err(ToolError::TooLarge {
                path: path.display(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(bytes)
    }

    /// Writes `content` so that readers see the old file or the new one, never a
    /// half-written one: the bytes go to a temporary file in the same directory,
    /// which is then renamed (Replace) or linked (CreateNew) into place.
    pub fn write_atomic(
        &self,
        path: &WorkspacePath,
        content: &[u8],
        mode: WriteMode,
    ) -> Result<(), ToolError> {
        if path.is_in_git_dir() {
            return Err(ToolError::ProtectedPath {
                path: path.display(),
            });
        }
        let name = path.file_name().ok_or_else(|| ToolError::IsDirectory {
            path: path.display(),
        })?;
        let (target, permissions) = match mode {
            WriteMode::Replace => {
                let meta = self.metadata(path)?;
                if meta.is_dir() {
                    return Err(ToolError::IsDirectory {
                        path: path.display(),
                    });
                }
                if !meta.is_file() {
                    return Err(ToolError::NotAFile {
                        path: path.display(),
                    });
                }
                // Write through a symlink to the file it names (inside the root).
                let real = self
                    .dir
                    .canonicalize(path.as_path())
                    .map_err(|e| self.fs_error(path, e))?;
                let real = WorkspacePath(real);
                // A symlink may lead into .git under another name.
                if real.is_in_git_dir() {
                    return Err(ToolError::ProtectedPath {
                        path: path.display(),
                    });
                }
                (real, Some(meta.permissions()))
            }
            WriteMode::CreateNew => {
                match self.dir.symlink_metadata(path.as_path()) {
                    Ok(_) => {
                        return Err(ToolError::AlreadyExists {
                            path: path.display(),
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(self.fs_error(path, e)),
                }
                let parent = path.parent();
                self.refuse_git_target(path, &parent)?;
                if !parent.is_root() {
                    self.dir
                        .create_dir_all(parent.as_path())
                        .map_err(|e| match e.kind() {
                            // Something that is not a directory (a broken symlink, or
                            // an entry swapped in meanwhile) holds a parent's name.
                            io::ErrorKind::AlreadyExists => ToolError::InvalidPath {
                                path: path.display(),
                                reason: "a parent in it exists but is not a directory".to_owned(),
                            },
                            _ => self.fs_error(&parent, e),
                        })?;
                }
                (path.clone(), None)
            }
        };
        let parent = target.parent();
        let tmp = parent.join(format!(
            ".{}.chorus-{}.tmp",
            prefix_of(&name.to_string_lossy(), TEMP_NAME_PREFIX_BYTES),
            uuid::Uuid::new_v4().simple()
        ));
        let result = self
            .write_temp(&tmp, content, permissions)
            .and_then(|()| match mode {
                WriteMode::Replace => self
                    .dir
                    .rename(tmp.as_path(), &self.dir, target.as_path())
                    .map_err(|e| self.fs_error(&target, e)),
                WriteMode::CreateNew => {
                    let linked = self
                        .dir
                        .hard_link(tmp.as_path(), &self.dir, target.as_path());
                    let _ = self.dir.remove_file(tmp.as_path());
                    linked.map_err(|e| self.fs_error(&target, e))
                }
            });
        if result.is_err() {
            let _ = self.dir.remove_file(tmp.as_path());
        }
        result
    }

    fn write_temp(
        &self,
        tmp: &WorkspacePath,
        content: &[u8],
        permissions: Option<cap_std::fs::Permissions>,
    ) -> Result<(), ToolError> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let mut file = self
            .dir
            .open_with(tmp.as_path(), &options)
            .map_err(|e| self.fs_error(tmp, e))?;
        file.write_all(content)
            .map_err(|e| ToolError::io("writing the new content", e))?;
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)
                .map_err(|e| ToolError::io("keeping the file's permissions", e))?;
        }
        file.sync_all()
            .map_err(|e| ToolError::io("flushing the new content to disk", e))
    }

    /// Removes one file or symlink (never a directory). A symlink is removed
    /// itself; one whose target lies outside the root is refused.
    pub fn remove_file(&self, path: &WorkspacePath) -> Result<(), ToolError> {
        if path.is_in_git_dir() {
            return Err(ToolError::ProtectedPath {
                path: path.display(),
            });
        }
        let meta = self.symlink_metadata(path)?;
        if meta.is_dir() {
            return Err(ToolError::IsDirectory {
                path: path.display(),
            });
        }
        self.refuse_git_target(path, &path.parent())?;
        if meta.file_type().is_symlink() {
            match self.dir.metadata(path.as_path()) {
                Ok(target) if target.is_dir() => {
                    return Err(ToolError::IsDirectory {
                        path: path.display(),
                    });
                }
                Ok(_) => {}
                // A dangling link inside the root is just a file to remove.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.fs_error(path, e)),
            }
        } else if !meta.is_file() {
            return Err(ToolError::NotAFile {
                path: path.display(),
            });
        }
        self.dir
            .remove_file(path.as_path())
            .map_err(|e| self.fs_error(path, e))
    }

    /// Refuses to change `path` when `dir`, the directory that holds it (or its
    /// nearest existing ancestor), is really inside `.git` once symlinks are
    /// followed, e.g. `g/hooks/pre-commit` with `g -> .git`.
    fn refuse_git_target(
        &self,
        path: &WorkspacePath,
        dir: &WorkspacePath,
    ) -> Result<(), ToolError> {
        let mut probe = dir.clone();
        loop {
            match self.dir.canonicalize(probe.as_path()) {
                Ok(real) if real.components().any(|c| c.as_os_str() == ".git") => {
                    return Err(ToolError::ProtectedPath {
                        path: path.display(),
                    });
                }
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound && !probe.is_root() => {
                    probe = probe.parent();
                }
                Err(e) => return Err(self.fs_error(&probe, e)),
            }
        }
    }

    /// The workspace-relative form of a real path found by a directory walk under
    /// [`Sandbox::canonical_root`], or `None` when it is not under the root.
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

/// How much of a file's name its temporary sibling keeps, so that the temporary
/// name stays under NAME_MAX even for a 255-byte file name.
const TEMP_NAME_PREFIX_BYTES: usize = 100;

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn prefix_of(s: &str, max: usize) -> &str {
    let cut = (0..=max.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    &s[..cut]
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

#[cfg(test)]
mod tests;
