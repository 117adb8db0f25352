//! Ignore rules of walked directories, read through the sandbox.
//!
//! The `ignore` walker can read `.gitignore` files itself, but it opens them by
//! their real path and follows symlinks, so a `.gitignore` linked to a file
//! outside the workspace would be read, and which entries it hides would hint at
//! that file's lines. So the walker's own ignore handling is off and this module
//! supplies the rules instead: each directory's `.ignore`, `.gitignore` and
//! `.git/info/exclude` are opened through the sandbox as regular files (a symlink
//! is not followed, as git does not follow a symlinked `.gitignore`), parsed with
//! the `ignore` crate's own gitignore matcher, and cached per directory.
//!
//! Precedence is ripgrep's: `.ignore` rules beat `.gitignore` rules, which beat
//! `.git/info/exclude`; within each kind the deepest directory's file decides;
//! a whitelist (`!pattern`) match keeps the entry.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::{DirEntry, Match};

use crate::sandbox::{FileRoot, WorkspacePath};

/// The ignore files of a directory, in order of precedence.
const RULE_FILES: [&str; 3] = [".ignore", ".gitignore", ".git/info/exclude"];
/// Largest ignore file read; a bigger one is not applied.
const MAX_RULE_FILE_BYTES: u64 = 1024 * 1024;

/// Rules of every directory met so far, keyed by real path.
#[derive(Debug)]
pub(super) struct RuleCache {
    sandbox: Arc<FileRoot>,
    dirs: RwLock<HashMap<PathBuf, Arc<DirRules>>>,
}

/// One directory's rules and those of its parents, up to the workspace root.
#[derive(Debug)]
struct DirRules {
    /// Matchers of this directory's files, indexed like [`RULE_FILES`].
    own: [Option<Gitignore>; 3],
    parent: Option<Arc<DirRules>>,
}

impl RuleCache {
    pub(super) fn new(sandbox: Arc<FileRoot>) -> Self {
        Self {
            sandbox,
            dirs: RwLock::new(HashMap::new()),
        }
    }

    /// Whether the rules of the entry's directory and its parents exclude it.
    pub(super) fn ignores(&self, entry: &DirEntry) -> bool {
        let Some(rules) = entry.path().parent().and_then(|dir| self.rules_of(dir)) else {
            return false;
        };
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        for kind in 0..RULE_FILES.len() {
            let mut node = Some(&*rules);
            while let Some(dir) = node {
                if let Some(matcher) = &dir.own[kind] {
                    match matcher.matched(entry.path(), is_dir) {
                        Match::Ignore(_) => return true,
                        Match::Whitelist(_) => return false,
                        Match::None => {}
                    }
                }
                node = dir.parent.as_deref();
            }
        }
        false
    }

    /// The rules in force in the directory at real path `dir`, or `None` when it
    /// is not inside the workspace.
    fn rules_of(&self, dir: &Path) -> Option<Arc<DirRules>> {
        let cached = self
            .dirs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(dir)
            .cloned();
        if cached.is_some() {
            return cached;
        }
        let relative = self.sandbox.relative_of(dir)?;
        let parent = if relative.is_root() {
            None
        } else {
            Some(self.rules_of(dir.parent()?)?)
        };
        let rules = Arc::new(DirRules {
            own: RULE_FILES.map(|name| self.read_rules(&relative, dir, name)),
            parent,
        });
        let mut dirs = self.dirs.write().unwrap_or_else(PoisonError::into_inner);
        Some(Arc::clone(dirs.entry(dir.to_path_buf()).or_insert(rules)))
    }

    /// The rules of one ignore file, or `None` when it is absent, not a regular
    /// file, too big, unreadable or empty.
    fn read_rules(&self, dir: &WorkspacePath, real_dir: &Path, name: &str) -> Option<Gitignore> {
        let (file, meta) = self.sandbox.open_walked_file(&dir.join(name)).ok()?;
        if meta.len() > MAX_RULE_FILE_BYTES {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(MAX_RULE_FILE_BYTES)
            .read_to_end(&mut bytes)
            .ok()?;
        let mut builder = GitignoreBuilder::new(real_dir);
        let from = real_dir.join(name);
        for line in String::from_utf8_lossy(&bytes).lines() {
            // A bad line is skipped, as git and ripgrep do.
            let _ = builder.add_line(Some(from.clone()), line);
        }
        let matcher = builder.build().ok()?;
        (!matcher.is_empty()).then_some(matcher)
    }
}
