//! Directory walks shared by file.list and file.search: ripgrep's `ignore` walker
//! set up for workspaces, and the globs that filter walked files.
//!
//! The walker reads directories by their real path below
//! [`Sandbox::canonical_root`]; it is only a source of *names*. Callers map every
//! entry back with [`Walk::relative`] and stat or open it through the sandbox's
//! directory handle, skipping entries the sandbox refuses. A directory swapped for
//! a symlink to the outside mid-walk may feed the walker outside names, but none
//! of them can be opened or stat'ed through the handle, so none are reported.
//!
//! Ignore rules: `.gitignore`, `.ignore` and `.git/info/exclude` apply whether or
//! not the workspace is a git repository. Rules from directories above the listed
//! directory apply too, but only up to the workspace root: files above the root
//! (a home directory kept in git with a `*` rule, say) and the server user's
//! global git excludes never hide workspace files. Hidden files are included;
//! `.git` is always skipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::{DirEntry, Match, WalkBuilder};

use crate::error::ToolError;
use crate::sandbox::{Sandbox, WorkspacePath};

/// Largest ignore file read from a directory above the listed one.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// A walk below one directory of the workspace.
#[derive(Debug)]
pub(crate) struct Walk {
    /// The real path the walker starts from.
    root: PathBuf,
    include_ignored: bool,
    /// Rules from the directories between the workspace root and `dir`.
    ancestors: Arc<AncestorRules>,
}

impl Walk {
    /// Prepares a walk of `dir`, which the caller has checked is a directory
    /// inside the workspace.
    pub(crate) fn new(sandbox: &Sandbox, dir: &WorkspacePath, include_ignored: bool) -> Self {
        let root = if dir.is_root() {
            sandbox.canonical_root().to_path_buf()
        } else {
            sandbox.canonical_root().join(dir.as_path())
        };
        let ancestors = if include_ignored {
            AncestorRules::default()
        } else {
            AncestorRules::load(sandbox, dir)
        };
        Self {
            root,
            include_ignored,
            ancestors: Arc::new(ancestors),
        }
    }

    /// A walker configured with the workspace rules. Symlinks are never followed.
    pub(crate) fn builder(&self) -> WalkBuilder {
        let respect = !self.include_ignored;
        let mut builder = WalkBuilder::new(&self.root);
        builder
            .follow_links(false)
            .hidden(false)
            .parents(false)
            .git_global(false)
            .ignore(respect)
            .git_ignore(respect)
            .git_exclude(respect)
            .require_git(false);
        let ancestors = Arc::clone(&self.ancestors);
        builder.filter_entry(move |entry| {
            entry.depth() == 0 || (entry.file_name() != ".git" && !ancestors.ignores(entry))
        });
        builder
    }

    /// The workspace path of a walked entry, or `None` when it is not below the
    /// walked directory (then it is skipped).
    pub(crate) fn relative(&self, sandbox: &Sandbox, entry: &DirEntry) -> Option<WorkspacePath> {
        entry.path().strip_prefix(&self.root).ok()?;
        sandbox.relative_of(entry.path())
    }

    /// The entry's path relative to the walked directory, for glob matching.
    pub(crate) fn below<'a>(&self, entry: &'a DirEntry) -> &'a Path {
        entry
            .path()
            .strip_prefix(&self.root)
            .unwrap_or(entry.path())
    }
}

/// Ignore files of the directories from the workspace root down to the parent of
/// the walked directory (the walker reads the walked directory's own files and
/// those below it). Read through the sandbox.
#[derive(Debug, Default)]
struct AncestorRules {
    /// Matchers ordered as ripgrep ranks them: all `.ignore` files (deepest
    /// first), then all `.gitignore` files, then `.git/info/exclude` files. The
    /// first matcher with an opinion decides.
    matchers: Vec<Gitignore>,
}

impl AncestorRules {
    fn load(sandbox: &Sandbox, dir: &WorkspacePath) -> Self {
        let mut ancestors = Vec::new();
        let mut current = dir.clone();
        while !current.is_root() {
            current = current.parent();
            ancestors.push(current.clone());
        }
        // `ancestors` runs from the deepest ancestor up to the root.
        let mut matchers = Vec::new();
        for name in [".ignore", ".gitignore", ".git/info/exclude"] {
            for ancestor in &ancestors {
                if let Some(matcher) = read_rules(sandbox, ancestor, name) {
                    matchers.push(matcher);
                }
            }
        }
        Self { matchers }
    }

    fn ignores(&self, entry: &DirEntry) -> bool {
        if self.matchers.is_empty() {
            return false;
        }
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        for matcher in &self.matchers {
            match matcher.matched(entry.path(), is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

/// The rules of one ignore file, or `None` when it is absent, unreadable or empty.
fn read_rules(sandbox: &Sandbox, dir: &WorkspacePath, name: &str) -> Option<Gitignore> {
    let file = dir.join(name);
    let bytes = sandbox.read_file(&file, MAX_IGNORE_FILE_BYTES).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let base = if dir.is_root() {
        sandbox.canonical_root().to_path_buf()
    } else {
        sandbox.canonical_root().join(dir.as_path())
    };
    let mut builder = GitignoreBuilder::new(&base);
    let from = base.join(name);
    for line in text.lines() {
        // A bad line is skipped, as git and ripgrep do.
        let _ = builder.add_line(Some(from.clone()), line);
    }
    let matcher = builder.build().ok()?;
    (!matcher.is_empty()).then_some(matcher)
}

/// A glob that walked files must match. Without '/' it is matched against the
/// file name ("*.rs"); with '/' against the path relative to the walked
/// directory ("src/**/*.rs"), where `*` stays within one component.
#[derive(Debug, Clone)]
pub(crate) struct PathGlob {
    matcher: GlobMatcher,
    on_name: bool,
}

impl PathGlob {
    pub(crate) fn new(tool: &str, glob: &str) -> Result<Self, ToolError> {
        let trimmed = glob.trim_start_matches("./").trim_start_matches('/');
        let invalid = |message: String| ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message,
        };
        if trimmed.is_empty() {
            return Err(invalid(format!(
                "glob '{glob}' is empty; use e.g. \"*.rs\" or \"src/**/*.rs\""
            )));
        }
        let matcher = GlobBuilder::new(trimmed)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| invalid(e.to_string()))?
            .compile_matcher();
        Ok(Self {
            matcher,
            on_name: !trimmed.contains('/'),
        })
    }

    /// Whether a file at `below` (relative to the walked directory) matches.
    pub(crate) fn matches(&self, below: &Path) -> bool {
        if self.on_name {
            below
                .file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        } else {
            self.matcher.is_match(below)
        }
    }
}
