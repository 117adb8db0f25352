//! Where git finds a run's repository: the workspace's own `.git`, or — a
//! task's worktree — the worktree's directory inside the repository's common
//! directory.
//!
//! A task's worktree is always at `<common>/chorus/worktrees/<name>` and its
//! own git directory (HEAD, index) at `<common>/worktrees/<name>`, where
//! `<common>` is the repository's `.git`. The layout is read from the run's
//! root alone, which its token names: never from the worktree's `.git` file,
//! which the run's agent can rewrite to point at another task's worktree.

use std::path::{Path, PathBuf};

/// The directory, inside the repository's `.git`, that holds task worktrees.
pub const WORKTREES_DIR: &str = "chorus/worktrees";

/// The file, in a task worktree's own git directory, naming the ref (or
/// commit) it was made from: what its git tools may read besides its own
/// history.
pub const BASE_FILE: &str = "chorus-base";

/// Where git finds the repository of a run rooted at `work_tree`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The run's root: the working tree.
    pub work_tree: PathBuf,
    /// Its own git directory: `<root>/.git`, or a worktree's
    /// `<common>/worktrees/<name>`.
    pub git_dir: PathBuf,
    /// The repository's `.git`.
    pub common_dir: PathBuf,
    /// The worktree's name when the root is a task's worktree.
    pub worktree: Option<String>,
}

impl Layout {
    /// The layout of a run rooted at `root` (symlinks resolved).
    pub fn of(root: &Path) -> Self {
        if let Some((common, name)) = task_worktree(root) {
            return Self {
                work_tree: root.to_owned(),
                git_dir: common.join("worktrees").join(&name),
                common_dir: common,
                worktree: Some(name),
            };
        }
        let git_dir = root.join(".git");
        Self {
            work_tree: root.to_owned(),
            common_dir: git_dir.clone(),
            git_dir,
            worktree: None,
        }
    }

    /// The layout of the task worktree `name` of the repository whose top
    /// level is `root`.
    pub fn worktree(root: &Path, name: &str) -> Self {
        let common = root.join(".git");
        Self {
            work_tree: common.join(WORKTREES_DIR).join(name),
            git_dir: common.join("worktrees").join(name),
            common_dir: common,
            worktree: Some(name.to_owned()),
        }
    }

    /// The paths a git process of this layout reads and writes besides the
    /// working tree: a worktree's own git directory and the common
    /// directory's entries, but not the other worktrees (`chorus`,
    /// `worktrees`), the configuration (git reads a copy of its own), the
    /// top level's index nor the hooks (which git never runs).
    pub fn repository_paths(&self) -> Vec<PathBuf> {
        if self.worktree.is_none() {
            return Vec::new();
        }
        let mut paths = vec![self.git_dir.clone()];
        if let Ok(entries) = std::fs::read_dir(&self.common_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if [
                    "chorus",
                    "worktrees",
                    "config",
                    "commondir",
                    "index",
                    "hooks",
                ]
                .iter()
                .any(|n| name == *n)
                {
                    continue;
                }
                paths.push(entry.path());
            }
        }
        paths.sort();
        paths
    }
}

/// `(<common>, <name>)` when `root` is `<common>/chorus/worktrees/<name>`
/// and `<common>` is a directory named `.git`.
fn task_worktree(root: &Path) -> Option<(PathBuf, String)> {
    let name = root.file_name()?.to_str()?.to_owned();
    let worktrees = root.parent()?;
    let chorus = worktrees.parent()?;
    let common = chorus.parent()?;
    let shaped = worktrees.file_name()? == "worktrees"
        && chorus.file_name()? == "chorus"
        && common.file_name()? == ".git";
    (shaped && common.is_dir() && is_name(&name)).then(|| (common.to_owned(), name))
}

/// A worktree name: letters, digits, `-` and `_`, at most 64.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_worktree_is_known_by_its_place_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("repo");
        let wt = root.join(".git/chorus/worktrees/t-1");
        std::fs::create_dir_all(&wt).expect("dirs");
        let layout = Layout::of(&wt);
        assert_eq!(layout.worktree.as_deref(), Some("t-1"));
        assert_eq!(layout.git_dir, root.join(".git/worktrees/t-1"));
        assert_eq!(layout.common_dir, root.join(".git"));
        assert_eq!(Layout::worktree(&root, "t-1"), layout);

        let main = Layout::of(&root);
        assert_eq!(main.worktree, None);
        assert_eq!(main.git_dir, root.join(".git"));
        assert!(main.repository_paths().is_empty());

        // Only that shape: a directory merely named so elsewhere is a root.
        let other = dir.path().join("x/chorus/worktrees/t-1");
        std::fs::create_dir_all(&other).expect("dirs");
        assert_eq!(Layout::of(&other).worktree, None);
    }

    #[test]
    fn a_worktrees_git_process_sees_neither_the_others_nor_the_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("repo");
        for d in [
            ".git/objects",
            ".git/refs",
            ".git/worktrees/a",
            ".git/chorus/worktrees/a",
        ] {
            std::fs::create_dir_all(root.join(d)).expect("dirs");
        }
        std::fs::write(root.join(".git/config"), "").expect("config");
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let layout = Layout::worktree(&root, "a");
        let seen = layout.repository_paths();
        assert_eq!(
            seen,
            vec![
                root.join(".git/HEAD"),
                root.join(".git/objects"),
                root.join(".git/refs"),
                root.join(".git/worktrees/a"),
            ]
        );
    }
}
