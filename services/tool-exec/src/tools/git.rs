//! git.status, git.diff, git.commit, git.push: the `git` binary, run in the
//! workspace root.
//!
//! Every git command runs through [`Git`], which adds options that keep a
//! repository's content from running code or starting processes that outlive the
//! call: hooks are off (`core.hooksPath=/dev/null`; an agent allowed only file
//! tools and git.commit must not get code execution through `.git/hooks`), no pager,
//! no fsmonitor daemon, no background gc or maintenance, pathspecs are literal (no
//! `:(top)` magic escaping the root), and diff uses neither external diff drivers
//! nor textconv filters. The environment is the service's minus `CHORUS_*` and
//! minus variables that point git at another repository (`GIT_DIR`, ...), with
//! `LC_ALL=C` (messages are parsed) and `GIT_TERMINAL_PROMPT=0` (nothing waits for
//! a password). Each command has the `git_timeout` and the output cap, and its
//! process group is killed when it ends (see [`crate::process`]).
//!
//! Errors: every failure is a [`ToolError`]: the workspace is not a repository or
//! git refused (`FailedPrecondition`, with git's own message), a git command timed
//! out (`DeadlineExceeded`), the service is shutting down (`ShuttingDown`). A
//! rejected push is a `FailedPrecondition` too, carrying git's summary of why.
//!
//! When the root is a subdirectory of a repository, status, diff and staging are
//! limited to the root and paths are shown relative to it; a commit is refused
//! while changes outside the root are staged.

mod porcelain;

use std::ffi::OsStr;

use chorus_catalog::{args, outputs};
use tokio::process::Command;

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::process::{self, Ending, Finished, RunLimits};
use crate::sandbox::WorkspacePath;

/// Options before every git subcommand.
const GLOBAL_ARGS: &[&str] = &[
    "--no-pager",
    "--literal-pathspecs",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "color.ui=false",
];

/// Service environment variables that would point git elsewhere than the root.
const REPOSITORY_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_EXTERNAL_DIFF",
];

const NOT_A_REPOSITORY: &str = "the workspace is not a git repository; run git init with bash";

/// Most characters of git's stderr quoted in an error message.
const MAX_QUOTED_CHARS: usize = 1500;

pub async fn status(ctx: &ToolContext, _args: args::GitStatus) -> Result<ToolOutcome, ToolError> {
    let git = Git::new(ctx, "git.status");
    let prefix = git.prefix().await?;
    let mut cmd = git.command();
    cmd.env("GIT_OPTIONAL_LOCKS", "0").args([
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--",
        ".",
    ]);
    let out = git.check("status", cmd).await?;
    let status = porcelain::parse(&out.stdout.bytes, &prefix, out.stdout.truncated);
    let mut outcome = ToolOutcome::ok(&status);
    if out.stdout.truncated {
        outcome = outcome.with_metadata("truncated", true);
    }
    Ok(outcome)
}

pub async fn diff(ctx: &ToolContext, args: args::GitDiff) -> Result<ToolOutcome, ToolError> {
    let git = Git::new(ctx, "git.diff");
    let paths = args
        .paths
        .iter()
        .map(|p| ctx.sandbox.resolve(p))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(base) = &args.base {
        git.check_revision_syntax("base", base)?;
    }
    git.prefix().await?;
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
        "--relative",
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
    let git = Git::new(ctx, "git.commit");
    if args.message.trim().is_empty() {
        return Err(git.invalid("message is empty; describe the change"));
    }
    if args.message.contains('\0') {
        return Err(git.invalid("message contains a NUL byte"));
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
    let prefix = git.prefix().await?;

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
    if !prefix.is_empty() {
        git.refuse_staged_outside(&prefix).await?;
    }

    let mut cmd = git.command();
    if !git.has_identity().await? {
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
    let git = Git::new(ctx, "git.push");
    let remote = args.remote.as_deref().unwrap_or("origin");
    git.check_revision_syntax("remote", remote)?;
    if let Some(branch) = &args.branch {
        git.check_revision_syntax("branch", branch)?;
    }
    git.prefix().await?;

    let remotes = git.stdout_text("remote", ["remote"]).await?;
    let remotes: Vec<&str> = remotes.lines().filter(|l| !l.is_empty()).collect();
    if !remotes.contains(&remote) {
        return Err(git.invalid(&if remotes.is_empty() {
            format!(
                "unknown remote '{remote}': this repository has no remotes; add one with bash (git remote add <name> <url>)"
            )
        } else {
            format!(
                "unknown remote '{remote}'; configured remotes: {}",
                remotes.join(", ")
            )
        }));
    }
    let branch = match &args.branch {
        Some(branch) => git.local_branch(branch).await?,
        None => git.current_branch().await?.ok_or_else(|| {
            ToolError::FailedPrecondition(
                "HEAD is detached, so there is no current branch to push; pass branch".to_owned(),
            )
        })?,
    };

    let mut cmd = git.command();
    if !git.has_ssh_command().await? {
        cmd.env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
    }
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

/// Runs git commands for one tool call.
struct Git<'a> {
    ctx: &'a ToolContext,
    tool: &'static str,
}

impl<'a> Git<'a> {
    fn new(ctx: &'a ToolContext, tool: &'static str) -> Self {
        Self { ctx, tool }
    }

    /// `git` with the global options and environment of the module docs.
    fn command(&self) -> Command {
        let mut cmd = process::command("git", self.ctx.sandbox.canonical_root());
        for var in REPOSITORY_ENV {
            cmd.env_remove(var);
        }
        cmd.env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_EDITOR", ":")
            .args(GLOBAL_ARGS);
        cmd
    }

    /// Runs `cmd` (git `what`); any exit status is a result.
    async fn run(&self, what: &str, cmd: Command) -> Result<Finished, ToolError> {
        let limits = RunLimits {
            timeout: self.ctx.limits.git_timeout,
            max_output_bytes: self.ctx.limits.max_output_bytes,
        };
        let out = process::run(cmd, limits, &self.ctx.cancel)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => ToolError::FailedPrecondition(
                    "git is not installed on the tool-exec host (not found on PATH)".to_owned(),
                ),
                _ => ToolError::io(format!("starting git {what}"), e),
            })?;
        match out.ending {
            Ending::Exited => Ok(out),
            Ending::TimedOut => Err(ToolError::DeadlineExceeded(format!(
                "git {what} timed out after {} s and was killed",
                self.ctx.limits.git_timeout.as_secs()
            ))),
            Ending::Cancelled => Err(ToolError::ShuttingDown),
        }
    }

    /// Runs `cmd` (git `what`); a non-zero exit is an error quoting git.
    async fn check(&self, what: &str, cmd: Command) -> Result<Finished, ToolError> {
        let out = self.run(what, cmd).await?;
        if out.success() {
            return Ok(out);
        }
        let mut message = out.stderr.text();
        if message.trim().is_empty() {
            // `git commit` reports "nothing to commit" and the like on stdout.
            message = out.stdout.text();
        }
        Err(ToolError::FailedPrecondition(format!(
            "git {what} failed: {}",
            quote(&message)
        )))
    }

    /// The whole stdout of a successful git command.
    async fn stdout_text<I, S>(&self, what: &str, args: I) -> Result<String, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command();
        cmd.args(args);
        Ok(self.check(what, cmd).await?.stdout.text())
    }

    /// The first line of stdout of a successful git command.
    async fn stdout_line<I, S>(&self, what: &str, args: I) -> Result<String, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let text = self.stdout_text(what, args).await?;
        Ok(text.lines().next().unwrap_or_default().to_owned())
    }

    /// Checks the root is in a work tree; returns the root's path inside the
    /// repository ("" at the top level, else ending in '/').
    async fn prefix(&self) -> Result<String, ToolError> {
        let mut cmd = self.command();
        cmd.args(["rev-parse", "--show-prefix"]);
        let out = self.run("rev-parse", cmd).await?;
        if out.success() {
            return Ok(out
                .stdout
                .text()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned());
        }
        let stderr = out.stderr.text();
        if stderr.contains("not a git repository") {
            return Err(ToolError::FailedPrecondition(NOT_A_REPOSITORY.to_owned()));
        }
        Err(ToolError::FailedPrecondition(format!(
            "git cannot use the workspace's repository: {}",
            quote(&stderr)
        )))
    }

    /// Refuses a revision, remote or branch name git could read as an option.
    fn check_revision_syntax(&self, what: &str, value: &str) -> Result<(), ToolError> {
        if value.is_empty() {
            return Err(self.invalid(&format!("{what} is empty")));
        }
        if value.starts_with('-') {
            return Err(self.invalid(&format!("{what} '{value}' must not start with '-'")));
        }
        if value.contains('\0') {
            return Err(self.invalid(&format!("{what} contains a NUL byte")));
        }
        Ok(())
    }

    /// The full id of the commit `revision` names.
    async fn commit_id(&self, revision: &str) -> Result<String, ToolError> {
        let mut cmd = self.command();
        cmd.args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{revision}^{{commit}}"));
        let out = self.run("rev-parse", cmd).await?;
        let id = out.stdout.text().trim().to_owned();
        if !out.success() || id.is_empty() {
            return Err(self.invalid(&format!(
                "unknown revision '{revision}'; give a commit, branch or tag (e.g. HEAD~1, main)"
            )));
        }
        Ok(id)
    }

    /// True when the index differs from HEAD below the root.
    async fn has_staged_changes(&self) -> Result<bool, ToolError> {
        let mut cmd = self.command();
        cmd.args([
            "diff",
            "--cached",
            "--quiet",
            "--no-ext-diff",
            "--no-textconv",
            "--",
            ".",
        ]);
        let out = self.run("diff", cmd).await?;
        match out.status.code() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(ToolError::FailedPrecondition(format!(
                "git diff failed: {}",
                quote(&out.stderr.text())
            ))),
        }
    }

    /// With the root below the repository's top level: refuses to commit while
    /// changes outside the root are staged (the commit would include them).
    async fn refuse_staged_outside(&self, prefix: &str) -> Result<(), ToolError> {
        let names = self
            .stdout_text(
                "diff",
                // No rename pairing: a file moved in from outside shows its source.
                [
                    "diff",
                    "--cached",
                    "--name-only",
                    "-z",
                    "--no-renames",
                    "--no-ext-diff",
                ],
            )
            .await?;
        if let Some(outside) = names
            .split('\0')
            .find(|n| !n.is_empty() && !n.starts_with(prefix))
        {
            return Err(ToolError::FailedPrecondition(format!(
                "changes outside the workspace are staged (e.g. '{outside}'); a commit would include them, so unstage them first"
            )));
        }
        Ok(())
    }

    /// True when the repository (or the user's git config) names an author.
    async fn has_identity(&self) -> Result<bool, ToolError> {
        for key in ["user.name", "user.email"] {
            let mut cmd = self.command();
            cmd.args(["config", "--get", key]);
            // Exit 1: the key is not set.
            let out = self.run("config", cmd).await?;
            if !out.success() || out.stdout.text().trim().is_empty() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// True when the environment or the configuration already says how to run ssh.
    async fn has_ssh_command(&self) -> Result<bool, ToolError> {
        if std::env::var_os("GIT_SSH_COMMAND").is_some() || std::env::var_os("GIT_SSH").is_some() {
            return Ok(true);
        }
        let mut cmd = self.command();
        cmd.args(["config", "--get", "core.sshCommand"]);
        Ok(self.run("config", cmd).await?.success())
    }

    /// The checked-out branch, `None` on a detached HEAD.
    async fn current_branch(&self) -> Result<Option<String>, ToolError> {
        let mut cmd = self.command();
        cmd.args(["symbolic-ref", "--quiet", "--short", "HEAD"]);
        let out = self.run("symbolic-ref", cmd).await?;
        let name = out.stdout.text().trim().to_owned();
        Ok((out.success() && !name.is_empty()).then_some(name))
    }

    /// Checks `name` is a valid name of an existing local branch; returns it as
    /// git expands it (`@{-1}` → the previous branch).
    async fn local_branch(&self, name: &str) -> Result<String, ToolError> {
        let mut cmd = self.command();
        cmd.args(["check-ref-format", "--branch", name]);
        let out = self.run("check-ref-format", cmd).await?;
        let branch = out.stdout.text().trim().to_owned();
        if !out.success() || branch.is_empty() {
            return Err(self.invalid(&format!("'{name}' is not a valid branch name")));
        }
        let mut cmd = self.command();
        cmd.args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"));
        if !self.run("rev-parse", cmd).await?.success() {
            return Err(self.invalid(&format!("there is no local branch '{branch}'")));
        }
        Ok(branch)
    }

    fn invalid(&self, message: &str) -> ToolError {
        ToolError::InvalidArguments {
            tool: self.tool.to_owned(),
            message: message.to_owned(),
        }
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
