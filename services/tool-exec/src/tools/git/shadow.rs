//! git's view of a repository: a common directory of the call's own, whose
//! configuration Chorus wrote.

use std::path::Path;

use crate::error::ToolError;

/// A directory git reads as the repository's common directory in place of
/// `.git` (`GIT_COMMON_DIR`, which outranks a `commondir` file): `config`
/// holds `allowed` (the allowed entries), and every other entry of `.git` is
/// a symlink to it, so objects, refs and logs are the repository's own. The
/// directory is the service's, in its temporary directory: no run can
/// change or replace the configuration git reads, in either tier (a bind
/// mount over `.git/config` could be renamed over from another run's mount
/// namespace, which detaches it). git writes there through the links; the directory itself
/// is only readable in the sandbox, so a write git would make in it (a new
/// `packed-refs`) fails rather than land in a copy. Per-worktree files (HEAD,
/// the index) are read from `GIT_DIR`, the real `.git`.
pub fn common_dir(git_dir: &Path, allowed: &str) -> Result<tempfile::TempDir, ToolError> {
    let internal = |what: &str, e: std::io::Error| {
        ToolError::Internal(format!(
            "cannot prepare git's view of the repository ({what}): {e}"
        ))
    };
    let shadow = tempfile::Builder::new()
        .prefix("chorus-git-")
        .tempdir()
        .map_err(|e| internal("a directory", e))?;
    std::fs::write(shadow.path().join("config"), allowed).map_err(|e| internal("config", e))?;
    let entries = std::fs::read_dir(git_dir).map_err(|e| internal(".git", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| internal(".git", e))?;
        let name = entry.file_name();
        if name == "config" || name == "commondir" {
            continue;
        }
        std::os::unix::fs::symlink(git_dir.join(&name), shadow.path().join(&name))
            .map_err(|e| internal("a link", e))?;
    }
    // Readable by the user git runs as (a root service's workspace owner).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(shadow.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| internal("permissions", e))?;
    std::fs::set_permissions(
        shadow.path().join("config"),
        std::fs::Permissions::from_mode(0o644),
    )
    .map_err(|e| internal("permissions", e))?;
    Ok(shadow)
}
