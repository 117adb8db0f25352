//! Directory walks shared by file.list and file.search: ripgrep's `ignore` walker
//! set up for workspaces, and the globs that filter walked files.
//!
//! The walker reads directories by their real path below
//! [`FileRoot::canonical_root`]; it is only a source of *names*. Callers map every
//! entry back with [`Walk::relative`] and stat or open it through the sandbox's
//! directory handle, skipping entries the sandbox refuses. A directory swapped for
//! a symlink to the outside mid-walk may feed the walker outside names, but none
//! of them can be opened or stat'ed through the handle, so none are reported.
//!
//! Ignore rules ([`rules`]): `.gitignore`, `.ignore` and `.git/info/exclude`
//! apply whether or not the workspace is a git repository, read through the
//! sandbox. Rules from directories above the walked one apply too, but only up to
//! the workspace root: files above the root (a home directory kept in git with a
//! `*` rule, say) and the server user's global git excludes never hide workspace
//! files. Hidden files are included; `.git` is always skipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, WalkBuilder};

use self::rules::RuleCache;
use crate::error::ToolError;
use crate::sandbox::{FileRoot, WorkspacePath};

mod rules;

/// A walk below one directory of the workspace.
#[derive(Debug)]
pub(crate) struct Walk {
    /// The real path the walker starts from.
    root: PathBuf,
    /// Ignore rules, unless the call asked for ignored entries too.
    rules: Option<Arc<RuleCache>>,
}

impl Walk {
    /// Prepares a walk of `dir`, which the caller has checked is a directory
    /// inside the workspace.
    pub(crate) fn new(sandbox: &Arc<FileRoot>, dir: &WorkspacePath, include_ignored: bool) -> Self {
        let root = if dir.is_root() {
            sandbox.canonical_root().to_path_buf()
        } else {
            sandbox.canonical_root().join(dir.as_path())
        };
        let rules = (!include_ignored).then(|| Arc::new(RuleCache::new(Arc::clone(sandbox))));
        Self { root, rules }
    }

    /// A walker configured with the workspace rules. Symlinks are never followed.
    pub(crate) fn builder(&self) -> WalkBuilder {
        let mut builder = WalkBuilder::new(&self.root);
        // The walker's own ignore-file handling is off: see [`rules`].
        builder.standard_filters(false).follow_links(false);
        let rules = self.rules.clone();
        builder.filter_entry(move |entry| {
            entry.depth() == 0
                || (entry.file_name() != ".git"
                    && !rules.as_ref().is_some_and(|rules| rules.ignores(entry))
                    // A Chorus data directory (keys, databases) is never walked.
                    && !(entry.file_type().is_some_and(|t| t.is_dir())
                        && chorus_serve::data_dir::is_marked(entry.path())))
        });
        builder
    }

    /// The workspace path of a walked entry, or `None` when it is not below the
    /// walked directory (then it is skipped).
    pub(crate) fn relative(&self, sandbox: &FileRoot, entry: &DirEntry) -> Option<WorkspacePath> {
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
