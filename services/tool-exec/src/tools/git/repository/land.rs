//! Landing a task's branch: bringing its base in, concluding its whole
//! work in one commit, and moving the base to it (fast-forward, merge or
//! squash) with nothing changed when git refuses.

use super::*;

/// What bringing a base into a worktree did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BroughtIn {
    /// The branch has every commit of the base already.
    UpToDate,
    /// Merged cleanly: the merge commit.
    Merged(String),
    /// The merge is going on, these files holding conflict markers.
    Conflicts(Vec<String>),
}

impl Repository {
    /// Brings `base` (a branch, or a commit) into the worktree `name`'s
    /// branch when the base has commits the branch lacks: a merge commit
    /// when it merges cleanly; else the merge is left going, with git's
    /// conflict markers in the files it names (the worktree's whole work —
    /// see [`Repository::whole_commit`] — concludes it).
    ///
    /// # Errors
    /// `FailedPrecondition` with git's message when the merge could not
    /// even start (it is undone).
    pub async fn bring_in(
        &self,
        name: &str,
        base: &str,
        message: &str,
    ) -> Result<BroughtIn, ToolError> {
        check_revision_syntax("worktree", "base", base)?;
        let target = Layout::worktree(&self.root, name);
        let ctx = self.context(&target.work_tree, "worktree")?;
        let git = Git::open(&ctx, "worktree").await?;
        let base_tip = self.resolve(&git, base).await?;
        if is_ancestor(&git, &base_tip, "HEAD").await? {
            return Ok(BroughtIn::UpToDate);
        }
        let mut cmd = git.command();
        cmd.env("GIT_AUTHOR_NAME", "Chorus")
            .env("GIT_AUTHOR_EMAIL", "chorus@chorus.invalid")
            .env("GIT_COMMITTER_NAME", "Chorus")
            .env("GIT_COMMITTER_EMAIL", "chorus@chorus.invalid")
            .args([
                "merge",
                "--no-ff",
                "--no-edit",
                "--no-verify",
                "--quiet",
                "-m",
                message,
            ])
            .arg(&base_tip);
        let out = git.run("merge", cmd).await?;
        if out.success() {
            return Ok(BroughtIn::Merged(
                git.stdout_line("rev-parse", ["rev-parse", "HEAD"]).await?,
            ));
        }
        let conflicted = git
            .stdout_text(
                "diff",
                ["diff", "--name-only", "--diff-filter=U", "-z", "--no-color"],
            )
            .await?;
        let mut files: Vec<String> = conflicted
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        if files.is_empty() {
            let mut abort = git.command();
            abort.args(["merge", "--abort"]);
            let _ = git.run("merge", abort).await;
            return Err(ToolError::FailedPrecondition(format!(
                "git merge of '{base}' failed: {}",
                super::super::quote(&out.stderr.text())
            )));
        }
        files.sort();
        Ok(BroughtIn::Conflicts(files))
    }

    /// One commit holding all of the worktree `name`'s work: its branch's
    /// tip when nothing is uncommitted, else a commit on top of it with the
    /// rest (made as an object only: no ref moves, nothing the agent staged
    /// changes).
    ///
    /// # Errors
    /// `FailedPrecondition` with git's message.
    pub async fn whole_commit(&self, name: &str, message: &str) -> Result<String, ToolError> {
        let target = Layout::worktree(&self.root, name);
        let ctx = self.context(&target.work_tree, "change")?;
        let git = Git::open(&ctx, "change").await?;
        let head = git.stdout_line("rev-parse", ["rev-parse", "HEAD"]).await?;
        let index = WholeIndex::of(&ctx, &git).await?;
        let mut cmd = git.command();
        cmd.env("GIT_INDEX_FILE", &index.path).arg("write-tree");
        let tree = git
            .check("write-tree", cmd)
            .await?
            .stdout
            .text()
            .trim()
            .to_owned();
        let head_tree = git
            .stdout_line("rev-parse", ["rev-parse", "HEAD^{tree}"])
            .await?;
        // A merge going on (the base brought in, its conflicts resolved in
        // the files) is concluded by this commit.
        let merging = std::fs::read_to_string(target.git_dir.join("MERGE_HEAD"))
            .ok()
            .map(|id| id.trim().to_owned())
            .filter(|id| is_hex(id));
        if tree == head_tree && merging.is_none() {
            return Ok(head);
        }
        let mut cmd = git.command();
        cmd.env("GIT_AUTHOR_NAME", "Chorus")
            .env("GIT_AUTHOR_EMAIL", "chorus@chorus.invalid")
            .env("GIT_COMMITTER_NAME", "Chorus")
            .env("GIT_COMMITTER_EMAIL", "chorus@chorus.invalid")
            .args(["commit-tree", &tree, "-p", &head]);
        let mut message = message.to_owned();
        if let Some(other) = &merging {
            cmd.args(["-p", other]);
            // The merge's own message (what git would conclude it with).
            if let Ok(text) = std::fs::read_to_string(target.git_dir.join("MERGE_MSG")) {
                let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
                if !kept.join("").trim().is_empty() {
                    message = kept.join("\n").trim().to_owned();
                }
            }
        }
        cmd.args(["-m", &message]);
        Ok(git
            .check("commit-tree", cmd)
            .await?
            .stdout
            .text()
            .trim()
            .to_owned())
    }

    /// Lands `tip` (a commit or branch: a task's whole work, see
    /// [`Repository::whole_commit`]) in the branch `base`, as `mode` says;
    /// the resulting commit is the base's new tip. `message` is the merge
    /// or squash commit's message and `author` (`name`, `email`) its author.
    ///
    /// Nothing changes when it is refused: a conflict is found before any
    /// ref moves; the base checked out at the repository's top level moves
    /// with its files as `git merge --ff-only` moves them, refusing when a
    /// file changed there would be overwritten.
    ///
    /// # Errors
    /// `Err(Ok(Refused))` for a refusal, `Err(Err(ToolError))` when git
    /// could not be run.
    pub async fn land(
        &self,
        tip: &str,
        base: &str,
        mode: LandMode,
        message: &str,
        author: (&str, &str),
    ) -> Result<Landed, Result<Refused, ToolError>> {
        check_revision_syntax("worktree", "tip", tip).map_err(Err)?;
        let ctx = self.context(&self.root, "land").map_err(Err)?;
        let git = Git::open(&ctx, "land").await.map_err(Err)?;
        let base = git.branch_name(base).await.map_err(|_| {
            Ok(Refused::Other(format!(
                "the base '{base}' is not a branch, so there is nothing to land into; start a follow-up task on a branch"
            )))
        })?;
        let tip = self.resolve(&git, tip).await.map_err(Err)?;
        let base_tip = self
            .resolve(&git, &format!("refs/heads/{base}"))
            .await
            .map_err(|_| {
                Ok(Refused::Other(format!(
                    "the base branch '{base}' no longer exists; recreate it, or start a follow-up task on another base"
                )))
            })?;
        if is_ancestor(&git, &tip, &base_tip).await.map_err(Err)? {
            return Err(Ok(Refused::Other(format!(
                "the work has nothing '{base}' lacks; there is nothing to land (discard it instead)"
            ))));
        }
        let forward = is_ancestor(&git, &base_tip, &tip).await.map_err(Err)?;
        let new = match (mode, forward) {
            (LandMode::FastForward | LandMode::Merge, true) => tip.clone(),
            (LandMode::FastForward, false) => {
                return Err(Ok(Refused::Other(format!(
                    "'{base}' has moved since the branch left it, so it cannot fast-forward; land with merge or squash, or bring '{base}' into the branch with a follow-up task"
                ))));
            }
            (LandMode::Merge | LandMode::Squash, _) => {
                let tree = merged_tree(&git, &base_tip, &tip).await?;
                let mut cmd = git.command();
                cmd.env("GIT_AUTHOR_NAME", author.0)
                    .env("GIT_AUTHOR_EMAIL", author.1)
                    .env("GIT_COMMITTER_NAME", author.0)
                    .env("GIT_COMMITTER_EMAIL", author.1)
                    .args(["commit-tree", &tree, "-p", &base_tip]);
                if mode == LandMode::Merge {
                    cmd.args(["-p", &tip]);
                }
                cmd.arg("-m").arg(message);
                let out = git.check("commit-tree", cmd).await.map_err(Err)?;
                out.stdout.text().trim().to_owned()
            }
        };
        self.move_base(&git, &base, &base_tip, &new).await?;
        Ok(Landed {
            commit: new.clone(),
            fast_forward: new == tip && forward,
        })
    }

    /// Moves the branch `base` from `from` to `to` (a descendant): with
    /// `git merge --ff-only` where it is checked out at the top level (its
    /// files move too), else the ref alone, only if it still is at `from`.
    async fn move_base(
        &self,
        git: &Git<'_>,
        base: &str,
        from: &str,
        to: &str,
    ) -> Result<(), Result<Refused, ToolError>> {
        if let Some(path) = checked_out_elsewhere(git, &self.root, base)
            .await
            .map_err(Err)?
        {
            return Err(Ok(Refused::Other(format!(
                "'{base}' is checked out in the worktree {path}, whose files would not follow; land it from there, or check out another branch there"
            ))));
        }
        let at_top = git.current_branch().await.map_err(Err)?.as_deref() == Some(base);
        let mut cmd = git.command();
        if at_top {
            cmd.args(["merge", "--ff-only", "--no-verify", "--quiet", to]);
        } else {
            cmd.args(["update-ref", "-m", "chorus: land"])
                .arg(format!("refs/heads/{base}"))
                .args([to, from]);
        }
        let out = git.run("merge", cmd).await.map_err(Err)?;
        if out.success() {
            return Ok(());
        }
        let stderr = out.stderr.text();
        let files = overwritten_files(&stderr);
        Err(Ok(Refused::Other(if files.is_empty() {
            format!(
                "'{base}' could not be moved: {}",
                super::super::quote(&stderr)
            )
        } else {
            format!(
                "'{base}' is checked out at the workspace's top level, where {} changed and not committed; commit or undo that there, then land again",
                files.join(", ")
            )
        })))
    }
}
