//! A task's change as a reviewer reads it: its commits, each file it
//! changed against its base (committed or not) with line counts, and the
//! patches of a page of them.

use super::*;

impl Repository {
    /// The change of `branch` against `base` (a branch, or the commit it
    /// started from when the base is gone); with `worktree`, the name of the
    /// worktree whose uncommitted files count too.
    ///
    /// # Errors
    /// `FailedPrecondition` with git's message.
    pub async fn change(
        &self,
        branch: &str,
        base: &str,
        worktree: Option<&str>,
    ) -> Result<Change, ToolError> {
        check_revision_syntax("worktree", "base", base)?;
        let main = self.context(&self.root, "change")?;
        let git = Git::open(&main, "change").await?;
        let branch = git.branch_name(branch).await?;
        let head_commit = self.resolve(&git, &format!("refs/heads/{branch}")).await?;
        let base_tip = self.resolve(&git, base).await?;
        // A merge of the base going on in the worktree counts as done.
        let merging = worktree
            .map(|name| {
                Layout::worktree(&self.root, name)
                    .git_dir
                    .join("MERGE_HEAD")
            })
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|id| id.trim().to_owned())
            .filter(|id| is_hex(id));
        let mut args = vec![
            "merge-base".to_owned(),
            base_tip.clone(),
            head_commit.clone(),
        ];
        args.extend(merging);
        let base_commit = git
            .stdout_line("merge-base", &args)
            .await
            .unwrap_or(base_tip);
        let range = format!("{base_commit}..{head_commit}");
        let log = git
            .stdout_text(
                "log",
                [
                    "log",
                    "--no-color",
                    &format!("--max-count={}", MAX_COMMITS + 1),
                    "--format=%H%x1f%an%x1f%ct%x1f%s%x1e",
                    &range,
                    "--",
                ],
            )
            .await?;
        let mut commits = parse_log(&log);
        let more_commits = commits.len() > MAX_COMMITS;
        commits.truncate(MAX_COMMITS);

        let open = worktree
            .map(|name| Layout::worktree(&self.root, name))
            .filter(|l| l.work_tree.is_dir() && l.git_dir.is_dir());
        let (files, uncommitted) = match open {
            Some(target) => {
                let ctx = self.context(&target.work_tree, "change")?;
                let git = Git::open(&ctx, "change").await?;
                let index = WholeIndex::of(&ctx, &git).await?;
                let files = index.files(&git, &base_commit).await?;
                let uncommitted = uncommitted_paths(&git).await?;
                (files, uncommitted)
            }
            None => (
                changed_files(&git, &[&base_commit, &head_commit], None).await?,
                Vec::new(),
            ),
        };
        Ok(Change {
            base_commit,
            head_commit,
            commits,
            more_commits,
            files,
            uncommitted,
        })
    }

    /// The patch of the change's `paths` (all when empty), as [`change`]
    /// measures it, and whether git's output was cut at the output limit.
    ///
    /// [`change`]: Repository::change
    ///
    /// # Errors
    /// `FailedPrecondition` with git's message.
    pub async fn patch(
        &self,
        base_commit: &str,
        branch: &str,
        worktree: Option<&str>,
        paths: &[String],
        max_bytes: usize,
    ) -> Result<(String, bool), ToolError> {
        check_revision_syntax("worktree", "base", base_commit)?;
        for path in paths {
            if path.contains('\0') {
                return Err(invalid("a path contains a NUL byte"));
            }
        }
        let open = worktree
            .map(|name| Layout::worktree(&self.root, name))
            .filter(|l| l.work_tree.is_dir() && l.git_dir.is_dir());
        let root = open
            .as_ref()
            .map_or(self.root.clone(), |l| l.work_tree.clone());
        let mut ctx = self.context(&root, "change")?;
        ctx.limits.max_output_bytes = max_bytes;
        let git = Git::open(&ctx, "change").await?;
        let mut cmd = git.command();
        let _index = match &open {
            Some(_) => {
                let index = WholeIndex::of(&ctx, &git).await?;
                cmd.env("GIT_INDEX_FILE", &index.path);
                cmd.args(DIFF_ARGS)
                    .args(["--cached", "--patch", base_commit]);
                Some(index)
            }
            None => {
                let branch = git.branch_name(branch).await?;
                cmd.args(DIFF_ARGS)
                    .args(["--patch", base_commit])
                    .arg(format!("refs/heads/{branch}"));
                None
            }
        };
        cmd.arg("--").args(paths);
        let out = git.check("diff", cmd).await?;
        Ok((out.stdout.text(), out.stdout.truncated))
    }
}
