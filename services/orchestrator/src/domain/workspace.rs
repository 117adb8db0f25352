//! A workspace: one root directory every file tool of its tasks is confined to.

use std::path::{Path, PathBuf};

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
    /// Its spending limits and its tasks' default budget.
    pub limits: super::WorkspaceLimits,
    /// How its tasks make and land their changes.
    pub changes: super::WorkspaceChanges,
    /// Every agent's approval rules after its own.
    pub approval_rules: Vec<super::approval::Rule>,
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

/// Where workspace roots may be: under one of the allowed prefixes, never `/`,
/// and never a directory that holds (or is, or lies in) one of the service's own
/// (the data directory: keys, database, run directories).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootPolicy {
    /// Prefixes a root must lie under (symlinks resolved); empty: anywhere.
    pub allowed: Vec<PathBuf>,
    /// The service's own directories (symlinks resolved).
    pub protected: Vec<PathBuf>,
}

impl RootPolicy {
    /// A policy over `allowed` prefixes and `protected` directories; each path is
    /// made absolute with its symlinks resolved where it exists.
    pub fn new(allowed: &[PathBuf], protected: &[PathBuf]) -> Self {
        let resolve = |p: &PathBuf| {
            p.canonicalize()
                .or_else(|_| std::path::absolute(p))
                .unwrap_or_else(|_| p.clone())
        };
        Self {
            allowed: allowed.iter().map(resolve).collect(),
            protected: protected.iter().map(resolve).collect(),
        }
    }

    /// Adds one of the service's own paths (a key file kept elsewhere).
    pub fn protect(&mut self, path: &Path) {
        let resolved = path
            .canonicalize()
            .or_else(|_| std::path::absolute(path))
            .unwrap_or_else(|_| path.to_owned());
        if !self.protected.contains(&resolved) {
            self.protected.push(resolved);
        }
    }

    /// Checks a root already resolved by [`Workspace::check_root`].
    pub fn check(&self, root: &Path) -> Result<(), DomainError> {
        let refuse = |why: String| Err(DomainError::invalid("workspace root", why));
        if root.parent().is_none() {
            return refuse(format!(
                "'{}' is the file system's root; choose a project directory",
                root.display()
            ));
        }
        if let Some(own) = self
            .protected
            .iter()
            .find(|own| own.starts_with(root) || root.starts_with(own))
        {
            return refuse(format!(
                "'{}' holds or lies in Chorus's own data ({}), which agents must never reach; choose a directory apart from it",
                root.display(),
                own.display()
            ));
        }
        // Another deployment's data directory (or this one's, moved) is
        // marked as such.
        if let Some(data) = chorus_serve::data_dir::marked_near(root) {
            return refuse(format!(
                "'{}' is, lies in or holds a Chorus data directory ({}), which agents must never reach; choose a directory apart from it",
                root.display(),
                data.display()
            ));
        }
        if !self.allowed.is_empty() && !self.allowed.iter().any(|p| root.starts_with(p)) {
            let allowed: Vec<String> = self
                .allowed
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            return refuse(format!(
                "'{}' is outside the directories workspaces may be in ({}); the operator sets them with --workspace-roots",
                root.display(),
                allowed.join(", ")
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_lie_under_the_allowed_prefixes_and_apart_from_the_services_data() {
        let policy = RootPolicy {
            allowed: vec!["/srv/projects".into(), "/home/ana".into()],
            protected: vec!["/home/ana/.chorus".into()],
        };
        assert!(policy.check(Path::new("/srv/projects/app")).is_ok());
        assert!(policy.check(Path::new("/srv/projects")).is_ok());
        assert!(policy.check(Path::new("/home/ana/code")).is_ok());
        for (root, says) in [
            ("/", "file system's root"),
            ("/srv", "outside the directories"),
            ("/srv/projects-other", "outside the directories"),
            ("/home/ana", "Chorus's own data"),
            ("/home/ana/.chorus", "Chorus's own data"),
            ("/home/ana/.chorus/runs/x", "Chorus's own data"),
        ] {
            let err = policy.check(Path::new(root)).expect_err(root).to_string();
            assert!(err.contains(says), "{root}: {err}");
        }
        let anywhere = RootPolicy {
            allowed: vec![],
            protected: vec!["/data".into()],
        };
        assert!(anywhere.check(Path::new("/tmp/x")).is_ok());
        assert!(anywhere.check(Path::new("/")).is_err());
    }

    /// The attack: another deployment's data directory lies under the
    /// allowed roots; as a workspace, a run token of this deployment would
    /// read its admin key.
    #[test]
    fn another_deployments_data_directory_is_never_a_root() {
        let top = tempfile::tempdir().expect("top");
        let top = top.path().canonicalize().expect("canonical");
        let other = top.join("other/.chorus");
        std::fs::create_dir_all(other.join("runs/r1")).expect("dirs");
        std::fs::write(other.join("admin.key"), "chorus_secret").expect("key");
        std::fs::create_dir_all(top.join("project")).expect("project");
        let policy = RootPolicy::new(std::slice::from_ref(&top), &[]);
        assert_eq!(
            policy.check(&other),
            Ok(()),
            "unmarked, it looks like any directory"
        );
        chorus_serve::data_dir::mark(&other).expect("the other deployment marks it");
        for root in [other.clone(), other.join("runs/r1"), top.join("other")] {
            let err = policy.check(&root).expect_err("a data directory as a root");
            assert!(err.to_string().contains("Chorus data directory"), "{err}");
        }
        assert_eq!(policy.check(&top.join("project")), Ok(()));
    }

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
