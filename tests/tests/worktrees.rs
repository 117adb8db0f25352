//! Each task on its own branch, through the orchestrator as users drive it:
//! agents work in their task's worktree, people read the change and land or
//! discard it, and every ending leaves no stray worktree.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, api_team, branch_of, data, ends, history, planned_task, settled, start, task_of, team,
    wait_for,
};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::git::git;
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

/// A repository on main with a.txt committed.
fn repository(root: &Path) {
    chorus_tests::git::repository(root, &[("a.txt", "one\ntwo\nthree\n")]);
}

fn write(path: &str, content: &str) -> Step {
    Step::tool_call("file_write", json!({"path": path, "content": content}))
}

fn read(path: &str) -> Step {
    Step::tool_call("file_read", json!({"path": path}))
}

fn done(summary: &str) -> Step {
    Step::tool_call(
        "completion-report",
        json!({"status": "complete", "summary": summary, "output": summary}),
    )
}

/// Starts the worker on a new task and waits until its run ends.
async fn worked(client: &mut Client, ws: &pb::Workspace, description: &str) -> pb::Task {
    let task = planned_task(client, ws, description).await;
    let run = start(client, &task, "worker", 0).await.run.expect("run").id;
    wait_for(client, &task.id, |e| ends(e, &run)).await;
    settled(client, &task.id).await
}

/// The tool results the model was last sent, in order (a file.read's
/// content among them).
fn tool_results(model: &FakeOpenAi) -> Vec<String> {
    model.tool_results()
}

async fn change(client: &mut Client, task: &str) -> pb::GetTaskChangeResponse {
    client
        .get_task_change(pb::GetTaskChangeRequest {
            task_id: task.to_owned(),
            ..Default::default()
        })
        .await
        .expect("change")
        .into_inner()
}

async fn land(client: &mut Client, task: &str) -> Result<pb::Task, tonic::Status> {
    client
        .land_task(pb::LandTaskRequest {
            task_id: task.to_owned(),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_on_one_file_land_one_after_the_other_through_a_follow_up() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    let model = FakeOpenAi::start(vec![
        // Task one.
        write("a.txt", "one\nTWO\nthree\n"),
        done("one"),
        // Task two: it reads a.txt as the repository has it, not as one left it.
        read("a.txt"),
        write("a.txt", "one\ntwo!\nthree\n"),
        done("two"),
        // The follow-up of two: main was merged into its branch, with a
        // conflict in a.txt, which it resolves.
        read("a.txt"),
        write("a.txt", "one\nTWO!\nthree\n"),
        done("follow-up"),
    ])
    .await;
    let orchestrator = Orchestrator::for_api_agents(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(
        &mut client,
        &root,
        &model,
        &["file.read", "file.write"],
        "You edit files.",
    )
    .await;
    assert!(team.workspace.repository);

    let one = worked(&mut client, &team.workspace, "Capitalise two.").await;
    let two = worked(&mut client, &team.workspace, "Exclaim two.").await;
    assert_eq!(two.status, "completed");
    let (b1, b2) = (branch_of(&one), branch_of(&two));
    assert_eq!(b1.state, "open");
    assert_eq!(b1.base, "main");
    assert_eq!(b1.name, format!("chorus/{}", &one.id[..8]));
    assert_ne!(b1.worktree, b2.worktree);
    let reads = tool_results(&model);
    assert!(
        reads.iter().any(|r| r.contains("2\\ttwo\\n")) && !reads.iter().any(|r| r.contains("TWO")),
        "task two read a.txt as the repository has it: {reads:?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).expect("top"),
        "one\ntwo\nthree\n",
        "no task wrote into the workspace's own files"
    );
    // The report carries the change as it stood.
    let reported = history(&mut client, &one.id)
        .await
        .into_iter()
        .find(|e| e.kind == "completion_report_submitted")
        .map(|e| data(&e))
        .expect("a report");
    assert_eq!(reported["change"]["branch"], b1.name, "{reported}");
    assert_eq!(
        reported["change"]["files"][0]["path"], "a.txt",
        "{reported}"
    );
    assert_eq!(
        reported["change"]["files"][0]["uncommitted"], true,
        "{reported}"
    );
    assert_eq!(reported["change"]["files"][0]["additions"], 1, "{reported}");
    for (task, line) in [(&one, "+TWO"), (&two, "+two!")] {
        let change = change(&mut client, &task.id).await;
        assert_eq!(change.files.len(), 1, "{change:?}");
        assert_eq!(change.files[0].path, "a.txt");
        assert!(change.files[0].uncommitted);
        assert_eq!(change.files[0].additions, Some(1));
        let patch = &change.patches[0].patch;
        assert!(patch.contains(line), "{patch}");
    }

    // An A2A client gets two's change as a patch artifact.
    let channel = orchestrator
        .client_tls
        .endpoint(&orchestrator.addr.to_string())
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut a2a = chorus_proto::a2a::v1::a2a_service_client::A2aServiceClient::with_interceptor(
        channel,
        chorus_tests::credentials::Bearer::new(&orchestrator.admin_key),
    );
    let seen = a2a
        .get_task(chorus_proto::a2a::v1::GetTaskRequest {
            tenant: team.workspace.name.clone(),
            id: two.id.clone(),
            history_length: Some(0),
        })
        .await
        .expect("A2A GetTask")
        .into_inner();
    let artifact = seen
        .artifacts
        .iter()
        .find(|a| a.name == "change")
        .unwrap_or_else(|| panic!("no change artifact in {:?}", seen.artifacts));
    let patch = artifact
        .parts
        .iter()
        .find(|p| p.media_type == "text/x-diff")
        .expect("a patch part");
    match &patch.content {
        Some(chorus_proto::a2a::v1::part::Content::Text(text)) => {
            assert!(text.contains("+two!") && text.contains("a/a.txt"), "{text}");
        }
        other => panic!("the patch is text: {other:?}"),
    }

    // One lands first: main fast-forwards to its work.
    let landed = land(&mut client, &one.id).await.expect("one lands");
    let b1 = branch_of(&landed);
    assert_eq!(b1.state, "landed");
    assert_eq!(b1.landed_commit, git(&root, &["rev-parse", "main"]));
    assert!(!b1.landed_by.is_empty());
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).expect("top"),
        "one\nTWO\nthree\n"
    );
    assert!(
        !Path::new(&branch_of(&one).worktree).exists(),
        "its worktree went"
    );
    assert!(git(&root, &["branch", "--list", &branch_of(&one).name]).is_empty());
    let kinds: Vec<String> = history(&mut client, &one.id)
        .await
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&"task_landed".to_owned()), "{kinds:?}");

    // Two conflicts: refused, naming the file, nothing changed.
    let main_before = git(&root, &["rev-parse", "main"]);
    let refused = land(&mut client, &two.id).await.expect_err("two conflicts");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("conflicts"),
        "{}",
        refused.message()
    );
    assert!(refused.message().contains("a.txt"), "{}", refused.message());
    assert_eq!(git(&root, &["rev-parse", "main"]), main_before);
    assert_eq!(
        branch_of(&task_of(&mut client, &two.id).await).state,
        "open"
    );
    assert!(
        Path::new(&b2.worktree).is_dir(),
        "two's worktree is as it was"
    );
    assert_eq!(git(&root, &["status", "--porcelain"]), "");

    // A follow-up takes two's branch, agrees with main, and lands.
    let follow_up = client
        .create_task(pb::CreateTaskRequest {
            workspace_id: team.workspace.id.clone(),
            description: "Bring main into two.".into(),
            continue_task_id: two.id.clone(),
            ..Default::default()
        })
        .await
        .expect("a follow-up")
        .into_inner();
    assert_eq!(branch_of(&follow_up).name, b2.name);
    assert_eq!(branch_of(&follow_up).continues_task_id, two.id);
    chorus_tests::agents::mark_planned(&mut client, &follow_up.id).await;
    let run = start(&mut client, &follow_up, "worker", 0)
        .await
        .run
        .expect("run")
        .id;
    wait_for(&mut client, &follow_up.id, |e| ends(e, &run)).await;
    let follow_up = settled(&mut client, &follow_up.id).await;
    let reads = tool_results(&model);
    let conflict = reads.first().cloned().unwrap_or_default();
    for side in ["<<<<<<<", "two!", "=======", "TWO", ">>>>>>>"] {
        assert!(
            conflict.contains(side),
            "the follow-up starts from two's work with main's in conflict: {conflict}"
        );
    }
    let told = model.requests()[model.requests().len() - 3]["messages"].to_string();
    assert!(
        told.contains("conflicts in a.txt"),
        "the agent is told: {told}"
    );
    let two_now = task_of(&mut client, &two.id).await;
    assert_eq!(
        branch_of(&two_now).state,
        "kept",
        "two's worktree went to the follow-up"
    );
    let refused = land(&mut client, &two.id)
        .await
        .expect_err("two is continued");
    assert!(
        refused.message().contains("continues"),
        "{}",
        refused.message()
    );

    let landed = land(&mut client, &follow_up.id)
        .await
        .expect("the follow-up lands");
    assert_eq!(branch_of(&landed).state, "landed");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).expect("top"),
        "one\nTWO!\nthree\n"
    );
    // main took the follow-up's work as it was: the branch holds main.
    assert_eq!(
        branch_of(&landed).landed_commit,
        git(&root, &["rev-parse", "main"])
    );
    let merges = git(&root, &["log", "--merges", "--format=%s", "main"]);
    assert!(merges.contains("Bring main into"), "{merges}");
    assert_eq!(
        git(&root, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_task_leaves_no_worktree_and_keeps_its_work_on_its_branch() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    // The second request is held: the run is going when canceled.
    let model = FakeOpenAi::start(vec![
        Step::tool_call(
            "file_create",
            json!({"path": "draft.txt", "content": "half done\n"}),
        ),
        Step::Hold,
    ])
    .await;
    let orchestrator = Orchestrator::for_api_agents(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, &root, &model, &["file.create"], "You draft.").await;
    let task = planned_task(&mut client, &team.workspace, "Draft.").await;
    start(&mut client, &task, "worker", 0).await;
    model.holding().await;
    let events = wait_for(&mut client, &task.id, |e| {
        e.kind == "tool_executed" && data(e)["tool"] == "file.create"
    })
    .await;
    let opened = events
        .iter()
        .find(|e| e.kind == "branch_opened")
        .map(data)
        .expect("branch_opened");
    let worktree = opened["worktree"].as_str().expect("worktree").to_owned();
    assert!(Path::new(&worktree).join("draft.txt").is_file());

    chorus_tests::agents::cancel(&mut client, &task.id, "not needed").await;
    let task = task_of(&mut client, &task.id).await;
    let b = branch_of(&task);
    assert_eq!(b.state, "kept");
    assert!(b.worktree.is_empty());
    assert!(!Path::new(&worktree).exists(), "no worktree is left");
    assert_eq!(
        git(&root, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    let kept = git(&root, &["show", "--name-only", "--format=%s", &b.name]);
    assert!(
        kept.contains("draft.txt"),
        "its work is on its branch: {kept}"
    );
    let change = change(&mut client, &task.id).await;
    assert_eq!(change.files.len(), 1);
    assert!(!change.files[0].uncommitted);

    // Discarded: the branch goes too.
    let discarded = client
        .discard_task(pb::DiscardTaskRequest {
            task_id: task.id.clone(),
        })
        .await
        .expect("discard")
        .into_inner();
    assert_eq!(branch_of(&discarded).state, "discarded");
    assert!(git(&root, &["branch", "--list", &b.name]).is_empty());
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_helper_writes_into_its_parents_worktree() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    let child_script = [
        chorus_tests::agents::call(
            &json!({"tool": "file.create", "path": "part.txt", "content": "done by the helper"}),
        ),
        chorus_tests::agents::report("complete", "part written"),
        "fake: say Part written.".to_owned(),
    ]
    .join("\n");
    let model = FakeOpenAi::start(vec![
        Step::tool_call(
            "handoff",
            json!({"agent": "helper", "prompt": child_script}),
        ),
        done("delegated"),
    ])
    .await;
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key pair");
    let orchestrator = Orchestrator::start_configured(
        &data_dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| config.runner.claude_bin = chorus_tests::agents::fake_cli(),
    )
    .await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        &root,
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "",
        "fake-model",
        &["handoff"],
        "You delegate.",
    )
    .await;
    chorus_tests::agents::cli_helper(&mut client, &team.workspace, &["file.create"]).await;
    let task = worked(&mut client, &team.workspace, "Get the part written.").await;
    assert_eq!(task.status, "completed");
    let worktree = branch_of(&task).worktree;
    assert_eq!(
        std::fs::read_to_string(Path::new(&worktree).join("part.txt")).expect("in the worktree"),
        "done by the helper"
    );
    assert!(
        !root.join("part.txt").exists(),
        "not in the workspace's own files"
    );
    let runs = client
        .list_runs(pb::ListRunsRequest {
            task_id: task.id.clone(),
        })
        .await
        .expect("runs")
        .into_inner()
        .runs;
    assert_eq!(runs.len(), 2, "{runs:?}");
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_that_is_not_a_repository_says_so_and_works_as_before() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::for_api_agents(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = chorus_tests::agents::workspace(&mut client, "plain", root.path()).await;
    assert!(!ws.repository);
    let task = planned_task(&mut client, &ws, "Anything.").await;
    assert!(task.branch.is_none());
    assert!(
        task.branch_note
            .contains("not the top level of a git repository"),
        "{}",
        task.branch_note
    );
    let refused = client
        .create_task(pb::CreateTaskRequest {
            workspace_id: ws.id.clone(),
            description: "On a branch.".into(),
            branch: "feature".into(),
            ..Default::default()
        })
        .await
        .expect_err("no branches here");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let refused = client
        .get_task_change(pb::GetTaskChangeRequest {
            task_id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no change to show");
    assert!(
        refused.message().contains("no branch of its own"),
        "{}",
        refused.message()
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_task_takes_its_worktree_and_branch_with_it() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    let model = FakeOpenAi::start(vec![write("a.txt", "changed\n"), done("changed")]).await;
    let orchestrator = Orchestrator::for_api_agents(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, &root, &model, &["file.write"], "You edit.").await;
    let task = worked(&mut client, &team.workspace, "Change a.txt.").await;
    let b = branch_of(&task);
    assert_eq!(
        (task.status.as_str(), b.state.as_str()),
        ("completed", "open")
    );
    assert!(Path::new(&b.worktree).is_dir());
    client
        .delete_task(pb::DeleteTaskRequest {
            task_id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("delete");
    assert!(!Path::new(&b.worktree).exists(), "its worktree went");
    assert!(
        git(&root, &["branch", "--list", &b.name]).is_empty(),
        "its branch went"
    );
    assert_eq!(
        git(&root, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).expect("top"),
        "one\ntwo\nthree\n"
    );
    orchestrator.stop().await;
}

/// The real Claude Code CLI (over MCP, the default) as a task's agent in a
/// repository: it reads, writes and commits through Chorus's tools in its
/// task's worktree, and its change lands. Skipped (with a notice) without
/// `CHORUS_TEST_CLAUDE_BIN`, unless `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_cli_works_in_its_tasks_worktree() {
    use chorus_tests::fake_anthropic::{FakeAnthropic, Reply, claude_cli_or_skip};
    let Some(claude) = claude_cli_or_skip() else {
        return;
    };
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    let tool =
        |name: &str, input: serde_json::Value| Reply::tool(format!("mcp__chorus__{name}"), input);
    let model = FakeAnthropic::start(vec![
        tool("file_read", json!({"path": "a.txt"})),
        tool(
            "file_create",
            json!({"path": "notes/claude.txt", "content": "written by claude\n"}),
        ),
        tool(
            "git_commit",
            json!({"message": "Add Claude's note", "all": true}),
        ),
        tool("git_status", json!({})),
        tool(
            "completion-report",
            json!({"status": "complete", "summary": "Added a note.", "output": "notes/claude.txt"}),
        ),
        Reply::text("Done."),
    ])
    .await;
    let orchestrator =
        Orchestrator::with_clis(data_dir.path(), claude, chorus_tests::agents::fake_cli()).await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        &root,
        pb::ProviderKind::ClaudeCode,
        &model.base_url(),
        "dummy-key",
        "claude-test-model",
        &["file.read", "file.create", "git.commit", "git.status"],
        "You add notes.",
    )
    .await;
    let task = worked(&mut client, &team.workspace, "Add a note.").await;
    assert_eq!(task.status, "completed", "{}", task.status_reason);
    let b = branch_of(&task);
    assert_eq!(
        std::fs::read_to_string(Path::new(&b.worktree).join("notes/claude.txt"))
            .expect("in the worktree"),
        "written by claude\n"
    );
    assert!(
        !root.join("notes").exists(),
        "not in the workspace's own files"
    );
    // Its tools answered from the worktree: a.txt as committed, its commit
    // on its branch, a clean status after it.
    let results = model.tool_results();
    let said: Vec<&str> = results.iter().map(|(text, _)| text.as_str()).collect();
    assert!(said.iter().any(|t| t.contains("2\\ttwo")), "{said:?}");
    assert!(
        said.iter().any(|t| t.contains(&b.name)),
        "the commit names its branch: {said:?}"
    );
    assert_eq!(
        git(&root, &["log", "-1", "--format=%s", &b.name]),
        "Add Claude's note"
    );
    let change = change(&mut client, &task.id).await;
    assert_eq!(change.commits.len(), 1);
    assert_eq!(change.files.len(), 1);
    assert!(!change.files[0].uncommitted);

    land(&mut client, &task.id).await.expect("it lands");
    assert_eq!(
        std::fs::read_to_string(root.join("notes/claude.txt")).expect("landed"),
        "written by claude\n"
    );
    orchestrator.stop().await;
}

/// A second provider `name` on the fake at `model`, and an agent of the
/// same name on it with `tools`.
async fn agent_on(
    client: &mut Client,
    ws: &pb::Workspace,
    name: &str,
    model: &FakeOpenAi,
    tools: &[&str],
) {
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: name.into(),
            kind: pb::ProviderKind::OpenaiCompatible.into(),
            base_url: model.base_url(),
            model: "fake-model".into(),
            api_key: "sk-test".into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    chorus_tests::agents::add_agent(client, ws, name, tools, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_editing_one_file_at_once_each_see_only_their_own() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let root = root.path().canonicalize().expect("canonical");
    repository(&root);
    // Each agent's model holds every request at its gate until both runs
    // are in flight, then writes, reads back and reports.
    let script = |line: &str| {
        vec![
            write("a.txt", &format!("one\n{line}\nthree\n")),
            read("a.txt"),
            done(line),
        ]
    };
    let first = FakeOpenAi::start_gated_by_turn(script("first's")).await;
    let second = FakeOpenAi::start_gated_by_turn(script("second's")).await;
    let orchestrator = Orchestrator::for_api_agents(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = chorus_tests::agents::workspace(&mut client, "both", &root).await;
    let tools = ["file.read", "file.write"];
    agent_on(&mut client, &ws, "first", &first, &tools).await;
    agent_on(&mut client, &ws, "second", &second, &tools).await;
    let mut tasks = Vec::new();
    for agent in ["first", "second"] {
        let task = planned_task(&mut client, &ws, &format!("{agent} edits a.txt")).await;
        start(&mut client, &task, agent, 0).await;
        tasks.push(task);
    }
    first.at_gate(1).await;
    second.at_gate(1).await;
    first.open_gate();
    second.open_gate();
    for task in &tasks {
        assert_eq!(settled(&mut client, &task.id).await.status, "completed");
    }
    for (model, mine, theirs) in [
        (&first, "first's", "second's"),
        (&second, "second's", "first's"),
    ] {
        let read = tool_results(model)
            .into_iter()
            .find(|r| r.contains("\"content\""))
            .expect("the read's result");
        assert!(read.contains(mine) && !read.contains(theirs), "{read}");
    }
    let (a, b) = (
        branch_of(&task_of(&mut client, &tasks[0].id).await),
        branch_of(&task_of(&mut client, &tasks[1].id).await),
    );
    assert_ne!(a.worktree, b.worktree);
    assert_eq!(
        std::fs::read_to_string(Path::new(&a.worktree).join("a.txt")).expect("first's"),
        "one\nfirst's\nthree\n"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&b.worktree).join("a.txt")).expect("second's"),
        "one\nsecond's\nthree\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).expect("top"),
        "one\ntwo\nthree\n"
    );
    orchestrator.stop().await;
}
