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
mod shadow;

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

/// One git command line and what it adds to the environment.
#[derive(Debug, Default)]
struct GitCommand {
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    /// It may reach the network (a push by a run with the network grant).
    network: bool,
}

impl GitCommand {
    fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }
}

/// Runs git commands for one tool call.
struct Git<'a> {
    ctx: &'a ToolContext,
    root: PathBuf,
    /// Where git finds the repository (the root's `.git`, or a task
    /// worktree's own directories).
    layout: Layout,
    identity: Identity,
    /// The configuration git is shown in place of the repository's (None
    /// while it is being read).
    config: Option<Shown>,
}

/// The repository's configuration as git sees it.
struct Shown {
    /// The common directory git reads in place of `.git`, whose `config`
    /// holds the allowed entries (removed when the call ends).
    common_dir: tempfile::TempDir,
    /// Whether it names an author (user.name and user.email).
    has_identity: bool,
}

impl<'a> Git<'a> {
    /// Checks `<root>/.git` is the repository's own directory, finds the user
    /// git runs as, and reads the repository's configuration as data.
    async fn open(ctx: &'a ToolContext, _tool: &'static str) -> Result<Self, ToolError> {
        let root = ctx.sandbox.canonical_root().to_path_buf();
        let layout = Layout::of(&root);
        match std::fs::symlink_metadata(&layout.git_dir) {
            Ok(meta) if meta.is_dir() => {}
            _ if layout.worktree.is_some() => {
                return Err(ToolError::FailedPrecondition(NO_WORKTREE.to_owned()));
            }
            _ => return Err(ToolError::FailedPrecondition(NOT_A_REPOSITORY.to_owned())),
        }
        let config_file = layout.common_dir.join("config");
        match std::fs::symlink_metadata(&config_file) {
            Ok(meta) if meta.is_file() => {}
            _ => return Err(ToolError::FailedPrecondition(NO_CONFIG.to_owned())),
        }
        let identity = ctx
            .processes
            .identity_for(&root)
            .map_err(|e| ToolError::FailedPrecondition(e.to_string()))?;
        let mut git = Self {
            ctx,
            root,
            layout,
            identity,
            config: None,
        };
        // Read, never applied: no includes, nothing run.
        let mut cmd = git.command();
        cmd.args(["config", "--no-includes", "--null", "--list", "--file"])
            .arg(&config_file);
        let listed = git.check("config", cmd).await?;
        let entries = config::parse_list(&listed.stdout.text());
        let (text, dropped) = config::sanitize(&entries);
        if !ctx.processes.enforced() && !dropped.is_empty() {
            return Err(ToolError::FailedPrecondition(format!(
                "the repository's configuration sets {}, which git tools never let git see; the sandbox hides such keys from git, but it is off here: remove them from .git/config (git config --unset), or run the service with the sandbox on",
                dropped.join(", ")
            )));
        }
        let named = |key: &str| {
            entries
                .iter()
                .any(|e| e.key == key && !e.value.trim().is_empty())
        };
        if git.layout.worktree.is_none() {
            // Where git keeps ref logs, made now as the workspace's user:
            // git could not make it in the common directory it is shown.
            // (A task's worktree was made by git, which made them.)
            let _acting = ctx.sandbox.act()?;
            match ctx.sandbox.dir().create_dir(".git/logs") {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(ToolError::FailedPrecondition(format!(
                        "cannot make .git/logs, where git keeps ref logs: {e}"
                    )));
                }
            }
        }
        git.config = Some(Shown {
            common_dir: shadow::common_dir(&git.layout.common_dir, &text)?,
            has_identity: named("user.name") && named("user.email"),
        });
        Ok(git)
    }

    /// `git` with the global options.
    fn command(&self) -> GitCommand {
        let mut cmd = GitCommand::default();
        cmd.args(GLOBAL_ARGS)
            .arg("-c")
            .arg(format!("safe.directory={}", self.root.display()));
        if self.layout.worktree.is_some() {
            cmd.arg("-c").arg(format!(
                "safe.directory={}",
                self.layout.common_dir.display()
            ));
        }
        cmd
    }

    /// Runs `cmd` (git `what`); any exit status is a result.
    async fn run(&self, what: &str, cmd: GitCommand) -> Result<Finished, ToolError> {
        let mut env = self.base_env(cmd.network);
        env.extend(cmd.env);
        let network = if cmd.network {
            process::network_of(&self.ctx.grant)?
        } else {
            Network::None
        };
        let mut read_only = Vec::new();
        self.through_proxy(&network, &mut env, &mut read_only);
        // git reads the allowed configuration, from a common directory of
        // the call's own (see [`shadow`]); while it is being read, none.
        match &self.config {
            Some(shown) => {
                env.push(("GIT_COMMON_DIR".into(), shown.common_dir.path().into()));
                read_only.push(shown.common_dir.path().to_path_buf());
            }
            // A worktree's configuration is outside its root: read as data.
            None if self.layout.worktree.is_some() => {
                read_only.push(self.layout.common_dir.join("config"));
            }
            None => {}
        }
        let spec = ProcessSpec {
            program: "git".into(),
            args: cmd.args,
            env,
            cwd: self.root.clone(),
            read_write: std::iter::once(self.root.clone())
                .chain(self.layout.repository_paths())
                .collect(),
            read_only,
            network,
            identity: self.identity,
            address_space_limit: true,
            covers: Vec::new(),
            // The service's own git commands (a task's worktree made or
            // landed) belong to no run.
            run: Some(self.ctx.grant.run_id.clone()).filter(|r| !r.is_empty()),
            fence: self.ctx.fence.clone(),
        };
        let limits = RunLimits {
            timeout: self.ctx.limits.git_timeout,
            max_output_bytes: self.ctx.limits.max_output_bytes,
        };
        let out = process::run(&self.ctx.processes, &spec, limits, self.ctx.stop.token())
            .await
            .map_err(|e| {
                e.into_tool_error("git is not installed on the tool-exec host (not found on PATH)")
            })?;
        match out.ending {
            CommandEnd::Exited => Ok(out),
            CommandEnd::TimedOut => Err(ToolError::DeadlineExceeded(format!(
                "git {what} timed out after {} s and was killed",
                self.ctx.limits.git_timeout.as_secs()
            ))),
            CommandEnd::Cancelled => Err(self.stopped(what)),
        }
    }

    /// The environment of every git command: the repository named, no system
    /// or global configuration, no prompt, editor, pager or helper program.
    fn base_env(&self, network: bool) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        let mut env = process::base_env(network);
        for (key, value) in [
            ("LC_ALL", OsStr::new("C")),
            ("GIT_DIR", self.layout.git_dir.as_os_str()),
            ("GIT_WORK_TREE", self.root.as_os_str()),
            ("GIT_COMMON_DIR", self.layout.common_dir.as_os_str()),
            ("GIT_ALLOW_PROTOCOL", OsStr::new(ALLOWED_PROTOCOLS)),
            ("GIT_CONFIG_NOSYSTEM", OsStr::new("1")),
            ("GIT_CONFIG_GLOBAL", OsStr::new("/dev/null")),
            ("GIT_ATTR_NOSYSTEM", OsStr::new("1")),
            ("GIT_TERMINAL_PROMPT", OsStr::new("0")),
            ("GIT_EDITOR", OsStr::new(":")),
            ("GIT_SEQUENCE_EDITOR", OsStr::new(":")),
            ("GIT_PAGER", OsStr::new("cat")),
            ("GIT_ASKPASS", OsStr::new("")),
            ("SSH_ASKPASS", OsStr::new("")),
            ("GIT_PROXY_COMMAND", OsStr::new("")),
            ("GIT_SSH_COMMAND", OsStr::new("ssh -o BatchMode=yes")),
        ] {
            env.push((key.into(), value.to_owned()));
        }
        env
    }

    /// git's git:// and ssh transports take no proxy variable: with the
    /// network granted they reach the egress proxy through the launcher's
    /// CONNECT client.
    fn through_proxy(
        &self,
        network: &Network,
        env: &mut Vec<(std::ffi::OsString, std::ffi::OsString)>,
        read_only: &mut Vec<PathBuf>,
    ) {
        if matches!(network, Network::Proxied { .. })
            && let Some(helper) = self.ctx.processes.connect_helper()
            && let Some(shown) = helper
                .to_str()
                .filter(|p| !p.contains(['\'', '"', '$', '`', '\\']))
        {
            env.push(("GIT_PROXY_COMMAND".into(), helper.into()));
            env.push((
                "GIT_SSH_COMMAND".into(),
                format!("ssh -o BatchMode=yes -o \"ProxyCommand='{shown}' connect %h %p\"").into(),
            ));
            read_only.push(helper.to_path_buf());
        }
    }

    /// The error of a git command killed because the call was stopped.
    fn stopped(&self, what: &str) -> ToolError {
        let stop = &self.ctx.stop;
        match stop.reason() {
            Some(StopReason::Deadline) => ToolError::DeadlineExceeded(format!(
                "the call ran past its {}-second deadline; git {what} was killed; check \
                 git.status before trying again",
                stop.deadline().as_secs()
            )),
            Some(StopReason::CallerLeft) => {
                ToolError::Cancelled(format!("the caller went away; git {what} was killed"))
            }
            Some(StopReason::RunEnded) => ToolError::Aborted(format!(
                "the run ended while git {what} ran (or its orchestrator lost it); git was killed"
            )),
            Some(StopReason::ShuttingDown) | None => ToolError::ShuttingDown,
        }
    }

    /// Runs `cmd` (git `what`); a non-zero exit is an error quoting git.
    async fn check(&self, what: &str, cmd: GitCommand) -> Result<Finished, ToolError> {
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

    /// The full id of the commit `revision` names.
    async fn commit_id(&self, revision: &str) -> Result<String, ToolError> {
        let mut cmd = self.command();
        cmd.args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{revision}^{{commit}}"));
        let out = self.run("rev-parse", cmd).await?;
        let id = out.stdout.text().trim().to_owned();
        // In a task's worktree, a commit out of its reach is not there.
        if !out.success() || id.is_empty() || !self.in_reach(&id).await? {
            let seen = if self.layout.worktree.is_some() {
                " of this task's branch or its base (a task in its own worktree sees only those)"
            } else {
                ""
            };
            return Err(invalid(
                "git.diff",
                &format!(
                    "unknown revision '{revision}'; give a commit, branch or tag{seen} (e.g. HEAD~1, main)"
                ),
            ));
        }
        Ok(id)
    }

    /// Whether a run may read commit `id`: anything in its workspace's own
    /// repository; in a task's worktree, only the task's history (HEAD's)
    /// and its base's, never another task's branch through the shared
    /// object store.
    async fn in_reach(&self, id: &str) -> Result<bool, ToolError> {
        if self.layout.worktree.is_none() {
            return Ok(true);
        }
        let mut tips = vec!["HEAD".to_owned()];
        // Written by the service when it made the worktree.
        if let Ok(base) = std::fs::read_to_string(self.layout.git_dir.join(layout::BASE_FILE)) {
            let base = base.trim();
            if !base.is_empty() && !base.starts_with('-') {
                tips.push(base.to_owned());
            }
        }
        for tip in tips {
            let mut cmd = self.command();
            cmd.args(["merge-base", "--is-ancestor", id, &tip]);
            if self.run("merge-base", cmd).await?.success() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// True when the index differs from HEAD.
    async fn has_staged_changes(&self) -> Result<bool, ToolError> {
        let mut cmd = self.command();
        cmd.args([
            "diff",
            "--cached",
            "--quiet",
            "--no-ext-diff",
            "--no-textconv",
            "--ignore-submodules=all",
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

    /// True when the repository names an author.
    fn has_identity(&self) -> bool {
        self.config.as_ref().is_some_and(|c| c.has_identity)
    }

    /// The checked-out branch, `None` on a detached HEAD.
    async fn current_branch(&self) -> Result<Option<String>, ToolError> {
        let mut cmd = self.command();
        cmd.args(["symbolic-ref", "--quiet", "--short", "HEAD"]);
        let out = self.run("symbolic-ref", cmd).await?;
        let name = out.stdout.text().trim().to_owned();
        Ok((out.success() && !name.is_empty()).then_some(name))
    }

    /// Checks `name` is a valid branch name; returns it as git expands it.
    async fn branch_name(&self, name: &str) -> Result<String, ToolError> {
        check_revision_syntax("worktree", "branch", name)?;
        let mut cmd = self.command();
        cmd.args(["check-ref-format", "--branch", name]);
        let out = self.run("check-ref-format", cmd).await?;
        let branch = out.stdout.text().trim().to_owned();
        if !out.success() || branch.is_empty() || branch.starts_with('-') {
            return Err(invalid(
                "worktree",
                &format!("'{name}' is not a valid branch name"),
            ));
        }
        Ok(branch)
    }

    /// Checks `name` is a valid name of an existing local branch; returns it as
    /// git expands it (`@{-1}` → the previous branch).
    async fn local_branch(&self, name: &str) -> Result<String, ToolError> {
        let mut cmd = self.command();
        cmd.args(["check-ref-format", "--branch", name]);
        let out = self.run("check-ref-format", cmd).await?;
        let branch = out.stdout.text().trim().to_owned();
        if !out.success() || branch.is_empty() {
            return Err(invalid(
                "git.push",
                &format!("'{name}' is not a valid branch name"),
            ));
        }
        let mut cmd = self.command();
        cmd.args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"));
        if !self.run("rev-parse", cmd).await?.success() {
            return Err(invalid(
                "git.push",
                &format!("there is no local branch '{branch}'"),
            ));
        }
        Ok(branch)
    }
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
