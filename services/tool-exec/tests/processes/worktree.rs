//! Task worktrees: made, used by a run's git tools, read as a change, landed
//! and removed by the service — and the ways a run might reach another
//! task's work through them.

use std::path::{Path, PathBuf};

use chorus_catalog::outputs;
use chorus_sandbox::SandboxConfig;
use chorus_tool_exec::worktree::{LandMode, Refused, Repository};
use chorus_tool_exec::{Limits, ToolError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::{Harness, git, init_repo, write};
use chorus_sandbox::testing::give_to_test_user;

/// A repository with one commit of a.txt and b.txt, and the service's view
/// of it.
async fn repo() -> (Harness, Repository) {
    let h = Harness::new().await;
    init_repo(&h.root);
    h.write("a.txt", "one\ntwo\nthree\n");
    h.write("b.txt", "beta\n");
    git(&h.root, &["add", "."]);
    git(&h.root, &["commit", "-q", "-m", "first"]);
    let processes = chorus_sandbox::testing::enforced(SandboxConfig::default()).await;
    let repository = Repository::new(
        &h.root,
        processes,
        Limits::default(),
        CancellationToken::new(),
    );
    (h, repository)
}

/// Makes the worktree of task `name` on `chorus/<name>` from main.
async fn worktree(repository: &Repository, name: &str) -> PathBuf {
    repository
        .add_worktree(
            name,
            &format!("chorus/{name}"),
            "main",
            true,
            "refs/heads/main",
        )
        .await
        .unwrap_or_else(|e| panic!("worktree {name}: {e}"))
        .path
}

async fn call_at(h: &Harness, root: &Path, tool: &str, args: Value) -> Result<Value, ToolError> {
    let outcome = h.runner.execute(h.grant_at(root), tool, args).await?;
    Ok(outcome.output)
}

/// Worktrees `one` and `two`, each with one file written and committed by
/// its run's git.commit.
async fn two_committed(
    h: &Harness,
    repository: &Repository,
    one_writes: (&str, &str),
    two_writes: (&str, &str),
) -> (PathBuf, PathBuf) {
    let one = worktree(repository, "one").await;
    let two = worktree(repository, "two").await;
    write(&one, one_writes.0, one_writes.1);
    write(&two, two_writes.0, two_writes.1);
    give_to_test_user(&h.root);
    for root in [&one, &two] {
        call_at(
            h,
            root,
            "git.commit",
            json!({"message": "a change", "all": true}),
        )
        .await
        .expect("commit");
    }
    (one, two)
}

fn head(dir: &Path, rev: &str) -> String {
    git(dir, &["rev-parse", rev]).trim().to_owned()
}

#[tokio::test]
async fn two_tasks_editing_one_file_each_see_only_their_own_change() {
    let (h, repository) = repo().await;
    let one = worktree(&repository, "one").await;
    let two = worktree(&repository, "two").await;
    assert!(one.starts_with(h.root.join(".git/chorus/worktrees")));
    write(&one, "a.txt", "one\nTWO by one\nthree\n");
    write(&two, "a.txt", "one\ntwo\nTHREE by two\n");
    give_to_test_user(&h.root);

    for (root, mine, theirs) in [
        (&one, "TWO by one", "THREE by two"),
        (&two, "THREE by two", "TWO by one"),
    ] {
        let diff = call_at(&h, root, "git.diff", json!({}))
            .await
            .expect("diff");
        let diff: outputs::GitDiff = serde_json::from_value(diff).expect("diff output");
        assert!(diff.diff.contains(mine), "{}", diff.diff);
        assert!(!diff.diff.contains(theirs), "{}", diff.diff);
    }
    let status = call_at(&h, &one, "git.status", json!({}))
        .await
        .expect("status");
    let status: outputs::GitStatus = serde_json::from_value(status).expect("status output");
    assert_eq!(status.branch.as_deref(), Some("chorus/one"));

    let committed = call_at(
        &h,
        &one,
        "git.commit",
        json!({"message": "one's change", "all": true}),
    )
    .await
    .expect("commit in one");
    let committed: outputs::GitCommit = serde_json::from_value(committed).expect("commit output");
    assert_eq!(committed.branch.as_deref(), Some("chorus/one"));
    assert_eq!(head(&h.root, "chorus/one"), committed.commit);
    assert_eq!(
        std::fs::read_to_string(h.root.join("a.txt")).expect("top"),
        "one\ntwo\nthree\n",
        "the workspace's own files are untouched"
    );
    assert_eq!(
        std::fs::read_to_string(two.join("a.txt")).expect("two"),
        "one\ntwo\nTHREE by two\n"
    );
}

#[tokio::test]
async fn a_worktrees_git_file_cannot_send_its_git_tools_to_another_task() {
    let (h, repository) = repo().await;
    let one = worktree(&repository, "one").await;
    let two = worktree(&repository, "two").await;
    write(&two, "secret.txt", "two's secret\n");
    give_to_test_user(&h.root);
    // What a run's bash can do in its worktree: point .git elsewhere.
    std::fs::write(
        one.join(".git"),
        format!("gitdir: {}\n", h.root.join(".git/worktrees/two").display()),
    )
    .expect("rewrite .git");
    let status = call_at(&h, &one, "git.status", json!({}))
        .await
        .expect("status");
    let status: outputs::GitStatus = serde_json::from_value(status).expect("status output");
    assert_eq!(status.branch.as_deref(), Some("chorus/one"), "{status:?}");
    assert!(
        status.entries.iter().all(|e| e.path != "secret.txt"),
        "another task's file showed: {status:?}"
    );
}

#[tokio::test]
async fn a_task_reads_no_other_tasks_branch_through_the_shared_objects() {
    let (h, repository) = repo().await;
    let one = worktree(&repository, "one").await;
    let two = worktree(&repository, "two").await;
    write(&two, "secret.txt", "two's secret\n");
    give_to_test_user(&h.root);
    call_at(
        &h,
        &two,
        "git.commit",
        json!({"message": "secret", "all": true}),
    )
    .await
    .expect("two commits");
    let two_tip = head(&h.root, "chorus/two");
    for base in ["chorus/two", two_tip.as_str(), "refs/heads/chorus/two"] {
        let err = call_at(&h, &one, "git.diff", json!({"base": base}))
            .await
            .expect_err(base);
        assert!(
            matches!(&err, ToolError::InvalidArguments { message, .. } if message.contains("unknown revision")),
            "{base}: {err:?}"
        );
    }
    // Its own history and its base's are there.
    for base in ["main", "HEAD"] {
        call_at(&h, &one, "git.diff", json!({"base": base}))
            .await
            .unwrap_or_else(|e| panic!("{base}: {e}"));
    }
    // Nor does it publish another task's branch.
    git(&h.root, &["remote", "add", "origin", "/nowhere.git"]);
    let mut grant = h.grant_at(&one);
    grant.tools.push(chorus_catalog::NETWORK.to_owned());
    let err = h
        .runner
        .execute(
            grant,
            "git.push",
            json!({"remote": "origin", "branch": "chorus/two"}),
        )
        .await
        .expect_err("pushing another task's branch");
    assert!(err.to_string().contains("pushes only that branch"), "{err}");
}

#[tokio::test]
async fn a_change_holds_commits_and_the_uncommitted_rest_without_touching_the_index() {
    let (h, repository) = repo().await;
    let one = worktree(&repository, "one").await;
    write(&one, "a.txt", "one\ntwo\nthree\nfour\n");
    give_to_test_user(&h.root);
    call_at(
        &h,
        &one,
        "git.commit",
        json!({"message": "add four", "all": true}),
    )
    .await
    .expect("commit");
    write(&one, "new.txt", "fresh\n");
    write(&one, "b.txt", "beta changed\n");
    give_to_test_user(&h.root);
    let index_before = std::fs::read(h.root.join(".git/worktrees/one/index")).expect("index");

    let change = repository
        .change("chorus/one", "refs/heads/main", Some("one"))
        .await
        .expect("change");
    assert_eq!(change.commits.len(), 1);
    assert_eq!(change.commits[0].summary, "add four");
    assert_eq!(change.base_commit, head(&h.root, "main"));
    let paths: Vec<&str> = change.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec!["a.txt", "b.txt", "new.txt"]);
    let a = &change.files[0];
    assert_eq!((a.additions, a.deletions), (Some(1), Some(0)));
    assert_eq!(change.files[2].status, "added");
    assert_eq!(change.uncommitted, vec!["b.txt", "new.txt"]);
    assert_eq!(
        std::fs::read(h.root.join(".git/worktrees/one/index")).expect("index"),
        index_before,
        "what the agent staged is left as it was"
    );
    let (patch, truncated) = repository
        .patch(
            &change.base_commit,
            "chorus/one",
            Some("one"),
            &["new.txt".to_owned()],
            1 << 20,
        )
        .await
        .expect("patch");
    assert!(!truncated);
    assert!(patch.contains("+fresh"), "{patch}");
    assert!(!patch.contains("four"), "only the page's files: {patch}");
}

#[tokio::test]
async fn landing_fast_forwards_and_a_conflict_changes_nothing() {
    let (h, repository) = repo().await;
    two_committed(
        &h,
        &repository,
        ("a.txt", "one\nTWO\nthree\n"),
        ("a.txt", "one\ntwo!\nthree\n"),
    )
    .await;
    let landed = repository
        .land(
            "chorus/one",
            "main",
            LandMode::Merge,
            "land one",
            ("Ana", "ana@example.com"),
        )
        .await
        .expect("one lands");
    assert!(landed.fast_forward);
    assert_eq!(landed.commit, head(&h.root, "chorus/one"));
    assert_eq!(head(&h.root, "main"), landed.commit);
    assert_eq!(
        std::fs::read_to_string(h.root.join("a.txt")).expect("top"),
        "one\nTWO\nthree\n",
        "the checked-out base's files moved with it"
    );

    let main_before = head(&h.root, "main");
    for mode in [LandMode::Merge, LandMode::Squash] {
        let refused = repository
            .land(
                "chorus/two",
                "main",
                mode,
                "land two",
                ("Ana", "ana@example.com"),
            )
            .await
            .expect_err("two conflicts");
        assert!(
            matches!(&refused, Ok(Refused::Conflict(files)) if files == &["a.txt"]),
            "{refused:?}"
        );
    }
    let refused = repository
        .land(
            "chorus/two",
            "main",
            LandMode::FastForward,
            "land two",
            ("Ana", "a@b"),
        )
        .await
        .expect_err("two cannot fast-forward");
    assert!(
        matches!(refused, Ok(Refused::Other(ref m)) if m.contains("cannot fast-forward")),
        "{refused:?}"
    );
    assert_eq!(head(&h.root, "main"), main_before, "nothing moved");
    assert_eq!(
        std::fs::read_to_string(h.root.join("a.txt")).expect("top"),
        "one\nTWO\nthree\n"
    );
    assert!(
        git(&h.root, &["status", "--porcelain"]).trim().is_empty(),
        "the top level is clean"
    );
}

#[tokio::test]
async fn a_moved_base_lands_by_merge_or_squash() {
    let (h, repository) = repo().await;
    two_committed(&h, &repository, ("one.txt", "1\n"), ("two.txt", "2\n")).await;
    repository
        .land(
            "chorus/one",
            "main",
            LandMode::Merge,
            "land one",
            ("Ana", "a@b"),
        )
        .await
        .expect("one");
    let landed = repository
        .land(
            "chorus/two",
            "main",
            LandMode::Squash,
            "Task two: add two.txt",
            ("Ana", "ana@example.com"),
        )
        .await
        .expect("two squashes");
    assert!(!landed.fast_forward);
    assert_eq!(head(&h.root, "main"), landed.commit);
    let parents = git(&h.root, &["log", "-1", "--format=%P", "main"]);
    assert_eq!(
        parents.split_whitespace().count(),
        1,
        "one parent: {parents}"
    );
    let said = git(&h.root, &["log", "-1", "--format=%an: %s", "main"]);
    assert_eq!(said.trim(), "Ana: Task two: add two.txt");
    assert!(h.root.join("one.txt").is_file() && h.root.join("two.txt").is_file());
}

#[tokio::test]
async fn a_removed_worktree_keeps_its_work_on_its_branch_and_leaves_no_trace() {
    let (h, repository) = repo().await;
    let one = worktree(&repository, "one").await;
    write(&one, "draft.txt", "half done\n");
    give_to_test_user(&h.root);
    let snapshot = repository
        .remove_worktree(
            "one",
            Some("Uncommitted work of task one, kept when it was canceled"),
        )
        .await
        .expect("removed")
        .expect("a snapshot commit");
    assert!(!one.exists());
    assert_eq!(head(&h.root, "chorus/one"), snapshot);
    let files = git(
        &h.root,
        &["show", "--name-only", "--format=%s", "chorus/one"],
    );
    assert!(files.contains("draft.txt"), "{files}");
    let list = git(&h.root, &["worktree", "list", "--porcelain"]);
    assert!(!list.contains("chorus/one"), "pruned: {list}");
    assert!(!h.root.join(".git/worktrees/one").exists());
    assert!(repository.worktree_names().is_empty());

    // And it comes back on its branch.
    let again = repository
        .add_worktree("one", "chorus/one", "chorus/one", false, "refs/heads/main")
        .await
        .expect("again");
    assert_eq!(again.start_commit, snapshot);
    assert!(again.path.join("draft.txt").is_file());
    repository
        .remove_worktree("one", None)
        .await
        .expect("removed");
    repository
        .delete_branch("chorus/one")
        .await
        .expect("branch deleted");
    assert!(
        git(&h.root, &["branch", "--list", "chorus/*"])
            .trim()
            .is_empty()
    );
}

#[tokio::test]
async fn a_tasks_bash_sees_neither_the_other_worktrees_nor_the_repository() {
    let (h, repository) = repo().await;
    let one = worktree(&repository, "one").await;
    let two = worktree(&repository, "two").await;
    write(&two, "secret.txt", "two's secret\n");
    give_to_test_user(&h.root);
    let tries = [
        // A sibling worktree, by its path and by walking up.
        format!("cat {}", two.join("secret.txt").display()),
        "cat ../two/secret.txt".to_owned(),
        // The repository's own files, objects, refs and configuration.
        "cat ../../../../a.txt".to_owned(),
        format!("cat {}", h.root.join("a.txt").display()),
        format!("ls {}", h.root.join(".git/objects").display()),
        format!("cat {}", h.root.join(".git/config").display()),
        format!("cat {}", h.root.join(".git/worktrees/two/HEAD").display()),
        // git itself, following the worktree's .git file.
        "git --no-pager log --all --oneline".to_owned(),
        "git --no-pager show chorus/two:secret.txt".to_owned(),
    ];
    for command in tries {
        let out = call_at(&h, &one, "bash", json!({"command": command}))
            .await
            .unwrap_or_else(|e| panic!("{command}: {e}"));
        let out: outputs::Bash = serde_json::from_value(out).expect("bash output");
        assert_ne!(out.exit_code, Some(0), "{command} worked: {}", out.stdout);
        assert!(
            !out.stdout.contains("two's secret") && !out.stdout.contains("one\ntwo"),
            "{command}: {}",
            out.stdout
        );
    }
    // Its own files are there.
    let out = call_at(&h, &one, "bash", json!({"command": "cat a.txt"}))
        .await
        .expect("own file");
    let out: outputs::Bash = serde_json::from_value(out).expect("bash output");
    assert_eq!(out.stdout, "one\ntwo\nthree\n");
}
