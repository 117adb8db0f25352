//! A limit that holds: a task's budget is checked by the server after every
//! model call and tool call of any of its runs — a warning at 80 %, and at
//! the limit the whole run tree stops, `budget_exceeded` is recorded once and
//! the task waits until the limit is raised and it is started again. Agents
//! on an OpenAI-compatible API with a scripted fake model (every answer is
//! 18 tokens). SQLite, and PostgreSQL when configured.

use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    add_agent, api_team, completed_by, data, planned_task, start, task_of, wait_for,
};
use chorus_tests::db::databases;
use chorus_tests::fake_openai::{COMPLETION_TOKENS, FakeOpenAi, PROMPT_TOKENS, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

/// Tokens of one answer of the fake model.
const CALL_TOKENS: u64 = PROMPT_TOKENS + COMPLETION_TOKENS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_reached_in_a_grandchild_stops_the_whole_tree_until_it_is_raised() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("a file");
        let read = || Step::tool_call("file_read", json!({"path": "notes.txt"}));
        let model = FakeOpenAi::start(vec![
            // lead → mid → leaf, each handing on.
            Step::tool_call("handoff", json!({"agent": "mid", "prompt": "go on"})),
            Step::tool_call("handoff", json!({"agent": "leaf", "prompt": "read"})),
            // The leaf's calls: the 4th of the task passes 80 %, the 5th the limit.
            read(),
            read(),
            read(),
            // After the limit is raised, the lead starts again and reports.
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": "done at last", "output": "ok"}),
            ),
        ])
        .await;
        let orchestrator = Orchestrator::with_fake_cli(data_dir.path(), &db.url, |config| {
            config.runner.api.backoff = Duration::from_millis(10);
        })
        .await;
        let mut client = orchestrator.client().await;
        let team = api_team(&mut client, root.path(), &model, &["handoff"], "You lead.").await;
        add_agent(&mut client, &team.workspace, "mid", &["handoff"], "model").await;
        add_agent(
            &mut client,
            &team.workspace,
            "leaf",
            &["file.read"],
            "model",
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Read, through two others.").await;
        let limit = 5 * CALL_TOKENS;
        client
            .update_task_budget(pb::UpdateTaskBudgetRequest {
                task_id: task.id.clone(),
                budget: Some(pb::Budget {
                    tokens: Some(limit),
                    ..Default::default()
                }),
            })
            .await
            .expect("a budget");
        start(&mut client, &task, &team.agent, 0).await;
        let events = wait_for(&mut client, &task.id, |e| {
            e.kind == "status_changed" && data(e)["to"] == "waiting"
        })
        .await;
        let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
        assert_eq!(count("budget_warning"), 1, "{b}");
        assert_eq!(count("budget_exceeded"), 1, "{b}: recorded once");
        let exceeded = events
            .iter()
            .find(|e| e.kind == "budget_exceeded")
            .map(data)
            .expect("exceeded");
        assert_eq!(exceeded["limit"], "tokens", "{b}: {exceeded}");
        let stopped = task_of(&mut client, &task.id).await;
        assert_eq!(stopped.status, "waiting", "{b}");
        assert!(
            stopped
                .status_reason
                .starts_with("budget_exceeded: its tokens limit of 90 tokens")
                && stopped.status_reason.contains("UpdateTaskBudget"),
            "{b}: {}",
            stopped.status_reason
        );
        let usage = stopped.usage.unwrap_or_default();
        assert_eq!(usage.model_calls, 5, "{b}: no call after the limit");
        let reads = events
            .iter()
            .filter(|e| e.kind == "tool_executed" && data(e)["tool"] == "file.read")
            .count();
        assert_eq!(
            reads, 2,
            "{b}: the call that reached the limit had its tool call stopped before it ran"
        );
        // Every run of the tree ended, the grandchild's and those above it.
        let runs = client
            .list_runs(pb::ListRunsRequest {
                task_id: task.id.clone(),
            })
            .await
            .expect("runs")
            .into_inner()
            .runs;
        let agents: Vec<(&str, &str)> = runs
            .iter()
            .map(|r| (r.agent.as_str(), r.state.as_str()))
            .collect();
        assert_eq!(
            agents,
            [
                ("worker", "finished"),
                ("mid", "finished"),
                ("leaf", "finished")
            ],
            "{b}"
        );

        // Starting it again is refused while the limit stands…
        let err = client
            .start_task(pb::StartTaskRequest {
                task_id: task.id.clone(),
                agent: team.agent.clone(),
                ..Default::default()
            })
            .await
            .expect_err("over its budget");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{b}: {err:?}");
        assert!(err.message().contains("budget_exceeded"), "{b}: {err:?}");
        // …and works once it is raised.
        client
            .update_task_budget(pb::UpdateTaskBudgetRequest {
                task_id: task.id.clone(),
                budget: Some(pb::Budget {
                    tokens: Some(100 * CALL_TOKENS),
                    ..Default::default()
                }),
            })
            .await
            .expect("raised");
        start(&mut client, &task, &team.agent, 0).await;
        wait_for(&mut client, &task.id, completed_by("worker")).await;
        let done = task_of(&mut client, &task.id).await;
        assert_eq!(done.usage.unwrap_or_default().model_calls, 6, "{b}");

        // A budget of 0 is refused, naming the limit.
        let err = client
            .update_task_budget(pb::UpdateTaskBudgetRequest {
                task_id: task.id.clone(),
                budget: Some(pb::Budget {
                    tool_calls: Some(0),
                    ..Default::default()
                }),
            })
            .await
            .expect_err("0");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}: {err:?}");
        assert!(err.message().contains("tool_calls"), "{b}: {err:?}");
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_limit_set_at_creation_stops_the_run_at_its_last_call() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("a file");
        let read = || Step::tool_call("file_read", json!({"path": "notes.txt"}));
        let model = FakeOpenAi::start(vec![read(), read(), read(), read()]).await;
        let orchestrator = Orchestrator::with_fake_cli(data_dir.path(), &db.url, |config| {
            config.runner.api.backoff = Duration::from_millis(10);
        })
        .await;
        let mut client = orchestrator.client().await;
        let team = api_team(
            &mut client,
            root.path(),
            &model,
            &["file.read"],
            "You read.",
        )
        .await;
        let created = client
            .create_task(pb::CreateTaskRequest {
                workspace_id: team.workspace.id.clone(),
                description: "Read a lot.".into(),
                source: None,
                budget: Some(pb::Budget {
                    tool_calls: Some(2),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("a task with a budget")
            .into_inner();
        let limits = created.budget.unwrap_or_default().limits;
        assert_eq!(limits.unwrap_or_default().tool_calls, Some(2), "{b}");
        chorus_tests::agents::mark_planned(&mut client, &created.id).await;
        start(&mut client, &created, &team.agent, 0).await;
        let events = wait_for(&mut client, &created.id, |e| e.kind == "budget_exceeded").await;
        let executed = events.iter().filter(|e| e.kind == "tool_executed").count();
        assert_eq!(executed, 2, "{b}: stopped at its second call");
        let task = task_of(&mut client, &created.id).await;
        assert_eq!(task.budget.unwrap_or_default().tool_calls, 2, "{b}");
        assert!(
            task.status_reason
                .contains("tool_calls limit of 2 tool calls"),
            "{b}: {}",
            task.status_reason
        );
        drop(client);
        orchestrator.stop().await;
    }
}

/// USD per million tokens of the fake model: each answer costs 72 micro-dollars.
const PRICES: &str = "[models.\"fake-model\"]\ninput = 2.0\noutput = 8.0\ncache-read = 0.5\n";
const CALL_USD: f64 = 72e-6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_fill_the_limits_a_task_leaves_out_and_a_workspace_day_limit_stops_its_tasks() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("a file");
        let read = || Step::tool_call("file_read", json!({"path": "notes.txt"}));
        let report = || {
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": "read", "output": "ok"}),
            )
        };
        let model = FakeOpenAi::start(vec![read(), report(), read(), report()]).await;
        let orchestrator = Orchestrator::with_fake_cli(data_dir.path(), &db.url, |config| {
            config.runner.api.backoff = Duration::from_millis(10);
            config.prices = chorus_orchestrator::domain::Prices::parse(PRICES).expect("prices");
        })
        .await;
        let mut client = orchestrator.client().await;
        let team = api_team(
            &mut client,
            root.path(),
            &model,
            &["file.read"],
            "You read.",
        )
        .await;
        // The workspace: a default task budget, and a day's spending limit of
        // 2.4 calls' cost (two calls pass 80 % of it, the third reaches it).
        let limits = |daily: f64| pb::WorkspaceLimits {
            task_budget: Some(pb::Budget {
                tokens: Some(10_000),
                tool_calls: Some(50),
                ..Default::default()
            }),
            daily_cost_usd: Some(daily),
            monthly_cost_usd: None,
        };
        client
            .update_workspace(pb::UpdateWorkspaceRequest {
                id: team.workspace.id.clone(),
                limits: Some(limits(2.4 * CALL_USD)),
                ..Default::default()
            })
            .await
            .expect("limits");
        // The agent's default over the workspace's.
        client
            .update_agent(pb::UpdateAgentRequest {
                workspace_id: team.workspace.id.clone(),
                name: team.agent.clone(),
                budget: Some(pb::Budget {
                    tokens: Some(5_000),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("the agent's default");

        // The first task spends two calls and completes.
        let first = planned_task(&mut client, &team.workspace, "Read once.").await;
        start(&mut client, &first, &team.agent, 0).await;
        let events = wait_for(&mut client, &first.id, completed_by("worker")).await;
        // Past 80 % of the day's limit: warned once, as a task's own limits warn.
        let warnings: Vec<serde_json::Value> = events
            .iter()
            .filter(|e| e.kind == "budget_warning")
            .map(data)
            .collect();
        assert_eq!(warnings.len(), 1, "{b}: {warnings:?}");
        assert_eq!(warnings[0]["limit"], "workspace_daily_cost_usd", "{b}");
        assert_eq!(warnings[0]["percent"], 83, "{b}: {warnings:?}");
        let limits_of = task_of(&mut client, &first.id)
            .await
            .budget
            .unwrap_or_default()
            .limits
            .unwrap_or_default();
        assert_eq!(
            (limits_of.tokens, limits_of.tool_calls, limits_of.cost_usd),
            (Some(5_000), Some(50), None),
            "{b}: the agent's tokens, the workspace's tool calls, no cost limit"
        );

        // The second reaches the day's limit at its first call and stops.
        let second = planned_task(&mut client, &team.workspace, "Read again.").await;
        start(&mut client, &second, &team.agent, 0).await;
        let events = wait_for(&mut client, &second.id, |e| e.kind == "budget_exceeded").await;
        let exceeded = data(events.last().expect("exceeded"));
        assert_eq!(
            exceeded["limit"], "workspace_daily_cost_usd",
            "{b}: {exceeded}"
        );
        let stopped = task_of(&mut client, &second.id).await;
        assert_eq!(stopped.status, "waiting", "{b}");
        assert!(
            stopped.status_reason.contains("UpdateWorkspace"),
            "{b}: {}",
            stopped.status_reason
        );
        // A third cannot start while the day's limit stands.
        let third = planned_task(&mut client, &team.workspace, "Read a third time.").await;
        let err = client
            .start_task(pb::StartTaskRequest {
                task_id: third.id.clone(),
                agent: team.agent.clone(),
                ..Default::default()
            })
            .await
            .expect_err("the day's limit");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{b}: {err:?}");
        assert!(
            err.message().contains("workspace_daily_cost_usd"),
            "{b}: {err:?}"
        );
        // Every call counted once: three, in the day's sums.
        let usage = client
            .get_usage(pb::GetUsageRequest {
                workspace_id: team.workspace.id.clone(),
                ..Default::default()
            })
            .await
            .expect("usage")
            .into_inner()
            .total
            .unwrap_or_default();
        assert_eq!(usage.model_calls, 3, "{b}: {usage:?}");
        assert!(
            (usage.cost_usd - 3.0 * CALL_USD).abs() < 1e-9,
            "{b}: {usage:?}"
        );

        // Raised, the stopped task goes on.
        client
            .update_workspace(pb::UpdateWorkspaceRequest {
                id: team.workspace.id.clone(),
                limits: Some(limits(1.0)),
                ..Default::default()
            })
            .await
            .expect("raised");
        start(&mut client, &second, &team.agent, 0).await;
        wait_for(&mut client, &second.id, completed_by("worker")).await;
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_day_limit_holds_across_two_replicas_and_counts_each_call_once() {
    use chorus_tests::cluster::Cluster;
    let dir = tempfile::tempdir().expect("dir");
    let prices = dir.path().join("prices.toml");
    std::fs::write(&prices, PRICES).expect("the price table");
    let prices = prices.display().to_string();
    let Some(cluster) = Cluster::start_with(2, 20, &["--prices", &prices]).await else {
        eprintln!("CHORUS_TEST_DATABASE_URL is not set: replicas need PostgreSQL; skipped");
        return;
    };
    std::fs::write(cluster.root.path().join("notes.txt"), "alpha\n").expect("a file");
    let read = || Step::tool_call("file_read", json!({"path": "notes.txt"}));
    let left_model = FakeOpenAi::start((0..10).map(|_| read()).collect()).await;
    let right_model = FakeOpenAi::start((0..10).map(|_| read()).collect()).await;
    let mut first = cluster.client(0).await;
    let mut second = cluster.client(1).await;
    let ws = chorus_tests::agents::workspace(&mut first, "spend", cluster.root.path()).await;
    for (side, model) in [("left", &left_model), ("right", &right_model)] {
        first
            .create_provider(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: side.into(),
                kind: pb::ProviderKind::OpenaiCompatible.into(),
                base_url: model.base_url(),
                model: "fake-model".into(),
                api_key: "sk-test".into(),
                ..Default::default()
            })
            .await
            .expect("provider");
        add_agent(&mut first, &ws, side, &["file.read"], side).await;
    }
    let limit_calls = 5.0;
    first
        .update_workspace(pb::UpdateWorkspaceRequest {
            id: ws.id.clone(),
            limits: Some(pb::WorkspaceLimits {
                daily_cost_usd: Some(limit_calls * CALL_USD),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("a day's limit");
    // One task driven by each replica, at once.
    let left = planned_task(&mut first, &ws, "Read on the left.").await;
    let right = planned_task(&mut first, &ws, "Read on the right.").await;
    start(&mut first, &left, "left", 0).await;
    start(&mut second, &right, "right", 0).await;
    for task in [&left, &right] {
        let events = wait_for(&mut first, &task.id, |e| e.kind == "budget_exceeded").await;
        let exceeded = data(events.last().expect("exceeded"));
        assert_eq!(exceeded["limit"], "workspace_daily_cost_usd", "{exceeded}");
    }
    let mut per_task = 0;
    for task in [&left, &right] {
        let t = task_of(&mut first, &task.id).await;
        assert_eq!(t.status, "waiting", "{}", t.status_reason);
        per_task += t.usage.unwrap_or_default().model_calls;
    }
    // Every call is counted once — in its task and in the day's sums, which
    // agree with what the models answered — and the limit held: past it,
    // at most the one call the other task had in flight.
    let day = first
        .get_usage(pb::GetUsageRequest {
            workspace_id: ws.id.clone(),
            ..Default::default()
        })
        .await
        .expect("usage")
        .into_inner()
        .total
        .unwrap_or_default();
    let answered = (left_model.requests().len() + right_model.requests().len()) as u64;
    assert_eq!(day.model_calls, per_task, "{day:?}");
    assert_eq!(day.model_calls, answered, "{day:?}");
    assert!(
        (5..=6).contains(&day.model_calls),
        "the limit is 5 calls' cost: {day:?}"
    );
    assert!(
        (day.cost_usd - day.model_calls as f64 * CALL_USD).abs() < 1e-9,
        "{day:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_time_limit_stops_the_task_at_its_first_call_past_it() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![
            Step::tool_call("bash", json!({"command": "sleep 2"})),
            Step::tool_call("bash", json!({"command": "echo never"})),
        ])
        .await;
        let orchestrator = Orchestrator::with_fake_cli(data_dir.path(), &db.url, |config| {
            config.runner.api.backoff = Duration::from_millis(10);
        })
        .await;
        let mut client = orchestrator.client().await;
        let team = api_team(&mut client, root.path(), &model, &["bash"], "You wait.").await;
        let task = planned_task(&mut client, &team.workspace, "Wait a while.").await;
        client
            .update_task_budget(pb::UpdateTaskBudgetRequest {
                task_id: task.id.clone(),
                budget: Some(pb::Budget {
                    wall_secs: Some(1),
                    ..Default::default()
                }),
            })
            .await
            .expect("a wall-time limit");
        start(&mut client, &task, &team.agent, 0).await;
        let events = wait_for(&mut client, &task.id, |e| e.kind == "budget_exceeded").await;
        let exceeded = data(events.last().expect("exceeded"));
        assert_eq!(exceeded["limit"], "wall_secs", "{b}: {exceeded}");
        let ran: Vec<_> = events
            .iter()
            .filter(|e| e.kind == "tool_executed")
            .map(|e| data(e)["input"]["command"].clone())
            .collect();
        assert_eq!(ran, [json!("sleep 2")], "{b}: the second command never ran");
        let stopped = task_of(&mut client, &task.id).await;
        assert_eq!(stopped.status, "waiting", "{b}");
        assert!(
            stopped
                .status_reason
                .contains("wall_secs limit of 1 s active"),
            "{b}: {}",
            stopped.status_reason
        );
        drop(client);
        orchestrator.stop().await;
    }
}
