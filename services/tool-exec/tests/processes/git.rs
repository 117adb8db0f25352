//! git.status, git.diff, git.commit and git.push against real repositories.

use std::path::Path;

use chorus_catalog::outputs;
use chorus_tool_exec::ToolError;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::common::{Harness, configure, git, git_command, init_repo, write};

fn parse<T: DeserializeOwned>(outcome: &chorus_tool_exec::context::ToolOutcome) -> T {
    serde_json::from_value(outcome.output.clone()).expect("tool output")
}

/// A repository with one commit of a.txt, b.txt and old.txt.
fn repo() -> Harness {
    let h = Harness::new();
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
    let h = repo();
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
async fn status_in_a_subdirectory_of_the_repository_is_limited_to_it() {
    let h = repo();
    h.write("sub/inner.txt", "in\n");
    git(&h.root, &["add", "."]);
    git(&h.root, &["commit", "-q", "-m", "sub"]);
    h.write("sub/inner.txt", "changed\n");
    h.write("sub/fresh.txt", "new\n");
    h.write("a.txt", "outside the workspace\n");

    let sub = h.root.join("sub");
    let outcome = h
        .runner
        .execute(h.grant_at(&sub), "git.status", json!({}))
        .await
        .expect("status");
    let status: outputs::GitStatus = parse(&outcome);
    let paths: Vec<&str> = status.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["inner.txt", "fresh.txt"]);
}

#[tokio::test]
async fn diff_shows_unstaged_staged_base_and_path_limited_changes() {
    let h = repo();
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
    let h = repo();
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
    let h = repo();
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
    let h = repo();
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
    let h = repo();
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
    let h = repo();
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
    let h = repo();
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
    let h = repo();
    let outside = tempfile::tempdir().expect("tempdir");
    let marker = outside.path().join("hook-ran");
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
    let h = repo();
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
    let h = repo();
    h.write("a.txt", "by the user\n");
    h.ok("git.commit", json!({"message": "user commit", "all": true}))
        .await;
    assert_eq!(
        git(&h.root, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "Test User <test@example.com>"
    );
}

/// A repository whose origin is a bare repository in another temporary directory.
fn repo_with_origin() -> (Harness, tempfile::TempDir) {
    let h = repo();
    let remote = tempfile::tempdir().expect("tempdir");
    git(remote.path(), &["init", "-q", "--bare", "-b", "main"]);
    let url = remote.path().to_str().expect("utf8").to_owned();
    git(&h.root, &["remote", "add", "origin", &url]);
    (h, remote)
}

#[tokio::test]
async fn push_sends_the_current_branch_to_origin() {
    let (h, remote) = repo_with_origin();
    let outcome = h.ok("git.push", json!({})).await;
    let push: outputs::GitPush = parse(&outcome);
    assert_eq!(push.remote, "origin");
    assert_eq!(push.branch, "main");
    assert!(push.output.contains("main -> main"), "{}", push.output);
    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/main"]).trim(),
        head(&h.root)
    );

    // A named branch other than the current one.
    git(&h.root, &["branch", "feature"]);
    let push: outputs::GitPush = parse(
        &h.ok("git.push", json!({"remote": "origin", "branch": "feature"}))
            .await,
    );
    assert_eq!(push.branch, "feature");
    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/feature"]).trim(),
        head(&h.root)
    );
}

#[tokio::test]
async fn push_only_goes_to_configured_remotes_and_existing_branches() {
    let (h, remote) = repo_with_origin();
    let url = remote.path().to_str().expect("utf8");
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
        let err = h.call("git.push", args.clone()).await.expect_err("refused");
        assert!(
            matches!(err, ToolError::InvalidArguments { .. }),
            "{args}: {err}"
        );
        assert!(err.to_string().contains(expected), "{args}: {err}");
    }
    // Nothing reached the remote.
    assert_eq!(git(remote.path(), &["branch", "--list"]), "");
}

#[tokio::test]
async fn a_non_fast_forward_push_is_rejected_and_never_forced() {
    let (h, remote) = repo_with_origin();
    h.ok("git.push", json!({})).await;

    // Someone else pushes first.
    let other = tempfile::tempdir().expect("tempdir");
    let url = remote.path().to_str().expect("utf8");
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
    let err = h.call("git.push", json!({})).await.expect_err("rejected");
    let message = failed_precondition(&err);
    assert!(message.contains("rejected"), "{message}");
    assert!(message.contains("never forces"), "{message}");
    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/main"]).trim(),
        theirs
    );
}

#[tokio::test]
async fn push_with_no_remotes_says_how_to_add_one() {
    let h = repo();
    let err = h.call("git.push", json!({})).await.expect_err("refused");
    assert!(err.to_string().contains("git remote add"), "{err}");
}

#[tokio::test]
async fn a_workspace_that_is_not_a_repository_is_a_failed_precondition() {
    let h = Harness::new();
    for (tool, args) in [
        ("git.status", json!({})),
        ("git.diff", json!({})),
        ("git.commit", json!({"message": "m", "all": true})),
        ("git.push", json!({})),
    ] {
        let err = h.call(tool, args).await.expect_err("not a repository");
        assert_eq!(
            failed_precondition(&err),
            "the workspace is not a git repository; run git init with bash",
            "{tool}"
        );
    }
}
