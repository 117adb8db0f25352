//! Changing files through the sandbox: atomic writes and removals, and the rule
//! that nothing inside a `.git` directory is changed by file tools.

use std::io::{self, Write};

use cap_std::fs::OpenOptions;

use super::{FileRoot, WorkspacePath, WriteMode, not_a_file, require_regular_file};
use crate::error::ToolError;
use crate::stop::CallStop;

impl FileRoot {
    /// Writes `content` so that readers see the old file or the new one, never a
    /// half-written one: the bytes go to a temporary file in the same directory,
    /// which is then renamed (Replace) or linked (CreateNew) into place.
    ///
    /// The change is committed with `stop` right before the first thing that
    /// stays (a missing parent directory, the rename or the link): a call
    /// stopped before that leaves nothing behind.
    pub fn write_atomic(
        &self,
        path: &WorkspacePath,
        content: &[u8],
        mode: WriteMode,
        stop: &CallStop,
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
                require_regular_file(path, &meta)?;
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
                // The new content keeps the file's mode; it belongs to whoever
                // the tool acts as (the workspace's user), as after `mv`.
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
                    self.create_parents(path, &parent, stop)?;
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
            .and_then(|()| stop.commit())
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

    /// Makes the missing directories of `parent` (the directory of `path`),
    /// as the user the tool acts as. Making the first one commits
    /// the call's change.
    fn create_parents(
        &self,
        path: &WorkspacePath,
        parent: &WorkspacePath,
        stop: &CallStop,
    ) -> Result<(), ToolError> {
        let mut at = WorkspacePath::root();
        for part in parent.as_path().components() {
            at = at.join(part);
            match self.dir.symlink_metadata(at.as_path()) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.fs_error(&at, e)),
            }
            stop.commit()?;
            match self.dir.create_dir(at.as_path()) {
                Ok(()) => {}
                // Made meanwhile by someone else: used as it is.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(self.fs_error(&at, e)),
            }
        }
        // What holds each name must be a directory (not a broken symlink, not
        // an entry swapped in meanwhile).
        match self.dir.metadata(parent.as_path()) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) | Err(_) => Err(ToolError::InvalidPath {
                path: path.display(),
                reason: "a parent in it exists but is not a directory".to_owned(),
            }),
        }
    }

    fn write_temp(
        &self,
        tmp: &WorkspacePath,
        content: &[u8],
        permissions: Option<cap_std::fs::Permissions>,
    ) -> Result<(), ToolError> {
        // create_new (O_CREAT | O_EXCL): the open makes a new regular file or
        // fails; it never opens what is there, so a FIFO cannot block it.
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
    /// itself; one whose target lies outside the root is refused. The removal
    /// is committed with `stop` right before it is made.
    pub fn remove_file(&self, path: &WorkspacePath, stop: &CallStop) -> Result<(), ToolError> {
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
            return Err(not_a_file(path, &meta));
        }
        stop.commit()?;
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
