//! git.status, git.diff, git.commit and git.push against real repositories.

use std::path::Path;

use chorus_catalog::outputs;
use chorus_tool_exec::ToolError;
use serde::de::DeserializeOwned;
use serde_json::json;

use chorus_sandbox::testing::give_to_test_user;

use chorus_sandbox::testing::GitDaemon;

use crate::common::{Harness, configure, git, git_command, init_repo, write};

fn parse<T: DeserializeOwned>(outcome: &chorus_tool_exec::context::ToolOutcome) -> T {
    serde_json::from_value(outcome.output.clone()).expect("tool output")
}

/// A repository with one commit of a.txt, b.txt and old.txt.
async fn repo() -> Harness {
    let h = Harness::new().await;
    init_repo(&h.root);
    h.write("a.txt", "alpha\n");
    h.write("b.txt", "beta\n");
    h.write("old.txt", "to be renamed\n");
    git(&h.root, &["add", "."]);
    git(&h.root, &["commit", "-q", "-m", "first"]);
    h
}

fn head(dir: &Path) -> String {
    git(dir, &["rev-parse", "HEAD"]).trim().to_owned()
}

fn entry<'a>(status: &'a outputs::GitStatus, path: &str) -> &'a outputs::GitStatusEntry {
    status
        .entries
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("no entry for {path} in {status:?}"))
}

fn failed_precondition(err: &ToolError) -> &str {
    match err {
        ToolError::FailedPrecondition(message) => message,
        other => panic!("expected a failed precondition, got {other:?}"),
    }
}

#[tokio::test]
async fn status_reports_modified_staged_untracked_and_renamed_files() {
    let h = repo().await;
    let clean: outputs::GitStatus = parse(&h.ok("git.status", json!({})).await);
    assert!(clean.clean);
    assert_eq!(clean.branch.as_deref(), Some("main"));

    h.write("a.txt", "alpha changed\n");
    h.write("staged.txt", "new\n");
    git(&h.root, &["add", "staged.txt"]);
    h.write("untracked file.txt", "?\n");
    git(&h.root, &["mv", "old.txt", "new.txt"]);

    let status: outputs::GitStatus = parse(&h.ok("git.status", json!({})).await);
    assert!(!status.clean);
    assert_eq!(status.branch.as_deref(), Some("main"));
    assert_eq!(status.upstream, None);
    assert_eq!((status.ahead, status.behind), (0, 0));
    assert_eq!(status.entries.len(), 4, "{status:?}");
    let a = entry(&status, "a.txt");
    assert_eq!((a.index.as_str(), a.worktree.as_str()), (" ", "M"));
    let staged = entry(&status, "staged.txt");
    assert_eq!(
        (staged.index.as_str(), staged.worktree.as_str()),
        ("A", " ")
    );
    let untracked = entry(&status, "untracked file.txt");
    assert_eq!(
        (untracked.index.as_str(), untracked.worktree.as_str()),
        ("?", "?")
    );
    let renamed = entry(&status, "new.txt");
    assert_eq!(renamed.index, "R");
    assert_eq!(renamed.orig_path.as_deref(), Some("old.txt"));
}

#[tokio::test]
async fn git_works_only_on_the_roots_own_git_directory() {
    let h = repo().await;
    h.write("sub/inner.txt", "in\n");
    // A workspace below the repository's top level: git would have to look
    // above the root to find the repository, which it never does.
    let sub = h.root.join("sub");
    let err = h
        .runner
        .execute(h.grant_at(&sub), "git.status", json!({}))
        .await
        .expect_err("refused");
    assert!(
        failed_precondition(&err).contains("has no .git directory"),
        "{err}"
    );

    // A .git file (a worktree's pointer) or a symlink to a repository elsewhere.
    let other = tempfile::tempdir().expect("tempdir");
    let pointer = other.path().join("pointer");
    let link = other.path().join("link");
    std::fs::create_dir(&pointer).expect("dir");
    std::fs::create_dir(&link).expect("dir");
    std::fs::write(
        pointer.join(".git"),
        format!("gitdir: {}\n", h.root.join(".git").display()),
    )
    .expect(".git file");
    std::os::unix::fs::symlink(h.root.join(".git"), link.join(".git")).expect("symlink");
    give_to_test_user(other.path());
    for root in [&pointer, &link] {
        let err = h
            .runner
            .execute(h.grant_at(root), "git.status", json!({}))
            .await
            .expect_err("refused");
        assert!(
            failed_precondition(&err).contains("has no .git directory"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn diff_shows_unstaged_staged_base_and_path_limited_changes() {
    let h = repo().await;
    let first = head(&h.root);
    h.write("a.txt", "alpha unstaged\n");
    h.write("b.txt", "beta staged\n");
    git(&h.root, &["add", "b.txt"]);

    let unstaged: outputs::GitDiff = parse(&h.ok("git.diff", json!({})).await);
    assert!(
        unstaged.diff.contains("+alpha unstaged"),
        "{}",
        unstaged.diff
    );
    assert!(!unstaged.diff.contains("b.txt"));
    assert!(!unstaged.truncated);

    let staged: outputs::GitDiff = parse(&h.ok("git.diff", json!({"staged": true})).await);
    assert!(staged.diff.contains("+beta staged"));
    assert!(!staged.diff.contains("a.txt"));

    git(&h.root, &["commit", "-q", "-m", "second"]);
    let since_first: outputs::GitDiff = parse(&h.ok("git.diff", json!({"base": first})).await);
    assert!(since_first.diff.contains("+beta staged"));
    assert!(since_first.diff.contains("+alpha unstaged"));
    let by_name: outputs::GitDiff = parse(&h.ok("git.diff", json!({"base": "HEAD~1"})).await);
    assert_eq!(by_name, since_first);

    let only_b: outputs::GitDiff = parse(
        &h.ok("git.diff", json!({"base": "HEAD~1", "paths": ["b.txt"]}))
            .await,
    );
    assert!(only_b.diff.contains("b.txt"));
    assert!(!only_b.diff.contains("a.txt"));
}

#[tokio::test]
async fn diff_paths_outside_the_root_are_refused() {
    let h = repo().await;
    for path in ["../elsewhere", "/etc/passwd"] {
        let err = h
            .call("git.diff", json!({"paths": [path]}))
            .await
            .expect_err("refused");
        assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
    }
}

#[tokio::test]
async fn diff_bases_that_look_like_options_or_name_nothing_are_refused() {
    let h = repo().await;
    let marker = h.root.join("written-by-output-option");
    let option = format!("--output={}", marker.display());
    for base in [option.as_str(), "-p", "no-such-branch", ""] {
        let err = h
            .call("git.diff", json!({ "base": base }))
            .await
            .expect_err("refused");
        assert!(
            matches!(err, ToolError::InvalidArguments { .. }),
            "{base}: {err}"
        );
    }
    assert!(!marker.exists());
    let err = h
        .call("git.diff", json!({"base": "no-such-branch"}))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("unknown revision"), "{err}");
}

#[tokio::test]
async fn commit_stages_the_given_paths_only() {
    let h = repo().await;
    h.write("a.txt", "alpha 2\n");
    h.write("b.txt", "beta 2\n");
    let outcome = h
        .ok(
            "git.commit",
            json!({"message": "change a", "paths": ["a.txt"]}),
        )
        .await;
    let commit: outputs::GitCommit = parse(&outcome);
    assert_eq!(commit.commit, head(&h.root));
    assert_eq!(commit.commit.len(), 40);
    assert_eq!(commit.branch.as_deref(), Some("main"));
    assert!(commit.summary.contains("change a"), "{}", commit.summary);
    assert_eq!(git(&h.root, &["log", "-1", "--format=%s"]), "change a\n");
    assert_eq!(
        git(&h.root, &["show", "--name-only", "--format=", "HEAD"]),
        "a.txt\n"
    );
    // b.txt is still only changed in the working tree.
    assert_eq!(git(&h.root, &["status", "--porcelain"]), " M b.txt\n");
}

#[tokio::test]
async fn commit_all_stages_new_modified_and_deleted_files() {
    let h = repo().await;
    h.write("a.txt", "alpha 2\n");
    h.write("brand-new.txt", "new\n");
    std::fs::remove_file(h.root.join("b.txt")).expect("rm");
    let message = "--amend looks like an option but is a message";
    h.ok("git.commit", json!({"message": message, "all": true}))
        .await;
    assert_eq!(git(&h.root, &["status", "--porcelain"]), "");
    assert_eq!(git(&h.root, &["log", "-1", "--format=%s"]).trim(), message);
    assert_eq!(git(&h.root, &["rev-list", "--count", "HEAD"]).trim(), "2");
}

#[tokio::test]
async fn committing_nothing_is_a_failed_precondition() {
    let h = repo().await;
    let err = h
        .call("git.commit", json!({"message": "nothing", "all": true}))
        .await
        .expect_err("refused");
    assert!(
        failed_precondition(&err).contains("nothing to commit"),
        "{err}"
    );

    h.write("a.txt", "changed but not staged\n");
    let err = h
        .call("git.commit", json!({"message": "nothing staged"}))
        .await
        .expect_err("refused");
    assert!(
        failed_precondition(&err).contains("nothing to commit"),
        "{err}"
    );
}

#[tokio::test]
async fn commit_arguments_are_checked() {
    let h = repo().await;
    h.write("a.txt", "changed\n");
    let err = h
        .call("git.commit", json!({"message": "  ", "all": true}))
        .await
        .expect_err("empty message");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    let err = h
        .call(
            "git.commit",
            json!({"message": "m", "paths": [".git/config"]}),
        )
        .await
        .expect_err(".git");
    assert!(matches!(err, ToolError::ProtectedPath { .. }), "{err}");
    let err = h
        .call("git.commit", json!({"message": "m", "paths": ["../x"]}))
        .await
        .expect_err("outside");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
}

#[tokio::test]
async fn hooks_never_run() {
    let h = repo().await;
    // Inside the workspace: a hook run by the tools could write there.
    let marker = h.root.join("hook-ran");
    let hook = format!("#!/bin/sh\necho ran >> '{}'\n", marker.display());
    // Hooks in .git/hooks, and in a directory the repository's config names.
    for dir in [h.root.join(".git/hooks"), h.root.join("my-hooks")] {
        for name in ["pre-commit", "commit-msg", "post-commit", "pre-push"] {
            let path = dir.join(name);
            write(&dir, name, &hook);
            let status = std::process::Command::new("chmod")
                .arg("+x")
                .arg(&path)
                .status()
                .expect("chmod");
            assert!(status.success());
        }
    }
    give_to_test_user(&h.root);
    h.write("a.txt", "changed\n");
    h.ok(
        "git.commit",
        json!({"message": "no hooks", "paths": ["a.txt"]}),
    )
    .await;
    git(&h.root, &["config", "core.hooksPath", "my-hooks"]);
    h.write("a.txt", "changed again\n");
    h.ok(
        "git.commit",
        json!({"message": "still no hooks", "all": true}),
    )
    .await;
    assert!(!marker.exists(), "a hook ran");

    // The hooks are real: git on its own runs them.
    git(
        &h.root,
        &["commit", "-q", "--allow-empty", "-m", "with hooks"],
    );
    assert!(marker.exists());
}

#[tokio::test]
async fn without_an_identity_the_agent_commits_as_itself() {
    let h = repo().await;
    // Empty local values win over any global identity.
    git(&h.root, &["config", "user.name", ""]);
    git(&h.root, &["config", "user.email", ""]);
    h.write("a.txt", "by the agent\n");
    h.ok(
        "git.commit",
        json!({"message": "agent commit", "all": true}),
    )
    .await;
    assert_eq!(
        git(&h.root, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
        "coder (chorus) <coder@chorus.invalid>|coder (chorus) <coder@chorus.invalid>"
    );
}

#[tokio::test]
async fn with_an_identity_the_repository_identity_is_used() {
    let h = repo().await;
    h.write("a.txt", "by the user\n");
    h.ok("git.commit", json!({"message": "user commit", "all": true}))
        .await;
    assert_eq!(
        git(&h.root, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "Test User <test@example.com>"
    );
}

/// A repository whose origin is a bare repository served by a git daemon in
/// a test network namespace (pushes go over the network: local transports
/// are refused), which the run's egress list names. None without root (the
/// test is not run; it fails with `CHORUS_TEST_REQUIRE_ROOT=1`).
async fn repo_with_origin() -> Option<(Harness, tempfile::TempDir, GitDaemon)> {
    if !chorus_sandbox::testing::root_for("a git daemon in a test network namespace") {
        return None;
    }
    let mut h = repo().await;
    let remote = tempfile::tempdir().expect("tempdir");
    give_to_test_user(remote.path());
    git(
        remote.path(),
        &["init", "-q", "--bare", "-b", "main", "origin.git"],
    );
    let daemon = GitDaemon::serve(remote.path()).await;
    git(
        &h.root,
        &["remote", "add", "origin", &daemon.url("origin.git")],
    );
    h.egress = vec![daemon.rule()];
    Some((h, remote, daemon))
}

/// git.push by a run with the network grant.
async fn push(
    h: &Harness,
    args: serde_json::Value,
) -> Result<chorus_tool_exec::context::ToolOutcome, ToolError> {
    h.call_with_network("git.push", args).await
}

#[tokio::test]
async fn push_sends_the_current_branch_to_origin() {
    let Some((h, remote_dir, _daemon)) = repo_with_origin().await else {
        return;
    };
    let remote = remote_dir.path().join("origin.git");
    let outcome = push(&h, json!({})).await.expect("pushed");
    let first: outputs::GitPush = parse(&outcome);
    assert_eq!(first.remote, "origin");
    assert_eq!(first.branch, "main");
    assert!(first.output.contains("main -> main"), "{}", first.output);
    assert_eq!(
        git(&remote, &["rev-parse", "refs/heads/main"]).trim(),
        head(&h.root)
    );

    // A named branch other than the current one.
    git(&h.root, &["branch", "feature"]);
    let pushed: outputs::GitPush = parse(
        &push(&h, json!({"remote": "origin", "branch": "feature"}))
            .await
            .expect("pushed"),
    );
    assert_eq!(pushed.branch, "feature");
    assert_eq!(
        git(&remote, &["rev-parse", "refs/heads/feature"]).trim(),
        head(&h.root)
    );
}

#[tokio::test]
async fn push_only_goes_to_configured_remotes_and_existing_branches() {
    let Some((h, remote_dir, daemon)) = repo_with_origin().await else {
        return;
    };
    let remote = remote_dir.path().join("origin.git");
    let url = daemon.url("origin.git");
    for (args, expected) in [
        (json!({"remote": "upstream"}), "configured remotes: origin"),
        (json!({"remote": url}), "configured remotes: origin"),
        (
            json!({"remote": "--receive-pack=touch x"}),
            "must not start with '-'",
        ),
        (json!({"branch": "no-such-branch"}), "no local branch"),
        (json!({"branch": "bad..name"}), "not a valid branch name"),
        (json!({"branch": "+main"}), "no local branch"),
    ] {
        let err = push(&h, args.clone()).await.expect_err("refused");
        assert!(
            matches!(err, ToolError::InvalidArguments { .. }),
            "{args}: {err}"
        );
        assert!(err.to_string().contains(expected), "{args}: {err}");
    }
    // Nothing reached the remote.
    assert_eq!(git(&remote, &["branch", "--list"]), "");
}

#[tokio::test]
async fn a_non_fast_forward_push_is_rejected_and_never_forced() {
    let Some((h, remote_dir, _daemon)) = repo_with_origin().await else {
        return;
    };
    let remote = remote_dir.path().join("origin.git");
    push(&h, json!({})).await.expect("pushed");

    // Someone else pushes first.
    let other = tempfile::tempdir().expect("tempdir");
    give_to_test_user(other.path());
    let url = remote.to_str().expect("utf8");
    let status = git_command(other.path(), &["clone", "-q", url, "."])
        .status()
        .expect("clone");
    assert!(status.success());
    configure(other.path());
    write(other.path(), "theirs.txt", "theirs\n");
    git(other.path(), &["add", "."]);
    git(other.path(), &["commit", "-q", "-m", "theirs"]);
    git(other.path(), &["push", "-q", "origin", "main"]);
    let theirs = head(other.path());

    h.write("a.txt", "ours\n");
    h.ok("git.commit", json!({"message": "ours", "all": true}))
        .await;
    let err = push(&h, json!({})).await.expect_err("rejected");
    let message = failed_precondition(&err);
    assert!(message.contains("rejected"), "{message}");
    assert!(message.contains("never forces"), "{message}");
    assert_eq!(
        git(&remote, &["rev-parse", "refs/heads/main"]).trim(),
        theirs
    );
}

#[tokio::test]
async fn push_with_no_remotes_says_how_to_add_one() {
    let h = repo().await;
    let err = push(&h, json!({})).await.expect_err("refused");
    assert!(err.to_string().contains("git remote add"), "{err}");
}

#[tokio::test]
async fn a_workspace_that_is_not_a_repository_is_a_failed_precondition() {
    let h = Harness::new().await;
    refused_by_every_git_tool(
        &h,
        "the workspace root has no .git directory: git tools work on a repository whose top level is the workspace root (run git init with bash)",
    )
    .await;
}

/// Every way a repository's configuration names a program, each of which
/// would create `<name>-ran` in the workspace if git ran it.
fn arm_the_repository(h: &Harness) {
    let ran = |what: &str| format!("sh -c 'touch {}/{what}-ran' #", h.root.display());
    for (key, value) in [
        ("core.sshCommand", ran("ssh")),
        ("core.gitProxy", ran("gitproxy")),
        ("core.fsmonitor", ran("fsmonitor")),
        ("core.pager", ran("pager")),
        ("core.editor", ran("editor")),
        ("core.askPass", ran("askpass")),
        ("core.alternateRefsCommand", ran("alternate")),
        ("credential.helper", format!("!{}", ran("credential"))),
        ("filter.evil.clean", ran("clean")),
        ("filter.evil.smudge", ran("smudge")),
        ("filter.evil.process", ran("process")),
        ("filter.evil.required", "true".to_owned()),
        ("diff.evil.textconv", ran("textconv")),
        ("diff.evil.command", ran("diffcommand")),
        ("diff.external", ran("external")),
        ("merge.evil.driver", ran("merge")),
        ("gpg.program", ran("gpg")),
        ("commit.gpgSign", "true".to_owned()),
        ("hook.evil.command", ran("confighook")),
        ("hook.evil.event", "pre-commit".to_owned()),
        (
            "remote.origin.url",
            format!("ext::{}", ran("ext").replace(' ', "% ")),
        ),
        ("remote.origin.vcs", "ext".to_owned()),
        (
            "url.ext::sh -c touch% ran-insteadof #.insteadOf",
            "https://example.invalid/".to_owned(),
        ),
        (
            "remote.elsewhere.url",
            "https://example.invalid/repo.git".to_owned(),
        ),
    ] {
        git(&h.root, &["config", key, &value]);
    }
    h.write(".gitattributes", "* filter=evil diff=evil merge=evil\n");
}

/// Every git tool (by a run with the network grant) is refused with a failed
/// precondition starting with `message`.
async fn refused_by_every_git_tool(h: &Harness, message: &str) {
    for (tool, args) in [
        ("git.status", json!({})),
        ("git.diff", json!({})),
        ("git.commit", json!({"message": "m", "all": true})),
        ("git.push", json!({})),
    ] {
        let err = h.call_with_network(tool, args).await.expect_err("refused");
        assert!(
            failed_precondition(&err).starts_with(message),
            "{tool}: {err}"
        );
    }
}

fn nothing_ran(h: &Harness) {
    let ran: Vec<String> = std::fs::read_dir(&h.root)
        .expect("read root")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("ran"))
        .collect();
    assert_eq!(
        ran,
        Vec::<String>::new(),
        "programs named by the repository ran"
    );
}

#[tokio::test]
async fn a_repositorys_configuration_runs_no_program() {
    let h = repo().await;
    arm_the_repository(&h);
    h.write("a.txt", "changed\n");
    // Each tool either works or fails; none runs what the repository names.
    let status = h.call("git.status", json!({})).await;
    let diff = h.call("git.diff", json!({})).await;
    let staged = h
        .call("git.diff", json!({"staged": true, "base": "HEAD"}))
        .await;
    let commit = h
        .call("git.commit", json!({"message": "armed", "all": true}))
        .await;
    for remote in ["origin", "elsewhere"] {
        let pushed = push(&h, json!({ "remote": remote })).await;
        assert!(pushed.is_err(), "{remote}: {pushed:?}");
    }
    nothing_ran(&h);
    // The tools still work: status and diff answered, and the commit was made
    // (unsigned: the signing program is never run).
    let status: outputs::GitStatus = parse(&status.expect("status"));
    assert!(!status.clean);
    assert!(
        parse::<outputs::GitDiff>(&diff.expect("diff"))
            .diff
            .contains("+changed")
    );
    staged.expect("staged diff");
    let commit: outputs::GitCommit = parse(&commit.expect("commit"));
    assert_eq!(commit.commit, head(&h.root));
}

#[tokio::test]
async fn the_bare_repository_trick_runs_nothing() {
    // No .git: the workspace root itself made to look like a bare repository,
    // with a configuration that runs programs.
    let h = Harness::new().await;
    let ran = |what: &str| format!("sh -c 'touch {}/{what}-ran' #", h.root.display());
    h.write("HEAD", "ref: refs/heads/main\n");
    h.write(
        "config",
        &format!(
            "[core]\n\tbare = true\n\tsshCommand = {}\n\tfsmonitor = {}\n\
             [filter \"evil\"]\n\tclean = {}\n\
             [remote \"origin\"]\n\turl = ext::{}\n",
            ran("ssh"),
            ran("fsmonitor"),
            ran("clean"),
            ran("ext").replace(' ', "% ")
        ),
    );
    h.write(".gitattributes", "* filter=evil\n");
    h.write("objects/info/packs", "");
    h.write("refs/heads/.keep", "");
    h.write("a.txt", "content\n");
    refused_by_every_git_tool(&h, "the workspace root has no .git directory").await;
    nothing_ran(&h);
}

#[tokio::test]
async fn a_push_needs_an_egress_rule_for_its_remote() {
    let Some((mut h, remote_dir, daemon)) = repo_with_origin().await else {
        return;
    };
    for egress in [Vec::new(), vec![format!("{}:22", daemon.host)]] {
        h.egress = egress;
        let err = push(&h, json!({})).await.expect_err("refused");
        let message = failed_precondition(&err);
        assert!(
            message.contains(&format!(
                "egress to {}:{} is not allowed",
                daemon.host, daemon.port
            )),
            "{message}"
        );
    }
    assert_eq!(
        git(&remote_dir.path().join("origin.git"), &["branch", "--list"]),
        ""
    );
}

#[tokio::test]
async fn a_push_needs_the_network_grant() {
    let Some((h, remote_dir, _daemon)) = repo_with_origin().await else {
        return;
    };
    let err = h.call("git.push", json!({})).await.expect_err("refused");
    assert!(matches!(err, ToolError::GrantMissing { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "git.push needs the 'network' grant, which agent 'coder' does not have; add \"network\" to its allowed tools"
    );
    assert_eq!(
        git(&remote_dir.path().join("origin.git"), &["branch", "--list"]),
        ""
    );
}

/// A repository just made with git init (no ref log yet): the first commit
/// is the tool's, and git keeps its ref log in the repository.
#[tokio::test]
async fn the_first_commit_of_a_new_repository_is_made_and_logged() {
    let h = Harness::new().await;
    init_repo(&h.root);
    h.write("first.txt", "one\n");
    let outcome = h
        .ok("git.commit", json!({"message": "first", "all": true}))
        .await;
    let commit: outputs::GitCommit = parse(&outcome);
    assert_eq!(commit.commit, head(&h.root));
    assert_eq!(
        git(&h.root, &["reflog", "--format=%gs", "main"]).trim(),
        "commit (initial): first"
    );
    let logs = std::fs::metadata(h.root.join(".git/logs")).expect(".git/logs");
    let root = std::fs::metadata(&h.root).expect("root");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(logs.uid(), root.uid(), "made as the workspace's user");
}
