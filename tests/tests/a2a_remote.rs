//! The `a2a` provider: a Chorus agent hands work to a remote agent made
//! with the official A2A SDK's server side. The remote agent's streamed
//! updates are the child run's progress and its artifact comes back to the
//! parent; a question from it ends the child blocked with the question
//! (Chorus answers nothing on its behalf); one that hangs is ended by the
//! handoff's timeout, and its remote task canceled; the card is checked
//! when the provider is created.

use std::path::Path;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::a2a::{RemoteAgent, python_or_skip};
use chorus_tests::agents::{
    Client, api_team, completed_by, data, history, planned_task, runs_of, start, wait_for,
};
use chorus_tests::db::{TestDatabase, databases};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

const KEY: &str = "remote-key-1";

async fn orchestrator(data_dir: &Path, db: &TestDatabase) -> Orchestrator {
    Orchestrator::with_fake_cli(data_dir, &db.url, |config| {
        config.runner.api.backoff = Duration::from_millis(10);
    })
    .await
}

/// An orchestrator on SQLite whose agent `worker` (granted `tools`) runs on
/// `model`; the directories live as long as it.
struct Lead {
    _data: tempfile::TempDir,
    _root: tempfile::TempDir,
    _orchestrator: Orchestrator,
    client: Client,
    team: chorus_tests::agents::Team,
}

async fn lead(model: &FakeOpenAi, tools: &[&str]) -> Lead {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let sqlite = databases(data.path()).remove(0);
    let orchestrator = orchestrator(data.path(), &sqlite).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, root.path(), model, tools, "You lead.").await;
    Lead {
        _data: data,
        _root: root,
        _orchestrator: orchestrator,
        client,
        team,
    }
}

/// The remote agent as provider `remote` and agent `translator` of the workspace.
async fn add_remote(client: &mut Client, workspace: &pb::Workspace, url: &str) {
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: workspace.id.clone(),
            name: "remote".into(),
            kind: pb::ProviderKind::A2a.into(),
            base_url: url.into(),
            api_key: KEY.into(),
            ..Default::default()
        })
        .await
        .expect("the a2a provider");
    client
        .create_agent(pb::CreateAgentRequest {
            workspace_id: workspace.id.clone(),
            name: "translator".into(),
            instructions: "A remote translator.".into(),
            provider: "remote".into(),
            ..Default::default()
        })
        .await
        .expect("the remote agent");
}

fn handoff(timeout_secs: Option<u64>) -> Step {
    let mut args = json!({ "agent": "translator", "prompt": "Translate hello" });
    if let Some(t) = timeout_secs {
        args["timeout_secs"] = json!(t);
    }
    Step::tool_call("handoff", args)
}

fn report() -> Step {
    Step::tool_call(
        "completion-report",
        json!({ "status": "complete", "summary": "asked the translator", "output": "ok" }),
    )
}

/// The child run's events (progress and its end), as text.
async fn child_events(client: &mut Client, task: &str) -> Vec<Value> {
    history(client, task)
        .await
        .iter()
        .filter(|e| data(e)["agent"] == "translator")
        .map(|e| json!({ "kind": e.kind, "data": data(e) }))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agents_updates_are_the_childs_progress_and_its_artifact_returns_to_the_parent() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dbs = tempfile::tempdir().expect("dbs");
    for db in databases(dbs.path()) {
        let b = db.backend;
        let remote = RemoteAgent::start(&python, "work", KEY).await;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![handoff(None), report()]).await;
        let orchestrator = orchestrator(dbs.path(), &db).await;
        let mut client = orchestrator.client().await;
        let team = api_team(&mut client, root.path(), &model, &["handoff"], "You lead.").await;
        add_remote(&mut client, &team.workspace, &remote.url).await;
        let task = planned_task(&mut client, &team.workspace, "Translate.").await;
        start(&mut client, &task, &team.agent, 0).await;
        wait_for(&mut client, &task.id, completed_by("worker")).await;

        let child = child_events(&mut client, &task.id).await;
        let said = serde_json::to_string(&child).expect("json");
        for progress in [
            "[remote working] remote: reading the prompt",
            "[remote working] remote: halfway",
            "[remote artifact] answer",
        ] {
            assert!(said.contains(progress), "{b}: no '{progress}' in {said}");
        }
        let report = child
            .iter()
            .find(|e| e["kind"] == "completion_report_submitted")
            .unwrap_or_else(|| panic!("{b}: the child has no report: {said}"));
        assert_eq!(report["data"]["status"], "complete", "{b}");
        // The remote agent was told the work itself, with the provider's key.
        assert!(
            remote.log().contains("remote got: 'Translate hello'"),
            "{b}: {}",
            remote.log()
        );
        // The parent's model read the remote result as the handoff's answer.
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "{b}");
        let after = requests[1].to_string();
        assert!(
            after.contains("REMOTE RESULT for: Translate hello"),
            "{b}: {after}"
        );
        // The child's run keeps the remote task as its session.
        let runs = runs_of(&mut client, &task.id, "translator").await;
        let child_run = runs.first().expect("the child run");
        assert!(!child_run.session_id.is_empty(), "{b}: {child_run:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_remote_is_ended_by_the_timeout_and_its_task_canceled_with_the_chorus_task() {
    let Some(python) = python_or_skip() else {
        return;
    };
    for (mode, timeout) in [("hang", Some(2)), ("cancel", None)] {
        let remote =
            RemoteAgent::start(&python, if mode == "ask" { "ask" } else { "hang" }, KEY).await;
        let model = FakeOpenAi::start(vec![handoff(timeout), report()]).await;
        let Lead {
            mut client,
            team,
            // Held to the end: they are the orchestrator and its directories.
            _data,
            _root,
            _orchestrator,
        } = lead(&model, &["handoff"]).await;
        add_remote(&mut client, &team.workspace, &remote.url).await;
        let task = planned_task(&mut client, &team.workspace, "Translate.").await;
        start(&mut client, &task, &team.agent, 0).await;
        if mode == "cancel" {
            // Canceled while the remote agent works: the remote task is canceled too.
            wait_for(&mut client, &task.id, |e| {
                e.kind == "agent_progress"
                    && chorus_tests::agents::data(e)
                        .to_string()
                        .contains("thinking for ever")
            })
            .await;
            client
                .cancel_task(pb::CancelTaskRequest {
                    task_id: task.id.clone(),
                    ..Default::default()
                })
                .await
                .expect("cancel");
            chorus_sandbox::testing::eventually("the remote task is canceled", || {
                remote.log().contains("remote canceled")
            })
            .await;
            continue;
        }
        wait_for(&mut client, &task.id, completed_by("worker")).await;
        let requests = model.requests();
        let after = requests[1].to_string();
        let child =
            serde_json::to_string(&child_events(&mut client, &task.id).await).expect("json");
        assert!(after.contains("timed out"), "{mode}: {after}");
        assert!(
            child.contains("remote: thinking for ever"),
            "{mode}: {child}"
        );
        // The remote task was canceled when the run timed out.
        chorus_sandbox::testing::eventually("the remote task is canceled", || {
            remote.log().contains("remote canceled")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_card_is_missing_or_unfit_is_refused_and_not_created() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let remote = RemoteAgent::start(&python, "work", KEY).await;
    let model = FakeOpenAi::start(vec![]).await;
    let Lead {
        mut client,
        team,
        // Held to the end: they are the orchestrator and its directories.
        _data,
        _root,
        _orchestrator,
    } = lead(&model, &[]).await;
    // A base URL with no card (the model server's), and one where nothing listens.
    for (url, says) in [
        (model.base_url(), "the agent card at"),
        (
            "http://127.0.0.1:9/a".to_owned(),
            "cannot fetch the agent card",
        ),
    ] {
        let refused = client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: team.workspace.id.clone(),
                name: "remote".into(),
                kind: pb::ProviderKind::A2a.into(),
                base_url: url.clone(),
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(
            refused.code(),
            tonic::Code::FailedPrecondition,
            "{url}: {refused:?}"
        );
        assert!(
            refused.message().contains(says),
            "{url}: {}",
            refused.message()
        );
    }
    let providers = client
        .list_providers(pb::ListProvidersRequest {
            workspace_id: team.workspace.id.clone(),
        })
        .await
        .expect("providers")
        .into_inner()
        .providers;
    assert!(
        providers.iter().all(|p| p.name != "remote"),
        "{providers:?}"
    );
    add_remote(&mut client, &team.workspace, &remote.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_question_ends_the_child_blocked_and_the_parents_next_handoff_answers_it() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let remote = RemoteAgent::start(&python, "ask", KEY).await;
    let answer = Step::tool_call(
        "handoff",
        json!({ "agent": "translator", "prompt": "French" }),
    );
    let model = FakeOpenAi::start(vec![handoff(None), answer, report()]).await;
    let Lead {
        mut client,
        team,
        // Held to the end: they are the orchestrator and its directories.
        _data,
        _root,
        _orchestrator,
    } = lead(&model, &["handoff"]).await;
    add_remote(&mut client, &team.workspace, &remote.url).await;
    let task = planned_task(&mut client, &team.workspace, "Translate.").await;
    start(&mut client, &task, &team.agent, 0).await;
    wait_for(&mut client, &task.id, completed_by("worker")).await;

    // The question came back to the parent as a blocked child, with nothing
    // answered on its behalf.
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    let asked = requests[1].to_string();
    assert!(asked.contains("remote: which language?"), "{asked}");
    assert!(asked.contains("blocked"), "{asked}");
    // The parent's next handoff answered it, on the same remote task.
    let answered = requests[2].to_string();
    assert!(answered.contains("REMOTE RESULT in: French"), "{answered}");
    let runs = runs_of(&mut client, &task.id, "translator").await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(!runs[0].session_id.is_empty());
    assert_eq!(
        runs[0].session_id, runs[1].session_id,
        "one remote task: {runs:?}"
    );
    let log = remote.log();
    assert!(
        log.contains("remote got: 'Translate hello'") && log.contains("remote got: 'French'"),
        "{log}"
    );
}
