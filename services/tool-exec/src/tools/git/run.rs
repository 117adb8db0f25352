//! Running git for one tool call: the repository checked to be its own,
//! its configuration read as data and shown to git without what could run
//! programs, and each command confined like every process of a run.

use super::*;

/// One git command line and what it adds to the environment.
#[derive(Debug, Default)]
pub(super) struct GitCommand {
    pub(super) args: Vec<OsString>,
    pub(super) env: Vec<(OsString, OsString)>,
    /// It may reach the network (a push by a run with the network grant).
    pub(super) network: bool,
}

impl GitCommand {
    pub(super) fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub(super) fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub(super) fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }
}

/// Runs git commands for one tool call.
pub(super) struct Git<'a> {
    pub(super) ctx: &'a ToolContext,
    pub(super) root: PathBuf,
    /// Where git finds the repository (the root's `.git`, or a task
    /// worktree's own directories).
    pub(super) layout: Layout,
    pub(super) identity: Identity,
    /// The configuration git is shown in place of the repository's (None
    /// while it is being read).
    pub(super) config: Option<Shown>,
}

/// The repository's configuration as git sees it.
pub(super) struct Shown {
    /// The common directory git reads in place of `.git`, whose `config`
    /// holds the allowed entries (removed when the call ends).
    pub(super) common_dir: tempfile::TempDir,
    /// Whether it names an author (user.name and user.email).
    pub(super) has_identity: bool,
}

impl<'a> Git<'a> {
    /// Checks `<root>/.git` is the repository's own directory, finds the user
    /// git runs as, and reads the repository's configuration as data.
    pub(super) async fn open(ctx: &'a ToolContext, _tool: &'static str) -> Result<Self, ToolError> {
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
    pub(super) fn command(&self) -> GitCommand {
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
    pub(super) async fn run(&self, what: &str, cmd: GitCommand) -> Result<Finished, ToolError> {
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
            network_questions: self.ctx.network_questions.clone(),
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
    pub(super) fn base_env(&self, network: bool) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
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
    pub(super) fn through_proxy(
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
    pub(super) fn stopped(&self, what: &str) -> ToolError {
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
    pub(super) async fn check(&self, what: &str, cmd: GitCommand) -> Result<Finished, ToolError> {
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
    pub(super) async fn stdout_text<I, S>(&self, what: &str, args: I) -> Result<String, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command();
        cmd.args(args);
        Ok(self.check(what, cmd).await?.stdout.text())
    }

    /// The first line of stdout of a successful git command.
    pub(super) async fn stdout_line<I, S>(&self, what: &str, args: I) -> Result<String, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let text = self.stdout_text(what, args).await?;
        Ok(text.lines().next().unwrap_or_default().to_owned())
    }

    /// The full id of the commit `revision` names.
    pub(super) async fn commit_id(&self, revision: &str) -> Result<String, ToolError> {
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
    pub(super) async fn in_reach(&self, id: &str) -> Result<bool, ToolError> {
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
    pub(super) async fn has_staged_changes(&self) -> Result<bool, ToolError> {
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
    pub(super) fn has_identity(&self) -> bool {
        self.config.as_ref().is_some_and(|c| c.has_identity)
    }

    /// The checked-out branch, `None` on a detached HEAD.
    pub(super) async fn current_branch(&self) -> Result<Option<String>, ToolError> {
        let mut cmd = self.command();
        cmd.args(["symbolic-ref", "--quiet", "--short", "HEAD"]);
        let out = self.run("symbolic-ref", cmd).await?;
        let name = out.stdout.text().trim().to_owned();
        Ok((out.success() && !name.is_empty()).then_some(name))
    }

    /// Checks `name` is a valid branch name; returns it as git expands it.
    pub(super) async fn branch_name(&self, name: &str) -> Result<String, ToolError> {
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
    pub(super) async fn local_branch(&self, name: &str) -> Result<String, ToolError> {
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
