//! The service's own git work on a workspace's repository: a task's worktree
//! made and removed, its change read, its branch landed into its base.
//!
//! Every command goes through the git tools' own path ([`Git`]): in the run
//! sandbox, as the workspace's owner, with hooks off and only the allowed
//! configuration, so a repository whose `.git/config` or hooks an agent wrote
//! earlier runs nothing here either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chorus_run_token::RunGrant;
use tokio_util::sync::CancellationToken;

use super::layout::{self, Layout};
use super::{Git, check_revision_syntax};
use crate::config::Limits;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::sandbox::FileRoot;
use crate::stop::CallStop;

/// Most bytes of git output read for a change's listing.
mod change;
mod land;

pub use land::BroughtIn;

const LISTING_BYTES: usize = 16 * 1024 * 1024;

/// Most commits listed in a change.
pub const MAX_COMMITS: usize = 1000;

/// A workspace's repository, for the service's own git work.
#[derive(Debug, Clone)]
pub struct Repository {
    root: PathBuf,
    processes: chorus_sandbox::Sandbox,
    limits: Limits,
    shutdown: CancellationToken,
}

/// A task's worktree, made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub path: PathBuf,
    /// The commit its branch started from (or stood at, for a branch taken
    /// over).
    pub start_commit: String,
}

/// How a branch lands in its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandMode {
    /// Only when the base has not moved: the base takes the branch's commits.
    FastForward,
    /// The branch's commits and a merge commit; a fast-forward when the base
    /// has not moved.
    Merge,
    /// One new commit on the base with the branch's whole change.
    Squash,
}

/// A landing: the base's new commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub commit: String,
    /// True when the base only moved forward to the branch's commit.
    pub fast_forward: bool,
}

/// Why a landing was refused, with nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The branch and the base change the same lines of these files.
    Conflict(Vec<String>),
    /// Something else; the message says what to do.
    Other(String),
}

/// One commit of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub id: String,
    pub author: String,
    pub time_secs: i64,
    pub summary: String,
}

/// One changed file: what happened to it and its line counts (None for a
/// binary file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    /// The path before a rename or copy.
    pub old_path: Option<String>,
    /// `added`, `modified`, `deleted`, `renamed`, `copied`, `type_changed`.
    pub status: &'static str,
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// A task's change against its base: its commits, its files (committed and
/// not), and which of them have uncommitted changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The commit the change is measured from (where the branch left its
    /// base).
    pub base_commit: String,
    /// The branch's tip.
    pub head_commit: String,
    /// Newest first, at most [`MAX_COMMITS`].
    pub commits: Vec<Commit>,
    /// More commits than listed.
    pub more_commits: bool,
    pub files: Vec<FileChange>,
    /// Paths with changes not committed (the worktree's).
    pub uncommitted: Vec<String>,
}

impl Repository {
    /// The repository whose top level is `root` (symlinks resolved).
    pub fn new(
        root: &Path,
        processes: chorus_sandbox::Sandbox,
        limits: Limits,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            root: root.canonicalize().unwrap_or_else(|_| root.to_owned()),
            processes,
            limits,
            shutdown,
        }
    }

    /// True when `root` is the top level of a repository (its `.git` a
    /// directory).
    pub fn is_repository(root: &Path) -> bool {
        std::fs::symlink_metadata(root.join(".git")).is_ok_and(|m| m.is_dir())
    }

    /// Where the worktree `name` is.
    pub fn worktree_path(&self, name: &str) -> PathBuf {
        Layout::worktree(&self.root, name).work_tree
    }

    /// A context acting at `root` (the repository's, or a worktree's).
    fn context(&self, root: &Path, what: &'static str) -> Result<ToolContext, ToolError> {
        let owner = match self.processes.identity_for(&self.root) {
            Ok(chorus_sandbox::Identity::User { uid, gid }) if nix_is_root() => Some((uid, gid)),
            _ => None,
        };
        let mut limits = self.limits;
        limits.max_output_bytes = limits.max_output_bytes.max(LISTING_BYTES);
        let grant = RunGrant {
            run_id: String::new(),
            task_id: String::new(),
            agent: "chorus".to_owned(),
            tools: Vec::new(),
            root: root.to_owned(),
            egress: Vec::new(),
            epoch: 0,
        };
        Ok(ToolContext {
            sandbox: Arc::new(FileRoot::open(root)?.owned_by(owner)),
            grant: Arc::new(grant),
            limits,
            processes: self.processes.clone(),
            stop: CallStop::new(&self.shutdown, what, limits.git_timeout * 4),
            fence: None,
            network_questions: None,
        })
    }

    /// Makes the worktree `name` on `branch`: a new branch from `start` (a
    /// commit, branch or tag) when `new_branch`, else the existing branch.
    /// `base` (a ref, or a commit) is what its git tools may read besides
    /// its own history. An existing worktree of that name on that branch is
    /// taken as it is.
    ///
    /// # Errors
    /// `InvalidArguments` for a bad name or an unknown revision,
    /// `FailedPrecondition` with git's message when git refuses (the branch
    /// exists already, or is checked out elsewhere).
    pub async fn add_worktree(
        &self,
        name: &str,
        branch: &str,
        start: &str,
        new_branch: bool,
        base: &str,
    ) -> Result<Made, ToolError> {
        if !layout::is_name(name) {
            return Err(invalid(&format!("'{name}' is not a worktree name")));
        }
        check_revision_syntax("worktree", "start", start)?;
        check_revision_syntax("worktree", "base", base)?;
        let target = Layout::worktree(&self.root, name);
        let ctx = self.context(&self.root, "worktree")?;
        {
            // git adds to `.git/worktrees`, which it sees through a link.
            let _acting = ctx.sandbox.act()?;
            ctx.sandbox
                .dir()
                .create_dir_all(Path::new(".git").join(layout::WORKTREES_DIR))
                .and_then(|()| ctx.sandbox.dir().create_dir_all(".git/worktrees"))
                .map_err(|e| {
                    ToolError::FailedPrecondition(format!(
                        "cannot make the directory for task worktrees in .git: {e}"
                    ))
                })?;
        }
        let git = Git::open(&ctx, "worktree").await?;
        let branch = git.branch_name(branch).await?;
        if let Some(existing) = self.existing(&git, &target, &branch).await? {
            return Ok(existing);
        }
        let start_commit = self.resolve(&git, start).await?;
        let mut cmd = git.command();
        cmd.args(["worktree", "add", "--quiet"]);
        if new_branch {
            cmd.args(["--no-track", "-b", &branch]);
            cmd.arg(&target.work_tree).arg(&start_commit);
        } else {
            cmd.arg(&target.work_tree).arg(&branch);
        }
        git.check("worktree add", cmd).await?;
        let start_commit = if new_branch {
            start_commit
        } else {
            self.resolve(&git, &format!("refs/heads/{branch}")).await?
        };
        self.finish_worktree(&ctx, &target, base)?;
        Ok(Made {
            path: target.work_tree,
            start_commit,
        })
    }

    /// The worktree already at `target` on `branch`, when it is (a start
    /// tried again).
    async fn existing(
        &self,
        git: &Git<'_>,
        target: &Layout,
        branch: &str,
    ) -> Result<Option<Made>, ToolError> {
        if !target.git_dir.is_dir() || !target.work_tree.is_dir() {
            return Ok(None);
        }
        let head = std::fs::read_to_string(target.git_dir.join("HEAD")).unwrap_or_default();
        if head.trim() != format!("ref: refs/heads/{branch}") {
            return Err(ToolError::FailedPrecondition(format!(
                "a worktree named '{}' exists on another branch; discard it first",
                target.worktree.as_deref().unwrap_or_default()
            )));
        }
        let start_commit = self.resolve(git, &format!("refs/heads/{branch}")).await?;
        Ok(Some(Made {
            path: target.work_tree.clone(),
            start_commit,
        }))
    }

    /// Points the worktree's `.git` file at its real git directory (git
    /// wrote the path it was shown) and records its base.
    fn finish_worktree(
        &self,
        ctx: &ToolContext,
        target: &Layout,
        base: &str,
    ) -> Result<(), ToolError> {
        let _acting = ctx.sandbox.act()?;
        let write = |path: PathBuf, text: String| {
            std::fs::write(&path, text)
                .map_err(|e| ToolError::Internal(format!("cannot write {}: {e}", path.display())))
        };
        write(
            target.work_tree.join(".git"),
            format!("gitdir: {}\n", target.git_dir.display()),
        )?;
        write(
            target.git_dir.join("commondir"),
            format!("{}\n", target.common_dir.display()),
        )?;
        write(target.git_dir.join(layout::BASE_FILE), format!("{base}\n"))
    }

    /// Removes the worktree `name`: with `snapshot` (a commit message),
    /// what it holds uncommitted is first committed on its branch, so no
    /// work is lost. Returns that commit, if one was made. A worktree
    /// already gone is pruned from the repository's records.
    ///
    /// # Errors
    /// `FailedPrecondition` when git refuses the snapshot, or the directory
    /// cannot be removed.
    pub async fn remove_worktree(
        &self,
        name: &str,
        snapshot: Option<&str>,
    ) -> Result<Option<String>, ToolError> {
        if !layout::is_name(name) {
            return Err(invalid(&format!("'{name}' is not a worktree name")));
        }
        let target = Layout::worktree(&self.root, name);
        let mut made = None;
        if let Some(message) = snapshot
            && target.work_tree.is_dir()
            && target.git_dir.is_dir()
        {
            let ctx = self.context(&target.work_tree, "worktree")?;
            let git = Git::open(&ctx, "worktree").await?;
            let mut cmd = git.command();
            cmd.args(["add", "--all", "--", "."]);
            git.check("add", cmd).await?;
            if git.has_staged_changes().await? {
                let mut cmd = git.command();
                cmd.env("GIT_AUTHOR_NAME", "Chorus")
                    .env("GIT_AUTHOR_EMAIL", "chorus@chorus.invalid")
                    .env("GIT_COMMITTER_NAME", "Chorus")
                    .env("GIT_COMMITTER_EMAIL", "chorus@chorus.invalid")
                    .args(["commit", "--no-verify", "--no-edit", "--quiet"])
                    .arg(format!("--message={message}"));
                git.check("commit", cmd).await?;
                made = Some(git.stdout_line("rev-parse", ["rev-parse", "HEAD"]).await?);
            }
        }
        let dir = target.work_tree.clone();
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ToolError::FailedPrecondition(format!(
                "cannot remove the worktree {}: {e}",
                dir.display()
            ))),
        })
        .await
        .map_err(|e| ToolError::Internal(format!("removing a worktree failed: {e}")))??;
        self.prune().await?;
        Ok(made)
    }

    /// Drops the repository's records of worktrees whose directory is gone.
    ///
    /// # Errors
    /// `FailedPrecondition` with git's message.
    pub async fn prune(&self) -> Result<(), ToolError> {
        let ctx = self.context(&self.root, "worktree")?;
        let git = Git::open(&ctx, "worktree").await?;
        let mut cmd = git.command();
        cmd.args(["worktree", "prune"]);
        git.check("worktree prune", cmd).await?;
        Ok(())
    }

    /// The names of the task worktrees on disk (directories under
    /// `.git/chorus/worktrees`) and of those the repository records.
    pub fn worktree_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            self.root.join(".git").join(layout::WORKTREES_DIR),
            self.root.join(".git/worktrees"),
        ]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| layout::is_name(n))
        .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Deletes `branch` (a task's, landed or discarded); one already gone
    /// is no error.
    ///
    /// # Errors
    /// `FailedPrecondition` with git's message.
    pub async fn delete_branch(&self, branch: &str) -> Result<(), ToolError> {
        let ctx = self.context(&self.root, "worktree")?;
        let git = Git::open(&ctx, "worktree").await?;
        let branch = git.branch_name(branch).await?;
        let mut cmd = git.command();
        cmd.args(["update-ref", "-d"])
            .arg(format!("refs/heads/{branch}"));
        git.check("update-ref", cmd).await?;
        Ok(())
    }

    /// The commit `revision` names in the repository.
    ///
    /// # Errors
    /// `InvalidArguments` naming the revision when there is none.
    pub async fn commit_of(&self, revision: &str) -> Result<String, ToolError> {
        check_revision_syntax("worktree", "revision", revision)?;
        let ctx = self.context(&self.root, "worktree")?;
        let git = Git::open(&ctx, "worktree").await?;
        self.resolve(&git, revision).await
    }

    /// The branch checked out at the repository's top level, if any.
    ///
    /// # Errors
    /// `FailedPrecondition` when git cannot read the repository.
    pub async fn current_branch(&self) -> Result<Option<String>, ToolError> {
        let ctx = self.context(&self.root, "worktree")?;
        let git = Git::open(&ctx, "worktree").await?;
        git.current_branch().await
    }

    async fn resolve(&self, git: &Git<'_>, revision: &str) -> Result<String, ToolError> {
        let mut cmd = git.command();
        cmd.args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{revision}^{{commit}}"));
        let out = git.run("rev-parse", cmd).await?;
        let id = out.stdout.text().trim().to_owned();
        if !out.success() || id.is_empty() {
            return Err(invalid(&format!(
                "'{revision}' names no commit of the workspace's repository; give a branch, tag or commit"
            )));
        }
        Ok(id)
    }
}

/// Whether `s` is a commit id as git writes one.
fn is_hex(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// The arguments of every diff a change is read with.
const DIFF_ARGS: &[&str] = &[
    "diff",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--ignore-submodules=all",
    "--find-renames",
];

/// A copy of a worktree's index with every file in it (untracked ones too):
/// the whole change, committed or not, without touching what the agent
/// staged. Removed when dropped.
struct WholeIndex {
    path: PathBuf,
}

impl WholeIndex {
    async fn of(ctx: &ToolContext, git: &Git<'_>) -> Result<Self, ToolError> {
        let path = git
            .layout
            .git_dir
            .join(format!("chorus-change-{}.index", uuid_like()));
        {
            let _acting = ctx.sandbox.act()?;
            let real = git.layout.git_dir.join("index");
            if real.is_file() {
                std::fs::copy(&real, &path).map_err(|e| {
                    ToolError::Internal(format!("cannot copy the worktree's index: {e}"))
                })?;
            }
        }
        let index = Self { path };
        let mut cmd = git.command();
        cmd.env("GIT_INDEX_FILE", &index.path)
            .args(["add", "--all", "--", "."]);
        git.check("add", cmd).await?;
        Ok(index)
    }

    async fn files(&self, git: &Git<'_>, base: &str) -> Result<Vec<FileChange>, ToolError> {
        changed_files(git, &["--cached", base], Some(&self.path)).await
    }
}

impl Drop for WholeIndex {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A name no other call picks at the same time.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The files `diff <range>` lists, with their line counts.
async fn changed_files(
    git: &Git<'_>,
    range: &[&str],
    index: Option<&Path>,
) -> Result<Vec<FileChange>, ToolError> {
    let run = |extra: &'static str| {
        let mut cmd = git.command();
        if let Some(index) = index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        cmd.args(DIFF_ARGS)
            .args([extra, "-z"])
            .args(range)
            .arg("--");
        cmd
    };
    let statuses = git.check("diff", run("--name-status")).await?.stdout.bytes;
    let counts = git.check("diff", run("--numstat")).await?.stdout.bytes;
    Ok(parse_changes(&statuses, &counts))
}

/// Paths with changes not committed in a worktree.
async fn uncommitted_paths(git: &Git<'_>) -> Result<Vec<String>, ToolError> {
    let mut cmd = git.command();
    cmd.env("GIT_OPTIONAL_LOCKS", "0").args([
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=all",
        "--",
        ".",
    ]);
    let out = git.check("status", cmd).await?.stdout.bytes;
    let mut paths = Vec::new();
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(entry) = fields.next() {
        if entry.len() < 4 {
            continue;
        }
        let renamed = matches!(entry[0], b'R' | b'C');
        paths.push(String::from_utf8_lossy(&entry[3..]).into_owned());
        if renamed {
            // The old path follows.
            fields.next();
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// True when commit `a` is in `b`'s history.
async fn is_ancestor(git: &Git<'_>, a: &str, b: &str) -> Result<bool, ToolError> {
    let mut cmd = git.command();
    cmd.args(["merge-base", "--is-ancestor", a, b]);
    Ok(git.run("merge-base", cmd).await?.success())
}

/// The tree of `base` and `tip` merged, or the conflicting files.
async fn merged_tree(
    git: &Git<'_>,
    base: &str,
    tip: &str,
) -> Result<String, Result<Refused, ToolError>> {
    let mut cmd = git.command();
    cmd.args([
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        "-z",
        base,
        tip,
    ]);
    let out = git.run("merge-tree", cmd).await.map_err(Err)?;
    let text = out.stdout.text();
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    let tree = fields.next().unwrap_or_default().trim().to_owned();
    match out.status.code() {
        Some(0) if !tree.is_empty() => Ok(tree),
        Some(1) => {
            let mut files: Vec<String> = fields.map(str::to_owned).collect();
            files.sort();
            files.dedup();
            Err(Ok(Refused::Conflict(files)))
        }
        _ => Err(Err(ToolError::FailedPrecondition(format!(
            "git merge-tree failed: {}",
            super::quote(&out.stderr.text())
        )))),
    }
}

/// The worktree (other than the top level) where `branch` is checked out.
async fn checked_out_elsewhere(
    git: &Git<'_>,
    root: &Path,
    branch: &str,
) -> Result<Option<String>, ToolError> {
    let list = git
        .stdout_text("worktree list", ["worktree", "list", "--porcelain", "-z"])
        .await?;
    // The first entry is the top level (git names it after the common
    // directory it is shown, so it is known by its place in the list).
    let mut path = None;
    let mut entries = 0;
    for field in list.split('\0') {
        if let Some(p) = field.strip_prefix("worktree ") {
            entries += 1;
            path = Some(p.to_owned());
        } else if entries > 1
            && field == format!("branch refs/heads/{branch}")
            && let Some(p) = &path
            && Path::new(p) != root
        {
            return Ok(Some(p.clone()));
        }
    }
    Ok(None)
}

/// The files git says a checkout would overwrite.
fn overwritten_files(stderr: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut listing = false;
    for line in stderr.lines() {
        if line.contains("would be overwritten") || line.contains("would be removed") {
            listing = true;
        } else if listing && line.starts_with('\t') {
            files.push(line.trim().to_owned());
        } else {
            listing = false;
        }
    }
    files
}

/// `git log --format=%H%x1f%an%x1f%ct%x1f%s%x1e` as commits.
fn parse_log(text: &str) -> Vec<Commit> {
    text.split('\u{1e}')
        .filter_map(|record| {
            let mut parts = record.trim_start_matches('\n').split('\u{1f}');
            let id = parts.next()?.trim();
            if id.is_empty() {
                return None;
            }
            Some(Commit {
                id: id.to_owned(),
                author: parts.next().unwrap_or_default().to_owned(),
                time_secs: parts.next().and_then(|t| t.parse().ok()).unwrap_or(0),
                summary: parts.next().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// `diff --name-status -z` and `diff --numstat -z` (renames found) as file
/// changes.
fn parse_changes(statuses: &[u8], counts: &[u8]) -> Vec<FileChange> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut files = Vec::new();
    let mut fields = statuses.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(code) = fields.next() {
        let (status, two) = match code.first() {
            Some(b'A') => ("added", false),
            Some(b'D') => ("deleted", false),
            Some(b'R') => ("renamed", true),
            Some(b'C') => ("copied", true),
            Some(b'T') => ("type_changed", false),
            _ => ("modified", false),
        };
        let first = fields.next().map(text).unwrap_or_default();
        let (old_path, path) = if two {
            (Some(first), fields.next().map(text).unwrap_or_default())
        } else {
            (None, first)
        };
        files.push(FileChange {
            path,
            old_path,
            status,
            additions: None,
            deletions: None,
        });
    }
    // numstat -z: "<add>\t<del>\t<path>\0", or for a rename
    // "<add>\t<del>\t\0<old>\0<new>\0".
    let mut fields = counts.split(|b| *b == 0);
    while let Some(head) = fields.next() {
        if head.is_empty() {
            continue;
        }
        let head = text(head);
        let mut parts = head.splitn(3, '\t');
        let (Some(add), Some(del), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let path = if path.is_empty() {
            fields.next();
            fields.next().map(text).unwrap_or_default()
        } else {
            path.to_owned()
        };
        if let Some(file) = files.iter_mut().find(|f| f.path == path) {
            file.additions = add.parse().ok();
            file.deletions = del.parse().ok();
        }
    }
    files
}

fn invalid(message: &str) -> ToolError {
    ToolError::InvalidArguments {
        tool: "worktree".to_owned(),
        message: message.to_owned(),
    }
}

fn nix_is_root() -> bool {
    crate::runner::running_as_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changes_listing_reads_renames_and_binary_files() {
        let statuses = b"M\0a.txt\0R100\0old.txt\0new.txt\0A\0img.png\0D\0gone.txt\0";
        let counts = b"1\t1\ta.txt\0" as &[u8];
        let counts = [
            counts,
            b"0\t0\t\0old.txt\0new.txt\0",
            b"-\t-\timg.png\0",
            b"0\t3\tgone.txt\0",
        ]
        .concat();
        let files = parse_changes(statuses, &counts);
        assert_eq!(files.len(), 4);
        assert_eq!(files[0].path, "a.txt");
        assert_eq!((files[0].additions, files[0].deletions), (Some(1), Some(1)));
        assert_eq!(files[1].status, "renamed");
        assert_eq!(files[1].old_path.as_deref(), Some("old.txt"));
        assert_eq!(files[1].path, "new.txt");
        assert_eq!(files[1].additions, Some(0));
        assert_eq!(files[2].status, "added");
        assert_eq!(files[2].additions, None, "binary");
        assert_eq!(files[3].status, "deleted");
        assert_eq!(files[3].deletions, Some(3));
    }

    #[test]
    fn a_log_reads_as_commits() {
        let log = "abc\u{1f}Ana\u{1f}1700000000\u{1f}Fix it\u{1e}\ndef\u{1f}Bo\u{1f}1700000001\u{1f}Start\u{1e}\n";
        let commits = parse_log(log);
        assert_eq!(commits.len(), 2);
        assert_eq!(commits[0].id, "abc");
        assert_eq!(commits[0].summary, "Fix it");
        assert_eq!(commits[1].time_secs, 1_700_000_001);
    }

    #[test]
    fn the_files_a_checkout_would_overwrite_are_named() {
        let stderr = "error: Your local changes to the following files would be overwritten by merge:\n\ta.txt\n\tb/c.txt\nPlease commit your changes or stash them before you merge.\nAborting\n";
        assert_eq!(overwritten_files(stderr), vec!["a.txt", "b/c.txt"]);
    }
}
