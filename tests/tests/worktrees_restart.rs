//! Task worktrees across a restart: an orchestrator restarted with fifty
//! worktrees of tasks in every state accounts for each one — kept, removed
//! or left — and leaves no stray worktree or lock.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{branch_of, opened_run, task_of};
use chorus_tests::fake_openai::FakeOpenAi;
use chorus_tests::git::git;
use chorus_tests::orchestrator::Orchestrator;

/// A repository on main with a.txt committed.
fn repository(root: &Path) {
    chorus_tests::git::repository(root, &[("a.txt", "one\ntwo\nthree\n")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_accounts_for_every_one_of_fifty_worktrees() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    let database = data_dir.path().join("chorus.db").display().to_string();
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key set");
    let orchestrator = Orchestrator::start_configured(&database, signer, true, |_| {}).await;
    let mut client = orchestrator.client().await;
    let model = FakeOpenAi::start(Vec::new()).await;
    let team =
        chorus_tests::agents::api_team(&mut client, &root, &model, &["file.read"], "You read.")
            .await;

    // 30 tasks whose worktrees stay: each opened by a run its caller drives.
    let mut open = Vec::new();
    for i in 0..30 {
        let opened = opened_run(&mut client, &team.workspace, "worker", &format!("task {i}")).await;
        let run = opened.run.expect("run");
        client
            .finish_run(pb::FinishRunRequest {
                id: run.id.clone(),
                reason: "paused".into(),
            })
            .await
            .expect("finish");
        open.push(run.task_id);
    }
    // 10 canceled tasks whose worktree a crash left behind (made again by
    // hand where the cancel removed it), and 10 of no task at all.
    let mut kept = Vec::new();
    for i in 0..10 {
        let opened = opened_run(&mut client, &team.workspace, "worker", &format!("gone {i}")).await;
        let task = opened.run.expect("run").task_id;
        chorus_tests::agents::cancel(&mut client, &task, "gone").await;
        let b = branch_of(&task_of(&mut client, &task).await);
        let path = root.join(".git/chorus/worktrees").join(&task);
        git(
            &root,
            &[
                "worktree",
                "add",
                "-q",
                &path.display().to_string(),
                &b.name,
            ],
        );
        kept.push(task);
    }
    for i in 0..10 {
        let name = uuid_like(i);
        let path = root.join(".git/chorus/worktrees").join(&name);
        git(
            &root,
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                &path.display().to_string(),
                "main",
            ],
        );
    }
    chorus_sandbox::testing::give_to_test_user(&root);
    let on_disk = |root: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(root.join(".git/chorus/worktrees"))
            .expect("worktrees")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(on_disk(&root).len(), 50);

    orchestrator.stop().await;
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key set");
    let orchestrator = Orchestrator::start_configured(&database, signer, true, |_| {}).await;
    let mut client = orchestrator.client().await;
    // Every worktree is accounted for before the service answers.
    let mut want = open.clone();
    want.sort();
    assert_eq!(
        on_disk(&root),
        want,
        "only the open tasks' worktrees are left"
    );
    assert_eq!(
        git(&root, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        31,
        "the repository records the top level and the open ones"
    );
    for task in &kept {
        let t = task_of(&mut client, task).await;
        assert_eq!(branch_of(&t).state, "kept");
        assert!(git(&root, &["rev-parse", "--verify", &branch_of(&t).name]).len() == 40);
    }
    for task in &open {
        let t = task_of(&mut client, task).await;
        assert_eq!(branch_of(&t).state, "open");
        assert!(Path::new(&branch_of(&t).worktree).is_dir());
    }
    orchestrator.stop().await;
}

fn uuid_like(i: usize) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}
