//! Planning end to end: the internal task-validator runs on the workspace's
//! system provider (the fake OpenAI-compatible server plays the model), asks
//! questions, gets answers, plans with an assigned agent (a wrong one is refused
//! and it tries again), and StartTask runs that agent (the fake CLI) to
//! completion. Runs on SQLite, and on PostgreSQL too when configured.

use std::path::Path;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{Client, call, data, ends_run, report, task_of, use_provider, wait_for};
use chorus_tests::db::{TestDatabase, databases};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};

async fn orchestrator(data_dir: &Path, db: &TestDatabase) -> Orchestrator {
    Orchestrator::with_fake_cli(data_dir, &db.url, |config| {
        config.runner.api.backoff = Duration::from_millis(10);
    })
    .await
}

/// A workspace whose system provider is the fake model at `base_url` and whose
/// seeded writer runs on the fake CLI.
async fn workspace(client: &mut Client, root: &Path, base_url: &str) -> pb::Workspace {
    let workspace = chorus_tests::agents::workspace(client, "planned", root).await;
    for (name, kind, url, model) in [
        (
            "system",
            pb::ProviderKind::OpenaiCompatible,
            base_url,
            "fake-model",
        ),
        ("claude", pb::ProviderKind::ClaudeCode, "", ""),
    ] {
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: workspace.id.clone(),
                name: name.into(),
                kind: kind.into(),
                base_url: url.into(),
                model: model.into(),
                api_key: String::new(),
                ..Default::default()
            })
            .await
            .expect("provider");
    }
    use_provider(client, &workspace, &["writer"], "claude").await;
    client
        .update_workspace(pb::UpdateWorkspaceRequest {
            limits: None,
            id: workspace.id.clone(),
            name: None,
            system_provider: Some("system".into()),
            ..Default::default()
        })
        .await
        .expect("system provider")
        .into_inner()
}

async fn create_task(
    client: &mut Client,
    workspace: &pb::Workspace,
    description: &str,
) -> pb::Task {
    client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: workspace.id.clone(),
            description: description.into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner()
}

fn plan(assigned: &str) -> Step {
    Step::tool_call(
        "planner-output",
        json!({
            "type": "plan",
            "summary": "Write hello.txt",
            "requirements": ["a greeting"],
            "acceptanceCriteria": ["hello.txt exists"],
            "plan": ["create the file", "report"],
            "assignedAgent": assigned,
        }),
    )
}

fn is_status(to: &'static str) -> impl Fn(&pb::TaskEvent) -> bool {
    move |e| e.kind == "status_changed" && data(e)["to"] == to
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_questions_answers_plan_then_start_the_assigned_agent_to_completion() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![
            Step::tool_call(
                "planner-output",
                json!({"type": "questions", "questions": ["Which greeting?", "For whom?"]}),
            ),
            plan("ghost"),
            plan("writer"),
        ])
        .await;
        let orchestrator = orchestrator(data_dir.path(), &db).await;
        let mut client = orchestrator.client().await;
        let ws = workspace(&mut client, root.path(), &model.base_url()).await;
        let script = [
            "Greet the world in hello.txt.".to_owned(),
            call(&json!({"tool": "file.create", "path": "hello.txt", "content": "hello\n"})),
            report("complete", "greeted"),
        ]
        .join("\n");
        let task = create_task(&mut client, &ws, &script).await;

        let planning = client
            .plan_task(pb::PlanTaskRequest {
                id: task.id.clone(),
                timeout_secs: 0,
                ..Default::default()
            })
            .await
            .expect("plan")
            .into_inner();
        assert_eq!(planning.task.expect("task").status, "planning", "{b}");
        let planner_run = planning.run.expect("run");
        assert_eq!(planner_run.agent, "task-validator", "{b}");
        wait_for(&mut client, &task.id, is_status("awaiting_input")).await;
        let asking = task_of(&mut client, &task.id).await;
        let questions: Vec<&str> = asking
            .planning
            .as_ref()
            .expect("planning")
            .questions
            .iter()
            .map(|q| q.question.as_str())
            .collect();
        assert_eq!(questions, ["Which greeting?", "For whom?"], "{b}");

        // Planning again is not how questions are answered.
        let err = client
            .plan_task(pb::PlanTaskRequest {
                id: task.id.clone(),
                timeout_secs: 0,
                ..Default::default()
            })
            .await
            .expect_err("awaiting input");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{b}");
        assert!(err.message().contains("SubmitAnswers"), "{b}: {err:?}");
        let err = client
            .submit_answers(pb::SubmitAnswersRequest {
                id: task.id.clone(),
                answers: vec!["a".into(), "b".into(), "c".into()],
                timeout_secs: 0,
                ..Default::default()
            })
            .await
            .expect_err("too many");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}");

        let answered = client
            .submit_answers(pb::SubmitAnswersRequest {
                id: task.id.clone(),
                answers: vec!["hello".into()],
                timeout_secs: 0,
                ..Default::default()
            })
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(answered.task.expect("task").status, "planning", "{b}");
        wait_for(&mut client, &task.id, is_status("planned")).await;
        let planned = task_of(&mut client, &task.id).await;
        let plan_fields = planned.planning.expect("planning");
        assert_eq!(plan_fields.assigned_agent, "writer", "{b}");
        assert_eq!(plan_fields.plan, ["create the file", "report"], "{b}");
        assert_eq!(plan_fields.acceptance_criteria, ["hello.txt exists"], "{b}");

        // The second planning run saw the questions and answers, and was told
        // why its first plan was refused.
        let requests = model.requests();
        let second = requests[1]["messages"].as_array().expect("messages");
        let first_message = second[1]["content"].as_str().unwrap_or_default();
        assert!(
            first_message.contains("Q: Which greeting?\nA: hello"),
            "{b}: {first_message}"
        );
        assert!(
            first_message.contains("Q: For whom?\nA: (no answer)"),
            "{b}: {first_message}"
        );
        assert!(first_message.contains("- writer:"), "{b}: {first_message}");
        let refused = requests[2]["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            refused.contains("'ghost' is not an agent") && refused.contains("writer"),
            "{b}: {refused}"
        );

        // StartTask with no agent named runs the plan's assigned agent.
        let started = client
            .start_task(pb::StartTaskRequest {
                task_id: task.id.clone(),
                ..Default::default()
            })
            .await
            .expect("start")
            .into_inner();
        assert_eq!(started.run.expect("run").agent, "writer", "{b}");
        let events = wait_for(&mut client, &task.id, is_status("completed")).await;
        assert_eq!(
            std::fs::read_to_string(root.path().join("hello.txt")).expect("file"),
            "hello\n"
        );
        let story: Vec<String> = events
            .iter()
            .filter(|e| {
                e.kind.starts_with("planning_")
                    || e.kind == "answers_submitted"
                    || e.kind == "status_changed"
                    || e.kind == "planner_output_submitted"
            })
            .map(|e| match data(e)["to"].as_str() {
                Some(to) => format!("{}:{to}", e.kind),
                None => e.kind.clone(),
            })
            .collect();
        assert_eq!(
            story,
            [
                "status_changed:planning",
                "planning_started",
                "planner_output_submitted",
                "planning_questions_returned",
                "status_changed:awaiting_input",
                "answers_submitted",
                "status_changed:planning",
                "planning_started",
                "planner_output_submitted",
                "planning_completed",
                "status_changed:planned",
                "status_changed:active",
                "status_changed:completed",
            ],
            "{b}"
        );
        let answers = events
            .iter()
            .find(|e| e.kind == "answers_submitted")
            .map(data)
            .expect("answers");
        assert_eq!(
            answers["answers"],
            json!([
                {"question": "Which greeting?", "answer": "hello"},
                {"question": "For whom?", "answer": null},
            ]),
            "{b}"
        );
        drop(client);
        orchestrator.stop().await;
    }
}

/// The questions of a task, as (question, answer, round).
fn asked(task: &pb::Task) -> Vec<(String, Option<String>, u32)> {
    let planning = task.planning.as_ref().expect("planning");
    planning
        .questions
        .iter()
        .map(|q| (q.question.clone(), q.answer.clone(), q.round))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_round_of_questions_keeps_the_first_and_the_planner_reads_both() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![
            Step::tool_call(
                "planner-output",
                json!({"type": "questions", "questions": ["Which greeting?", "For whom?"]}),
            ),
            Step::tool_call(
                "planner-output",
                json!({"type": "questions", "questions": ["Loud or quiet?"]}),
            ),
            plan("writer"),
        ])
        .await;
        let orchestrator = orchestrator(data_dir.path(), &db).await;
        let mut client = orchestrator.client().await;
        let ws = workspace(&mut client, root.path(), &model.base_url()).await;
        let task = create_task(&mut client, &ws, "Greet the world in hello.txt.").await;
        client
            .plan_task(pb::PlanTaskRequest {
                task_id: task.id.clone(),
                ..Default::default()
            })
            .await
            .expect("plan");
        let awaiting = std::cell::Cell::new(0);
        let nth_wait = |n: usize| {
            let awaiting = &awaiting;
            move |e: &pb::TaskEvent| {
                if is_status("awaiting_input")(e) {
                    awaiting.set(awaiting.get() + 1);
                }
                awaiting.get() == n
            }
        };
        wait_for(&mut client, &task.id, nth_wait(1)).await;
        let answer = |answers: &[&str]| pb::SubmitAnswersRequest {
            task_id: task.id.clone(),
            answers: answers.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        };
        client
            .submit_answers(answer(&["hello"]))
            .await
            .expect("round 1");
        awaiting.set(0);
        wait_for(&mut client, &task.id, nth_wait(2)).await;
        let asking = task_of(&mut client, &task.id).await;
        let s = |v: &str| v.to_owned();
        assert_eq!(
            asked(&asking),
            [
                (s("Which greeting?"), Some(s("hello")), 1),
                (s("For whom?"), None, 1),
                (s("Loud or quiet?"), None, 2),
            ],
            "{b}: the first round stays, its unanswered question too"
        );
        let err = client
            .submit_answers(answer(&["loud", "extra"]))
            .await
            .expect_err("round 2 has one question");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}");
        assert!(err.message().contains("latest round"), "{b}: {err:?}");
        client
            .submit_answers(answer(&["loud"]))
            .await
            .expect("round 2");
        wait_for(&mut client, &task.id, is_status("planned")).await;
        let planned = task_of(&mut client, &task.id).await;
        assert_eq!(
            asked(&planned),
            [
                (s("Which greeting?"), Some(s("hello")), 1),
                (s("For whom?"), None, 1),
                (s("Loud or quiet?"), Some(s("loud")), 2),
            ],
            "{b}"
        );
        let requests = model.requests();
        let third = requests[2]["messages"][1]["content"]
            .as_str()
            .unwrap_or_default();
        for qa in [
            "Q: Which greeting?\nA: hello",
            "Q: For whom?\nA: (no answer)",
            "Q: Loud or quiet?\nA: loud",
        ] {
            assert!(
                third.contains(qa),
                "{b}: the third planning run misses {qa:?}: {third}"
            );
        }
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_that_errs_or_never_answers_fails_the_task_with_the_reason() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let root = tempfile::tempdir().expect("root");
    let model = FakeOpenAi::start(vec![
        Step::tool_call(
            "planner-output",
            json!({"type": "error", "error": "the repository named in the task does not exist"}),
        ),
        Step::text("Let me think about it."),
        Step::text("Still thinking."),
    ])
    .await;
    let orchestrator = orchestrator(data_dir.path(), &db).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, root.path(), &model.base_url()).await;

    let erring = create_task(&mut client, &ws, "Fix the bug in repo X.").await;
    client
        .plan_task(pb::PlanTaskRequest {
            id: erring.id.clone(),
            timeout_secs: 0,
            ..Default::default()
        })
        .await
        .expect("plan");
    let events = wait_for(&mut client, &erring.id, is_status("failed")).await;
    let failed = events
        .iter()
        .find(|e| e.kind == "planning_failed")
        .map(data)
        .expect("planning_failed");
    assert_eq!(
        failed["reason"],
        "the repository named in the task does not exist"
    );

    // No planner output at all: one reminder, then failed.
    let silent = create_task(&mut client, &ws, "Something vague.").await;
    client
        .plan_task(pb::PlanTaskRequest {
            id: silent.id.clone(),
            timeout_secs: 0,
            ..Default::default()
        })
        .await
        .expect("plan");
    let events = wait_for(&mut client, &silent.id, ends_run).await;
    assert!(
        events.iter().any(|e| e.kind == "agent_progress"
            && data(e)["kind"] == "reminder"
            && data(e)["text"]
                .as_str()
                .unwrap_or_default()
                .contains("planner-output")),
        "the planner was reminded"
    );
    let task = task_of(&mut client, &silent.id).await;
    assert_eq!(task.status, "failed");
    assert!(
        task.status_reason
            .contains("ended without its planner output, even after a reminder"),
        "{}",
        task.status_reason
    );
    let requests = model.requests();
    let reminder = requests[2]["messages"]
        .as_array()
        .expect("messages")
        .last()
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        reminder["content"]
            .as_str()
            .unwrap_or_default()
            .contains("planner-output"),
        "{reminder}"
    );
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_needs_a_system_provider_and_a_pending_task() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data_dir.path(), &db).await;
    let mut client = orchestrator.client().await;
    let ws = chorus_tests::agents::workspace(&mut client, "bare", root.path()).await;
    let task = create_task(&mut client, &ws, "Plan me.").await;
    let err = client
        .plan_task(pb::PlanTaskRequest {
            id: task.id.clone(),
            timeout_secs: 0,
            ..Default::default()
        })
        .await
        .expect_err("no system provider");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("no system provider") && err.message().contains("UpdateWorkspace"),
        "{err:?}"
    );
    let err = client
        .submit_answers(pb::SubmitAnswersRequest {
            id: task.id.clone(),
            answers: vec!["yes".into()],
            timeout_secs: 0,
            ..Default::default()
        })
        .await
        .expect_err("not awaiting input");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("awaiting_input; it is pending"),
        "{err:?}"
    );
    let unchanged = task_of(&mut client, &task.id).await;
    assert_eq!(
        (unchanged.status.as_str(), unchanged.last_sequence),
        ("pending", 1)
    );
    drop(client);
    orchestrator.stop().await;
}
