//! A workspace: one root directory every file tool of its tasks is confined to.

use std::path::PathBuf;

use super::{DomainError, Name};

/// Identifies a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct WorkspaceId(pub uuid::Uuid);

impl WorkspaceId {
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    pub fn parse(value: &str) -> Result<Self, DomainError> {
        uuid::Uuid::parse_str(value)
            .map(Self)
            .map_err(|_| DomainError::invalid("workspace id", format!("'{value}' is not a UUID")))
    }
}

impl Default for WorkspaceId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for WorkspaceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub id: WorkspaceId,
    /// Unique, human-friendly name.
    pub name: Name,
    /// Absolute path of an existing directory.
    pub root: PathBuf,
    /// Provider that runs internal agents (the planner), when one is set.
    pub system_provider: Option<Name>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl Workspace {
    /// Checks that `root` is an absolute path to an existing directory and returns
    /// it with symlinks resolved.
    pub fn check_root(root: &str) -> Result<PathBuf, DomainError> {
        let path = PathBuf::from(root);
        if !path.is_absolute() {
            return Err(DomainError::invalid(
                "workspace root",
                format!("'{root}' is not an absolute path"),
            ));
        }
        match path.canonicalize() {
            Ok(real) if real.is_dir() => Ok(real),
            Ok(_) => Err(DomainError::invalid(
                "workspace root",
                format!("'{root}' is not a directory"),
            )),
            Err(e) => Err(DomainError::invalid(
                "workspace root",
                format!("'{root}' cannot be used: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_must_be_an_existing_absolute_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_str().expect("utf8");
        assert_eq!(
            Workspace::check_root(root).expect("ok"),
            dir.path().canonicalize().expect("real")
        );
        assert!(
            Workspace::check_root("relative/dir")
                .expect_err("relative")
                .to_string()
                .contains("not an absolute path")
        );
        let file = dir.path().join("f");
        std::fs::write(&file, "x").expect("file");
        assert!(
            Workspace::check_root(file.to_str().expect("utf8"))
                .expect_err("file")
                .to_string()
                .contains("not a directory")
        );
        assert!(
            Workspace::check_root("/no/such/dir")
                .expect_err("missing")
                .to_string()
                .contains("cannot be used")
        );
    }
}
