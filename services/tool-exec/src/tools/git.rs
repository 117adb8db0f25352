//! git.status, git.diff, git.commit, git.push: the `git` binary, run in the
//! workspace root, in the run sandbox.
//!
//! git never finds a repository by itself: every command gets
//! `GIT_DIR=<root>/.git` and `GIT_WORK_TREE=<root>`, and the tools refuse when
//! `<root>/.git` is not a directory (a workspace below a repository's top
//! level, a `.git` file, a symlink). No system or global configuration is read.
//! A task's own worktree (see [`layout`]) is known by its place, never by its
//! `.git` file: git gets the worktree's own directory and the repository's,
//! sees only those (not the other tasks' worktrees), and a revision the
//! tools take must be in the task's history or its base's, so the shared
//! object store shows no other task's work.
//!
//! A repository's configuration must never run a program or reach anything:
//! the tools are granted to agents that may not run commands at all, and a
//! push may hold the network. git therefore never reads the repository's own
//! configuration file: the tools read it once as data, and git reads, in
//! every tier, a common directory of the call's own whose `config` holds only
//! the keys on an allow-list (see [`config`] and [`shadow`]). That file is the
//! service's, outside the workspace and read-only in the sandbox: nothing an
//! agent does to `.git/config` meanwhile (a rename over it from another run)
//! reaches git. With the sandbox off, a repository whose configuration sets
//! anything else is refused. On top of that every command runs with hooks off
//! (`core.hooksPath=/dev/null`, and `--no-verify` where git has it), no
//! fsmonitor, pager, editor, askpass, credential helper or signing program,
//! only the https, http, ssh and git transports (`GIT_ALLOW_PROTOCOL`, which
//! outranks any configuration), git's own ssh command (`core.sshCommand` and
//! `core.gitProxy` are overridden by the environment), and `GIT_COMMON_DIR`
//! fixed to `<root>/.git` (a `commondir` file cannot send git to another
//! configuration). Submodules are not entered. And it runs inside the sandbox
//! regardless: as the workspace owner, seeing only the workspace, with no
//! network but for a push by a run holding the `network` grant.
//!
//! The environment is an allow-list (see [`crate::process::base_env`]) plus
//! `LC_ALL=C` (messages are parsed) and `GIT_TERMINAL_PROMPT=0` (nothing waits
//! for a password). Each command has the `git_timeout` and the output cap.
//!
//! Errors: every failure is a [`ToolError`]: the workspace is not a repository or
//! git refused (`FailedPrecondition`, with git's own message), a git command timed
//! out or the call ran past its deadline (`DeadlineExceeded`), the caller went
//! away (`Cancelled`), the service is shutting down (`ShuttingDown`), a
//! push without the `network` grant (`PermissionDenied`). A rejected push is a
//! `FailedPrecondition` too, carrying git's summary of why.

mod config;
pub mod layout;
mod porcelain;
pub mod repository;
mod run;
mod shadow;

use run::Git;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use chorus_catalog::{args, outputs};
use chorus_sandbox::{Identity, Network, ProcessSpec};

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::process::{self, CommandEnd, Finished, RunLimits};
use crate::sandbox::WorkspacePath;
use crate::stop::StopReason;
use layout::Layout;

/// Options before every git subcommand: nothing in a repository's
/// configuration may start a program.
const GLOBAL_ARGS: &[&str] = &[
    "--no-pager",
    "--literal-pathspecs",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.pager=cat",
    "-c",
    "core.editor=:",
    "-c",
    "sequence.editor=:",
    "-c",
    "core.askPass=",
    "-c",
    "credential.helper=",
    "-c",
    "core.alternateRefsCommand=",
    "-c",
    "diff.external=",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "push.gpgSign=false",
    "-c",
    "submodule.recurse=false",
    "-c",
    "diff.ignoreSubmodules=all",
    "-c",
    "status.submoduleSummary=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "color.ui=false",
];

/// The transports git may use, whatever a configuration allows.
const ALLOWED_PROTOCOLS: &str = "https:http:ssh:git";

const NO_CONFIG: &str = "the repository has no .git/config file (or it is not a regular file): git tools read the repository's configuration from there; recreate it with bash (git init keeps existing history)";

const NO_WORKTREE: &str = "this task's worktree is no longer registered with its repository (its git directory is gone); start the task again, which makes it anew from the task's branch";

const NOT_A_REPOSITORY: &str = "the workspace root has no .git directory: git tools work on a repository whose top level is the workspace root (run git init with bash); a .git file or symlink (worktrees, submodules) is not used";

/// Most characters of git's stderr quoted in an error message.
const MAX_QUOTED_CHARS: usize = 1500;

pub async fn status(ctx: &ToolContext, _args: args::GitStatus) -> Result<ToolOutcome, ToolError> {
    let git = Git::open(ctx, "git.status").await?;
    let mut cmd = git.command();
    cmd.env("GIT_OPTIONAL_LOCKS", "0").args([
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--ignore-submodules=all",
        "--",
        ".",
    ]);
    let out = git.check("status", cmd).await?;
    let status = porcelain::parse(&out.stdout.bytes, "", out.stdout.truncated);
    let mut outcome = ToolOutcome::ok(&status);
    if out.stdout.truncated {
        outcome = outcome.with_metadata("truncated", true);
    }
    Ok(outcome)
}

pub async fn diff(ctx: &ToolContext, args: args::GitDiff) -> Result<ToolOutcome, ToolError> {
    let paths = args
        .paths
        .iter()
        .map(|p| ctx.sandbox.resolve(p))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(base) = &args.base {
        check_revision_syntax("git.diff", "base", base)?;
    }
    let git = Git::open(ctx, "git.diff").await?;
    let base = match &args.base {
        Some(base) => Some(git.commit_id(base).await?),
        None => None,
    };

    let mut cmd = git.command();
    cmd.args([
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--ignore-submodules=all",
    ]);
    if args.staged {
        cmd.arg("--cached");
    }
    cmd.args(base).arg("--").args(pathspecs(&paths));
    let out = git.check("diff", cmd).await?;
    let truncated = out.stdout.truncated;
    Ok(ToolOutcome::ok(&outputs::GitDiff {
        diff: out.stdout.text(),
        truncated,
    }))
}

pub async fn commit(ctx: &ToolContext, args: args::GitCommit) -> Result<ToolOutcome, ToolError> {
    if args.message.trim().is_empty() {
        return Err(invalid(
            "git.commit",
            "message is empty; describe the change",
        ));
    }
    if args.message.contains('\0') {
        return Err(invalid("git.commit", "message contains a NUL byte"));
    }
    let paths = args
        .paths
        .iter()
        .map(|p| {
            let path = ctx.sandbox.resolve(p)?;
            if path.is_in_git_dir() {
                return Err(ToolError::ProtectedPath {
                    path: path.display(),
                });
            }
            Ok(path)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let git = Git::open(ctx, "git.commit").await?;

    if args.all {
        let mut cmd = git.command();
        cmd.args(["add", "--all", "--", "."]);
        git.check("add", cmd).await?;
    }
    if !paths.is_empty() {
        let mut cmd = git.command();
        cmd.args(["add", "--"]).args(pathspecs(&paths));
        git.check("add", cmd).await?;
    }
    if !git.has_staged_changes().await? {
        return Err(ToolError::FailedPrecondition(
            "nothing to commit; change files first, then pass their paths (or all: true) to stage them"
                .to_owned(),
        ));
    }

    let mut cmd = git.command();
    if !git.has_identity() {
        let (name, email) = fallback_identity(&ctx.grant.agent);
        cmd.env("GIT_AUTHOR_NAME", &name)
            .env("GIT_AUTHOR_EMAIL", &email)
            .env("GIT_COMMITTER_NAME", &name)
            .env("GIT_COMMITTER_EMAIL", &email);
    }
    cmd.args(["commit", "--no-verify", "--no-edit"])
        .arg(format!("--message={}", args.message));
    let out = git.check("commit", cmd).await?;
    let summary = out.stdout.text().trim().to_owned();
    let commit = git.stdout_line("rev-parse", ["rev-parse", "HEAD"]).await?;
    let branch = git.current_branch().await?;
    Ok(ToolOutcome::ok(&outputs::GitCommit {
        commit,
        branch,
        summary,
    }))
}

pub async fn push(ctx: &ToolContext, args: args::GitPush) -> Result<ToolOutcome, ToolError> {
    let remote = args.remote.as_deref().unwrap_or("origin");
    check_revision_syntax("git.push", "remote", remote)?;
    if let Some(branch) = &args.branch {
        check_revision_syntax("git.push", "branch", branch)?;
    }
    if !ctx.grant.allows(chorus_catalog::NETWORK) {
        return Err(ToolError::GrantMissing {
            tool: "git.push".to_owned(),
            grant: chorus_catalog::NETWORK,
            agent: ctx.grant.agent.clone(),
        });
    }
    let git = Git::open(ctx, "git.push").await?;

    let remotes = git.stdout_text("remote", ["remote"]).await?;
    let remotes: Vec<&str> = remotes.lines().filter(|l| !l.is_empty()).collect();
    if !remotes.contains(&remote) {
        return Err(invalid(
            "git.push",
            &if remotes.is_empty() {
                format!(
                    "unknown remote '{remote}': this repository has no remotes; add one with bash (git remote add <name> <url>)"
                )
            } else {
                format!(
                    "unknown remote '{remote}'; configured remotes: {}",
                    remotes.join(", ")
                )
            },
        ));
    }
    let current = git.current_branch().await?;
    let branch = match &args.branch {
        Some(branch) => git.local_branch(branch).await?,
        None => current.clone().ok_or_else(|| {
            ToolError::FailedPrecondition(
                "HEAD is detached, so there is no current branch to push; pass branch".to_owned(),
            )
        })?,
    };
    // A task in its own worktree publishes its own work, never another
    // task's branch (which it cannot read either).
    if git.layout.worktree.is_some() && current.as_deref() != Some(branch.as_str()) {
        return Err(invalid(
            "git.push",
            &format!(
                "this task works on branch '{}' in its own worktree and pushes only that branch; leave branch out",
                current.as_deref().unwrap_or("(detached)")
            ),
        ));
    }

    let mut cmd = git.command();
    cmd.network = true;
    // An explicit refspec: never a force push ('+'), never another ref kind.
    cmd.args(["push", "--no-verify", remote])
        .arg(format!("refs/heads/{branch}:refs/heads/{branch}"));
    let out = git.run("push", cmd).await?;
    if !out.success() {
        let stderr = out.stderr.text();
        let advice = if stderr.contains("[rejected]") || stderr.contains("non-fast-forward") {
            "; the remote has commits this branch lacks: integrate them (e.g. git pull --rebase with bash) and push again (git.push never forces)"
        } else {
            ""
        };
        return Err(ToolError::FailedPrecondition(format!(
            "git push to '{remote}' failed: {}{advice}",
            quote(&stderr)
        )));
    }
    let output = [out.stderr.text(), out.stdout.text()]
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Ok(ToolOutcome::ok(&outputs::GitPush {
        remote: remote.to_owned(),
        branch,
        output,
    }))
}

/// Refuses a revision, remote or branch name git could read as an option.
fn check_revision_syntax(tool: &str, what: &str, value: &str) -> Result<(), ToolError> {
    if value.is_empty() {
        return Err(invalid(tool, &format!("{what} is empty")));
    }
    if value.starts_with('-') {
        return Err(invalid(
            tool,
            &format!("{what} '{value}' must not start with '-'"),
        ));
    }
    if value.contains('\0') {
        return Err(invalid(tool, &format!("{what} contains a NUL byte")));
    }
    Ok(())
}

fn invalid(tool: &str, message: &str) -> ToolError {
    ToolError::InvalidArguments {
        tool: tool.to_owned(),
        message: message.to_owned(),
    }
}

/// Workspace paths as pathspecs: relative to the root, which is git's cwd.
fn pathspecs(paths: &[WorkspacePath]) -> impl Iterator<Item = &OsStr> {
    let all = paths.is_empty().then_some(OsStr::new("."));
    paths.iter().map(|p| p.as_path().as_os_str()).chain(all)
}

/// The author and committer used when no identity is configured:
/// `<agent> (chorus) <agent@chorus.invalid>`.
fn fallback_identity(agent: &str) -> (String, String) {
    let name: String = agent
        .chars()
        .filter(|c| !matches!(c, '<' | '>' | '\n' | '\r' | '\0'))
        .collect();
    let name = if name.trim().is_empty() {
        "agent"
    } else {
        name.trim()
    };
    let local: String = agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let local = local.trim_matches(|c| c == '.' || c == '-');
    let local = if local.is_empty() { "agent" } else { local };
    (
        format!("{name} (chorus)"),
        format!("{local}@chorus.invalid"),
    )
}

/// git's message in one line, without hints, shortened.
fn quote(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
        .collect();
    if lines.is_empty() {
        return "git gave no message".to_owned();
    }
    let joined = lines.join("; ");
    if joined.chars().count() <= MAX_QUOTED_CHARS {
        return joined;
    }
    let cut: String = joined.chars().take(MAX_QUOTED_CHARS).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_identity_names_the_agent() {
        assert_eq!(
            fallback_identity("coder"),
            (
                "coder (chorus)".to_owned(),
                "coder@chorus.invalid".to_owned()
            )
        );
        assert_eq!(
            fallback_identity("Code Reviewer <x>"),
            (
                "Code Reviewer x (chorus)".to_owned(),
                "Code-Reviewer--x@chorus.invalid".to_owned()
            )
        );
        assert_eq!(fallback_identity("").1, "agent@chorus.invalid");
    }

    #[test]
    fn quote_drops_hints_and_joins_lines() {
        let stderr = "To /tmp/remote.git\n ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs\nhint: Updates were rejected\n";
        assert_eq!(
            quote(stderr),
            "To /tmp/remote.git; ! [rejected]        main -> main (fetch first); error: failed to push some refs"
        );
        assert_eq!(quote("\n"), "git gave no message");
        assert!(quote(&"x".repeat(5000)).ends_with("..."));
    }

    #[test]
    fn no_paths_means_the_whole_root() {
        let none: Vec<&OsStr> = pathspecs(&[]).collect();
        assert_eq!(none, vec![OsStr::new(".")]);
        let some = [WorkspacePath::from_relative("a b".into())];
        let some: Vec<&OsStr> = pathspecs(&some).collect();
        assert_eq!(some, vec![OsStr::new("a b")]);
    }
}
