//! Ask before acting: approval rules the server enforces on every call of a
//! run, as users meet them — an API agent's call waits for a person, who
//! approves it once, for the rest of the task, or denies it with a reason the
//! agent reads; nobody answering denies it at the deadline; cancelling ends
//! the wait; a handoff child asks under its parent's rules. Every request and
//! answer is in the history.

use std::path::Path;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, add_agent, api_team, cancel, data, ends_run, history, planned_task, start, summary,
    task_of, wait_for,
};
use chorus_tests::approvals::{answer, approval_id, asked, rule, set_rules};
use chorus_tests::db::databases;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

#[path = "approvals/network.rs"]
mod network;

fn create(path: &str) -> Step {
    Step::tool_call("file_create", json!({"path": path, "content": path}))
}

fn done() -> Step {
    Step::tool_call(
        "completion-report",
        json!({"status": "complete", "summary": "done", "output": "done"}),
    )
}

/// An orchestrator on `database`, and a team whose worker (on the fake
/// `model`, granted file.create) obeys `rules`.
async fn writer(
    data_dir: &Path,
    database: &str,
    root: &Path,
    model: &FakeOpenAi,
    rules: Vec<pb::ApprovalRule>,
) -> (Orchestrator, Client, chorus_tests::agents::Team) {
    let orchestrator = Orchestrator::with_fake_cli(data_dir, database, |config| {
        config.runner.api.backoff = Duration::from_millis(10);
    })
    .await;
    let mut client = orchestrator.client().await;
    let team = writing_team(&mut client, root, model, rules).await;
    (orchestrator, client, team)
}

/// A team whose worker (on the fake `model`, granted file.create) obeys
/// `rules`.
async fn writing_team(
    client: &mut Client,
    root: &Path,
    model: &FakeOpenAi,
    rules: Vec<pb::ApprovalRule>,
) -> chorus_tests::agents::Team {
    let team = api_team(client, root, model, &["file.create"], "You write.").await;
    set_rules(client, &team.workspace.id, &team.agent, rules).await;
    team
}

/// The tool results the model was sent, in order.
fn tool_results(model: &FakeOpenAi) -> Vec<String> {
    model.tool_results()
}

fn exists(root: &Path, path: &str) -> bool {
    root.join(path).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_waits_for_a_person_who_approves_once_for_the_task_or_denies() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        std::fs::create_dir(root.path().join("deploy")).expect("deploy/");
        let model = FakeOpenAi::start(vec![
            create("deploy/a.txt"),
            create("deploy/b.txt"),
            create("notes.txt"),
            create("deploy/c.txt"),
            create("deploy/d.txt"),
            done(),
        ])
        .await;
        let (orchestrator, mut client, team) = writer(
            data_dir.path(),
            &db.url,
            root.path(),
            &model,
            vec![rule("file.*", "ask", "deploy/**", 0)],
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Write the deploy files.").await;
        let other = planned_task(&mut client, &team.workspace, "Another task.").await;
        // Someone watching every task that needs a person.
        let mut needing = client
            .watch_tasks(pb::WatchTasksRequest {
                workspace_id: team.workspace.id.clone(),
                needs_you_only: true,
                ..Default::default()
            })
            .await
            .expect("watch tasks")
            .into_inner();
        start(&mut client, &task, &team.agent, 0).await;

        // The first call waits: the task says so, and what it would do.
        let first = asked(&mut client, &task.id, 1).await;
        let needs = first.needs_you.clone().expect("an approval needs a person");
        assert_eq!(needs.status, "approval", "{b}");
        assert!(needs.action.contains("chorus approve"), "{b}: {needs:?}");
        let id = needs.approval_id.clone();
        assert!(!id.is_empty(), "{b}");
        let waiting = task_of(&mut client, &task.id).await.waiting_approvals;
        assert_eq!(waiting.len(), 1, "{b}: {waiting:?}");
        let shown = &waiting[0];
        assert_eq!(
            (shown.id.as_str(), shown.tool.as_str(), shown.state.as_str()),
            (id.as_str(), "file.create", "pending"),
            "{b}"
        );
        assert_eq!(data(&first)["input"]["path"], "deploy/a.txt", "{b}");
        assert_eq!(shown.rule, "ask file.* path=deploy/**", "{b}");
        assert!(
            !exists(root.path(), "deploy/a.txt"),
            "{b}: the call waits, it has not run"
        );
        // WatchTasks with needsYouOnly shows the call that waits.
        let seen = loop {
            let change = tokio_stream::StreamExt::next(&mut needing)
                .await
                .expect("the feed goes on")
                .expect("a change");
            if let Some(pb::task_change::Change::Event(event)) = change.change {
                break event;
            }
        };
        assert_eq!(
            (seen.kind.as_str(), seen.task_id.as_str()),
            ("approval_requested", task.id.as_str()),
            "{b}"
        );
        assert_eq!(
            seen.needs_you.map(|n| n.approval_id),
            Some(id.clone()),
            "{b}"
        );

        // Answers that cannot be taken change nothing.
        let err = answer(&mut client, &task.id, "ap-nothing", true, false, "")
            .await
            .expect_err("unknown");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}: {err:?}");
        assert!(
            err.message().contains("no approval 'ap-nothing'"),
            "{b}: {err:?}"
        );
        let err = answer(&mut client, &other.id, &id, true, false, "")
            .await
            .expect_err("another task's");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}: {err:?}");
        let err = answer(&mut client, &task.id, &id, false, true, "")
            .await
            .expect_err("deny for the task");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}: {err:?}");
        assert_eq!(
            task_of(&mut client, &task.id).await.waiting_approvals.len(),
            1,
            "{b}"
        );

        // Approved once: it runs, and the next such call asks again.
        let approved = answer(&mut client, &task.id, &id, true, false, "")
            .await
            .expect("approve");
        assert_eq!(approved.state, "approved", "{b}");
        assert!(
            !approved.answered_by.is_empty() && approved.answered_by != "chorus",
            "{b}: {approved:?}"
        );
        let err = answer(&mut client, &task.id, &id, false, false, "late")
            .await
            .expect_err("answered once");
        assert_eq!(err.code(), tonic::Code::AlreadyExists, "{b}: {err:?}");
        let second = asked(&mut client, &task.id, 2).await;
        assert!(exists(root.path(), "deploy/a.txt"), "{b}");
        assert_eq!(data(&second)["input"]["path"], "deploy/b.txt", "{b}");

        // Denied with a reason: the agent reads it; notes.txt needs no one.
        let second_id = approval_id(&second);
        answer(
            &mut client,
            &task.id,
            &second_id,
            false,
            false,
            "not on a Friday",
        )
        .await
        .expect("deny");
        let third = asked(&mut client, &task.id, 3).await;
        assert!(!exists(root.path(), "deploy/b.txt"), "{b}");
        assert!(exists(root.path(), "notes.txt"), "{b}");

        // Approved for the task: the next call under the rule runs at once.
        let third_id = approval_id(&third);
        let for_task = answer(&mut client, &task.id, &third_id, true, true, "")
            .await
            .expect("approve for the task");
        assert_eq!(for_task.state, "approved_for_task", "{b}");
        let events = wait_for(&mut client, &task.id, ends_run).await;
        for file in ["deploy/c.txt", "deploy/d.txt"] {
            assert!(exists(root.path(), file), "{b}: {file}");
        }
        let kinds = summary(&events);
        assert_eq!(
            kinds
                .iter()
                .filter(|k| k.starts_with("approval_requested"))
                .count(),
            3,
            "{b}: {kinds:#?}"
        );
        let outcomes: Vec<String> = events
            .iter()
            .filter(|e| e.kind == "approval_answered")
            .map(|e| data(e)["outcome"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(outcomes, ["approved", "denied", "approved_for_task"], "{b}");
        let denial = tool_results(&model)
            .into_iter()
            .find(|r| r.contains("not on a Friday"))
            .unwrap_or_else(|| {
                panic!(
                    "{b}: the agent was not told why: {:#?}",
                    tool_results(&model)
                )
            });
        assert!(denial.contains("denied"), "{b}: {denial}");
        let settled = task_of(&mut client, &task.id).await;
        assert!(settled.waiting_approvals.is_empty(), "{b}");
        assert_eq!(settled.task_rules.len(), 1, "{b}: {:?}", settled.task_rules);
        assert_eq!(
            (
                settled.task_rules[0].decision.as_str(),
                settled.task_rules[0].path.as_str()
            ),
            ("allow", "deploy/**"),
            "{b}"
        );
        // Every answer is recorded with who gave it and how long the call waited.
        for e in events.iter().filter(|e| e.kind == "approval_answered") {
            let d = data(e);
            assert!(
                d["by"].as_str().is_some_and(|by| !by.is_empty()),
                "{b}: {d}"
            );
            assert!(d["waited_ms"].as_i64().is_some(), "{b}: {d}");
            assert_eq!(d["rule"], "ask file.* path=deploy/**", "{b}: {d}");
        }
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_denies_at_the_deadline_and_cancel_ends_a_wait_at_once() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![create("soon.txt"), create("later.txt"), done()]).await;
        let (orchestrator, mut client, team) = writer(
            data_dir.path(),
            &db.url,
            root.path(),
            &model,
            vec![
                rule("file.create", "ask", "soon.txt", 1),
                rule("file.create", "ask", "later.txt", 0),
            ],
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Write two files.").await;
        start(&mut client, &task, &team.agent, 0).await;
        // The first waits a second, then is denied and the agent told why.
        let expired = wait_for(&mut client, &task.id, |e| {
            e.kind == "approval_answered" && data(e)["outcome"] == "expired"
        })
        .await;
        let expired = data(expired.last().expect("expired"));
        assert_eq!(expired["by"], "chorus", "{b}: {expired}");
        assert!(
            expired["waited_ms"].as_i64().is_some_and(|ms| ms >= 1000),
            "{b}: {expired}"
        );
        // The second waits; cancelling the task ends the wait and the run.
        let second = asked(&mut client, &task.id, 2).await;
        assert!(
            tool_results(&model)
                .iter()
                .any(|r| r.contains("nobody answered")),
            "{b}: {:#?}",
            tool_results(&model)
        );
        cancel(&mut client, &task.id, "changed my mind").await;
        let events = wait_for(&mut client, &task.id, |e| {
            e.kind == "approval_answered" && data(e)["outcome"] == "canceled"
        })
        .await;
        assert_eq!(
            data(events.last().expect("canceled"))["approval_id"],
            approval_id(&second),
            "{b}"
        );
        assert!(
            !exists(root.path(), "soon.txt") && !exists(root.path(), "later.txt"),
            "{b}"
        );
        assert!(
            task_of(&mut client, &task.id)
                .await
                .waiting_approvals
                .is_empty(),
            "{b}"
        );
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_child_asks_under_its_parents_rules() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let root = tempfile::tempdir().expect("root");
    let model = FakeOpenAi::start(vec![
        Step::tool_call("handoff", json!({"agent": "helper", "prompt": "write it"})),
        create("out.txt"),
        done(),
        done(),
    ])
    .await;
    let orchestrator = Orchestrator::with_fake_cli(data_dir.path(), &db.url, |config| {
        config.runner.api.backoff = Duration::from_millis(10);
    })
    .await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, root.path(), &model, &["handoff"], "You lead.").await;
    add_agent(
        &mut client,
        &team.workspace,
        "helper",
        &["file.create"],
        "model",
    )
    .await;
    // The lead asks before it hands off and before any file is made; the
    // helper's own rule allows files.
    set_rules(
        &mut client,
        &team.workspace.id,
        &team.agent,
        vec![rule("file.*", "ask", "", 0), rule("handoff", "ask", "", 0)],
    )
    .await;
    set_rules(
        &mut client,
        &team.workspace.id,
        "helper",
        vec![rule("file.*", "allow", "", 0)],
    )
    .await;
    let task = planned_task(&mut client, &team.workspace, "Have the helper write.").await;
    start(&mut client, &task, &team.agent, 0).await;
    // The handoff itself waits first, with what it would hand over.
    let handing = asked(&mut client, &task.id, 1).await;
    let d = data(&handing);
    assert_eq!(
        (d["tool"].as_str(), d["input"]["agent"].as_str()),
        (Some("handoff"), Some("helper")),
        "{d}"
    );
    answer(
        &mut client,
        &task.id,
        &approval_id(&handing),
        true,
        false,
        "",
    )
    .await
    .expect("approve the handoff");
    let request = asked(&mut client, &task.id, 2).await;
    let d = data(&request);
    assert_eq!(
        (d["agent"].as_str(), d["rule_agent"].as_str()),
        (Some("helper"), Some(team.agent.as_str())),
        "{d}"
    );
    assert!(!exists(root.path(), "out.txt"));
    answer(
        &mut client,
        &task.id,
        approval_id(&request).as_str(),
        true,
        false,
        "",
    )
    .await
    .expect("approve");
    let events = wait_for(&mut client, &task.id, |e| {
        e.kind == "status_changed" && data(e)["to"] == "completed"
    })
    .await;
    assert!(exists(root.path(), "out.txt"), "{:#?}", summary(&events));
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_that_cannot_work_are_refused_and_change_nothing() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let root = tempfile::tempdir().expect("root");
    let model = FakeOpenAi::start(vec![done()]).await;
    let orchestrator = Orchestrator::with_fake_cli(data_dir.path(), &db.url, |_| {}).await;
    let mut client = orchestrator.client().await;
    let team = writing_team(
        &mut client,
        root.path(),
        &model,
        vec![rule("git.push", "ask", "", 0)],
    )
    .await;
    let cases = [
        (rule("Bash", "ask", "", 0), "unknown tool 'Bash'"),
        (rule("bash", "maybe", "", 0), "unknown decision 'maybe'"),
        (
            rule("bash", "ask", "src/**", 0),
            "bash has no path argument",
        ),
        (rule("file.read", "deny", "/etc/**", 0), "can never match"),
        (rule("file.read", "deny", "[oops", 0), "does not parse"),
        (
            rule("file.read", "deny", "", 30),
            "only an ask rule has a deadline",
        ),
        (
            rule("file.read", "ask", "", 90_000),
            "at most 86400 seconds",
        ),
    ];
    for (bad, why) in cases {
        let err = client
            .update_agent(pb::UpdateAgentRequest {
                workspace_id: team.workspace.id.clone(),
                name: team.agent.clone(),
                approval_rules: vec![bad.clone()],
                set_approval_rules: true,
                ..Default::default()
            })
            .await
            .expect_err(why);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{why}: {err:?}");
        assert!(err.message().contains(why), "{why}: {}", err.message());
        let err = client
            .update_workspace(pb::UpdateWorkspaceRequest {
                id: team.workspace.id.clone(),
                approval_rules: vec![bad],
                set_approval_rules: true,
                ..Default::default()
            })
            .await
            .expect_err(why);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{why}: {err:?}");
    }
    let agent = client
        .get_agent(pb::GetAgentRequest {
            workspace_id: team.workspace.id.clone(),
            name: team.agent.clone(),
        })
        .await
        .expect("agent")
        .into_inner();
    assert_eq!(agent.approval_rules.len(), 1, "{:?}", agent.approval_rules);
    assert_eq!(agent.approval_rules[0].tool, "git.push");
    // Rules without set_approval_rules are a mistake, not a no-op.
    let err = client
        .update_agent(pb::UpdateAgentRequest {
            workspace_id: team.workspace.id.clone(),
            name: team.agent.clone(),
            approval_rules: vec![rule("bash", "ask", "", 0)],
            ..Default::default()
        })
        .await
        .expect_err("not set");
    assert!(
        err.message().contains("set_approval_rules"),
        "{}",
        err.message()
    );
    orchestrator.stop().await;
}

/// A call waits when its orchestrator is killed: the restarted one takes the
/// run over, ends the old wait (whoever asked is gone) and the resumed agent
/// asks again; approved, the file is written once. Never lost, never twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_when_the_orchestrator_dies_is_asked_again_and_runs_once() {
    use chorus_tests::orchestrator::OrchestratorProcess;
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![
            create("once.txt"),
            // Resumed: the model sees its call interrupted and makes it again.
            create("once.txt"),
            done(),
        ])
        .await;
        let first = OrchestratorProcess::spawn(data_dir.path(), &db.url, &[]).await;
        let mut client = first.client().await;
        let team = writing_team(
            &mut client,
            root.path(),
            &model,
            vec![rule("file.create", "ask", "", 0)],
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Write once.").await;
        start(&mut client, &task, &team.agent, 0).await;
        let before = asked(&mut client, &task.id, 1).await;
        let old = approval_id(&before);
        drop(client);
        first.kill().await;

        let second = OrchestratorProcess::spawn(data_dir.path(), &db.url, &[]).await;
        let mut client = second.client().await;
        let again = asked(&mut client, &task.id, 2).await;
        let events = history(&mut client, &task.id).await;
        let ended = events
            .iter()
            .find(|e| e.kind == "approval_answered" && data(e)["approval_id"] == old.as_str())
            .map(data)
            .unwrap_or_else(|| panic!("{b}: the old wait was not ended: {:#?}", summary(&events)));
        assert_eq!(ended["outcome"], "canceled", "{b}: {ended}");
        assert!(
            ended["reason"]
                .as_str()
                .is_some_and(|r| r.contains("taken over")),
            "{b}: {ended}"
        );
        let waiting = task_of(&mut client, &task.id).await.waiting_approvals;
        assert_eq!(waiting.len(), 1, "{b}: only the new wait: {waiting:?}");
        // The old approval cannot be answered; the new one runs the call.
        let err = answer(&mut client, &task.id, &old, true, false, "")
            .await
            .expect_err("ended");
        assert_eq!(err.code(), tonic::Code::AlreadyExists, "{b}: {err:?}");
        let new = approval_id(&again);
        answer(&mut client, &task.id, &new, true, false, "")
            .await
            .expect("approve");
        wait_for(&mut client, &task.id, |e| {
            e.kind == "status_changed" && data(e)["to"] == "completed"
        })
        .await;
        let events = history(&mut client, &task.id).await;
        let created = events
            .iter()
            .filter(|e| {
                e.kind == "tool_executed"
                    && data(e)["tool"] == "file.create"
                    && data(e)["status"] == "ok"
            })
            .count();
        assert_eq!(created, 1, "{b}: run once: {:#?}", summary(&events));
        assert_eq!(
            std::fs::read_to_string(root.path().join("once.txt")).expect("written"),
            "once.txt",
            "{b}"
        );
        drop(client);
        let status = second.stop().await;
        assert!(status.success(), "{b}: {status:?}");
    }
}

/// Two replicas behind one address: a CLI agent's call waits on the replica
/// its tool-exec asked, and a person's answer given to the other replica
/// reaches it; the call runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_waiting_on_one_replica_runs_when_the_answer_reaches_the_other() {
    let Some(cluster) = chorus_tests::cluster::Cluster::start(2, 10).await else {
        return chorus_tests::faults::no_postgres();
    };
    let mut first = cluster.client(0).await;
    let ws = cluster.team(&mut first).await;
    add_agent(&mut first, &ws, "w", &["file.create"], "claude").await;
    set_rules(
        &mut first,
        &ws.id,
        "w",
        vec![rule("file.create", "ask", "", 0)],
    )
    .await;
    // Every question of tool-exec reaches r0.
    cluster.only_in_rotation(0);
    let script = [
        r#"fake: call {"tool":"file.create","path":"both.txt","content":"from two replicas"}"#,
        r#"fake: call {"tool":"completion-report","status":"complete","summary":"written","output":"both.txt"}"#,
    ]
    .join("\n");
    let task = planned_task(&mut first, &ws, &script).await;
    start(&mut first, &task, "w", 0).await;
    let request = asked(&mut first, &task.id, 1).await;
    assert!(
        !cluster.root.path().join("both.txt").exists(),
        "the call waits"
    );
    let mut second = cluster.client(1).await;
    let approved = answer(
        &mut second,
        &task.id,
        &approval_id(&request),
        true,
        false,
        "",
    )
    .await
    .expect("approve on r1");
    assert_eq!(approved.state, "approved");
    let events = wait_for(&mut second, &task.id, |e| {
        e.kind == "status_changed" && data(e)["to"] == "completed"
    })
    .await;
    chorus_tests::cluster::check_history(&events);
    assert_eq!(
        std::fs::read_to_string(cluster.root.path().join("both.txt")).expect("written"),
        "from two replicas"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == "tool_executed" && data(e)["tool"] == "file.create")
            .count(),
        1,
        "{:#?}",
        summary(&events)
    );
}

/// The two-service shape, each credential allowed two calls at once: many
/// more calls of tool-exec's key wait for people than that, and meanwhile
/// another run's tool calls, an admin's calls and the answers are served;
/// every waiting call runs once approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_waiting_for_people_hold_no_places_and_other_calls_are_served() {
    let Some(cluster) = chorus_tests::cluster::Cluster::start_with(
        1,
        10,
        &["--max-concurrent-requests-per-credential", "2"],
    )
    .await
    else {
        return chorus_tests::faults::no_postgres();
    };
    let mut client = cluster.client(0).await;
    let ws = cluster.team(&mut client).await;
    add_agent(&mut client, &ws, "w", &["file.create"], "claude").await;
    add_agent(&mut client, &ws, "free", &["file.create"], "claude").await;
    set_rules(
        &mut client,
        &ws.id,
        "w",
        vec![rule("file.create", "ask", "", 0)],
    )
    .await;
    let script = |file: &str| {
        [
            format!(
                r#"fake: call {{"tool":"file.create","path":"{file}","content":"{file}"}}"#
            ),
            format!(
                r#"fake: call {{"tool":"completion-report","status":"complete","summary":"written","output":"{file}"}}"#
            ),
        ]
        .join("\n")
    };
    let mut waiting = Vec::new();
    for i in 0..4 {
        let task = planned_task(&mut client, &ws, &script(&format!("asked-{i}.txt"))).await;
        start(&mut client, &task, "w", 0).await;
        let request = asked(&mut client, &task.id, 1).await;
        waiting.push((task, approval_id(&request)));
    }

    // Four calls of tool-exec's key wait; its places are two.
    let free = planned_task(&mut client, &ws, &script("free.txt")).await;
    start(&mut client, &free, "free", 0).await;
    let events = wait_for(&mut client, &free.id, |e| {
        e.kind == "status_changed" && (data(e)["to"] == "completed" || data(e)["to"] == "failed")
    })
    .await;
    assert_eq!(
        data(events.last().expect("an ending"))["to"],
        "completed",
        "another run's tool call is served while four wait: {:#?}",
        summary(&events)
    );
    assert!(cluster.root.path().join("free.txt").exists());
    let listed = client
        .list_tasks(pb::ListTasksRequest {
            workspace_id: ws.id.clone(),
            ..Default::default()
        })
        .await
        .expect("an admin's call is served while calls wait")
        .into_inner();
    assert_eq!(listed.tasks.len(), 5);
    for (i, (task, _)) in waiting.iter().enumerate() {
        assert!(
            !cluster.root.path().join(format!("asked-{i}.txt")).exists(),
            "task {} still waits",
            task.id
        );
    }

    for (i, (task, approval)) in waiting.iter().enumerate() {
        answer(&mut client, &task.id, approval, true, false, "")
            .await
            .expect("approve");
        let events = wait_for(&mut client, &task.id, |e| {
            e.kind == "status_changed" && data(e)["to"] == "completed"
        })
        .await;
        chorus_tests::cluster::check_history(&events);
        assert_eq!(
            std::fs::read_to_string(cluster.root.path().join(format!("asked-{i}.txt")))
                .expect("written once approved"),
            format!("asked-{i}.txt")
        );
    }
}
