//! What a task costs, as a team lead reads it: every model call recorded as
//! it happens (tokens, cache, cost from the price table or marked unpriced),
//! rolled up the handoff tree and over days with GetUsage, and kept however
//! the run ends. Agents on an OpenAI-compatible API, with a scripted fake
//! model that reports the same usage for every answer. SQLite, and
//! PostgreSQL when configured.

use std::path::Path;
use std::time::Duration;

use chorus_orchestrator::domain::Prices;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, add_agent, api_team, completed_by, data, ends_run, planned_task, start, task_of,
    wait_for,
};
use chorus_tests::db::{TestDatabase, databases};
use chorus_tests::fake_openai::{
    CACHED_TOKENS, COMPLETION_TOKENS, FakeOpenAi, PROMPT_TOKENS, Step,
};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

/// USD per million tokens of the fake model: each of its answers costs
/// 7 × 2.0 + 4 × 0.5 + 7 × 8.0 = 72 micro-dollars (uncached input, cached
/// input, output).
const PRICES: &str = r#"
[models."fake-model"]
input = 2.0
output = 8.0
cache-read = 0.5
"#;
const CALL_MICRO_USD: u64 = 72;

async fn orchestrator(data_dir: &Path, db: &TestDatabase) -> Orchestrator {
    Orchestrator::with_fake_cli(data_dir, &db.url, |config| {
        config.runner.api.backoff = Duration::from_millis(10);
        config.prices = Prices::parse(PRICES).expect("the price table");
    })
    .await
}

fn usage_of(usage: Option<&pb::Usage>) -> (u64, u64, u64, u64, u64, u64) {
    let u = usage.cloned().unwrap_or_default();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let micro = (u.cost_usd * 1_000_000.0).round() as u64;
    (
        u.model_calls,
        u.input_tokens,
        u.cache_read_tokens,
        u.output_tokens,
        micro,
        u.unpriced_calls,
    )
}

/// What `calls` calls of the fake model add up to, priced or not.
fn calls(n: u64, priced: bool) -> (u64, u64, u64, u64, u64, u64) {
    (
        n,
        n * PROMPT_TOKENS,
        n * CACHED_TOKENS,
        n * COMPLETION_TOKENS,
        if priced { n * CALL_MICRO_USD } else { 0 },
        if priced { 0 } else { n },
    )
}

async fn usage(client: &mut Client, request: pb::GetUsageRequest) -> pb::GetUsageResponse {
    client
        .get_usage(request)
        .await
        .expect("GetUsage")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_priced_by_the_table_an_unknown_model_is_marked_unpriced_and_getusage_sums_them()
{
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![
            Step::tool_call("file_create", json!({"path": "a.txt", "content": "a"})),
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": "wrote a.txt", "output": "ok"}),
            ),
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": "nothing to do", "output": "ok"}),
            ),
        ])
        .await;
        let orchestrator = orchestrator(data_dir.path(), &db).await;
        let mut client = orchestrator.client().await;
        let team = api_team(
            &mut client,
            root.path(),
            &model,
            &["@developer"],
            "You write files.",
        )
        .await;
        // A second provider whose model no table prices.
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: team.workspace.id.clone(),
                name: "unknown".into(),
                kind: pb::ProviderKind::OpenaiCompatible.into(),
                base_url: model.base_url(),
                model: "mystery-model".into(),
                api_key: "sk-test".into(),
                ..Default::default()
            })
            .await
            .expect("provider");
        add_agent(
            &mut client,
            &team.workspace,
            "guesser",
            &["completion-report"],
            "unknown",
        )
        .await;

        let priced = planned_task(&mut client, &team.workspace, "Write a.txt.").await;
        start(&mut client, &priced, &team.agent, 0).await;
        wait_for(&mut client, &priced.id, ends_run).await;
        let task = task_of(&mut client, &priced.id).await;
        assert_eq!(usage_of(task.usage.as_ref()), calls(2, true), "{b}");

        let unpriced = planned_task(&mut client, &team.workspace, "Guess.").await;
        start(&mut client, &unpriced, "guesser", 0).await;
        wait_for(&mut client, &unpriced.id, ends_run).await;
        let task = task_of(&mut client, &unpriced.id).await;
        assert_eq!(
            usage_of(task.usage.as_ref()),
            calls(1, false),
            "{b}: an unknown model is unpriced, not free"
        );

        // Summed by agent and model over the default range (today included).
        let report = usage(
            &mut client,
            pb::GetUsageRequest {
                workspace_id: team.workspace.id.clone(),
                group_by: vec!["agent".into(), "model".into()],
                ..Default::default()
            },
        )
        .await;
        let groups: Vec<_> = report
            .groups
            .iter()
            .map(|g| {
                (
                    g.agent.as_str(),
                    g.model.as_str(),
                    usage_of(g.usage.as_ref()),
                )
            })
            .collect();
        assert_eq!(
            groups,
            [
                ("worker", "fake-model", calls(2, true)),
                ("guesser", "mystery-model", calls(1, false)),
            ],
            "{b}: largest cost first"
        );
        let mut total = calls(3, true);
        (total.4, total.5) = (2 * CALL_MICRO_USD, 1);
        assert_eq!(usage_of(report.total.as_ref()), total, "{b}");
        // By day: today's row holds them all.
        let by_day = usage(
            &mut client,
            pb::GetUsageRequest {
                workspace_id: team.workspace.id.clone(),
                from: report.from.clone(),
                to: report.to.clone(),
                group_by: vec!["day".into()],
            },
        )
        .await;
        assert_eq!(by_day.groups.len(), 1, "{b}: {by_day:?}");
        assert_eq!(usage_of(by_day.groups[0].usage.as_ref()), total, "{b}");

        // Bad requests say what to fix and change nothing.
        for (request, needle) in [
            (
                pb::GetUsageRequest {
                    group_by: vec!["team".into()],
                    ..Default::default()
                },
                "agent, provider",
            ),
            (
                pb::GetUsageRequest {
                    from: "yesterday".into(),
                    ..Default::default()
                },
                "YYYY-MM-DD",
            ),
            (
                pb::GetUsageRequest {
                    from: "2026-02-01".into(),
                    to: "2026-01-01".into(),
                    ..Default::default()
                },
                "not before to",
            ),
        ] {
            let err = client.get_usage(request).await.expect_err("refused");
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{b}: {err:?}");
            assert!(err.message().contains(needle), "{b}: {err:?}");
        }
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_subtree_is_its_own_plus_its_childrens_and_the_task_total_is_every_call() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let report = |summary: &str| {
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": summary, "output": "ok"}),
            )
        };
        let model = FakeOpenAi::start(vec![
            Step::tool_call("handoff", json!({"agent": "checker", "prompt": "check"})),
            report("checked"),
            Step::tool_call("handoff", json!({"agent": "tester", "prompt": "test"})),
            report("tested"),
            report("checked and tested"),
        ])
        .await;
        let orchestrator = orchestrator(data_dir.path(), &db).await;
        let mut client = orchestrator.client().await;
        let team = api_team(&mut client, root.path(), &model, &["handoff"], "You lead.").await;
        for child in ["checker", "tester"] {
            add_agent(&mut client, &team.workspace, child, &["file.read"], "model").await;
        }
        let task = planned_task(&mut client, &team.workspace, "Check and test.").await;
        start(&mut client, &task, &team.agent, 0).await;
        wait_for(&mut client, &task.id, completed_by("worker")).await;
        assert_eq!(model.requests().len(), 5, "{b}");

        let runs = client
            .list_runs(pb::ListRunsRequest {
                task_id: task.id.clone(),
            })
            .await
            .expect("runs")
            .into_inner()
            .runs;
        let of = |agent: &str| {
            runs.iter()
                .find(|r| r.agent == agent)
                .unwrap_or_else(|| panic!("{b}: no run of {agent}"))
        };
        let lead = of("worker");
        assert_eq!(
            usage_of(lead.usage.as_ref()),
            calls(3, true),
            "{b}: its own"
        );
        assert_eq!(
            usage_of(lead.subtree_usage.as_ref()),
            calls(5, true),
            "{b}: its own and its children's"
        );
        for child in ["checker", "tester"] {
            let run = of(child);
            assert_eq!(usage_of(run.usage.as_ref()), calls(1, true), "{b}");
            assert_eq!(
                run.usage, run.subtree_usage,
                "{b}: a leaf's subtree is itself"
            );
        }
        let total = task_of(&mut client, &task.id).await;
        assert_eq!(
            usage_of(total.usage.as_ref()),
            calls(5, true),
            "{b}: every call"
        );
        // GetRun says the same as ListRuns.
        let got = client
            .get_run(pb::GetRunRequest {
                id: lead.id.clone(),
            })
            .await
            .expect("run")
            .into_inner();
        assert_eq!(got.subtree_usage, lead.subtree_usage, "{b}");
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_or_timed_out_run_keeps_the_calls_it_made() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let slow = || Step::tool_call("bash", json!({"command": "sleep 60"}));
        let model = FakeOpenAi::start(vec![slow(), slow()]).await;
        let orchestrator = orchestrator(data_dir.path(), &db).await;
        let mut client = orchestrator.client().await;
        let team = api_team(&mut client, root.path(), &model, &["bash"], "You wait.").await;
        // Canceled while its bash call runs.
        let canceled = planned_task(&mut client, &team.workspace, "Wait.").await;
        start(&mut client, &canceled, &team.agent, 0).await;
        wait_for(&mut client, &canceled.id, |e| {
            e.kind == "agent_progress" && data(e)["kind"] == "tool_use"
        })
        .await;
        client
            .cancel_task(pb::CancelTaskRequest {
                task_id: canceled.id.clone(),
                reason: "enough".into(),
                ..Default::default()
            })
            .await
            .expect("cancel");
        let task = task_of(&mut client, &canceled.id).await;
        assert_eq!(task.status, "canceled", "{b}");
        assert_eq!(
            usage_of(task.usage.as_ref()),
            calls(1, true),
            "{b}: canceled"
        );

        // Timed out while its bash call runs.
        let timed_out = planned_task(&mut client, &team.workspace, "Wait again.").await;
        start(&mut client, &timed_out, &team.agent, 2).await;
        let events = wait_for(&mut client, &timed_out.id, ends_run).await;
        assert!(
            events.iter().any(|e| e.kind == "run_failed"),
            "{b}: the run timed out"
        );
        let task = task_of(&mut client, &timed_out.id).await;
        assert_eq!(
            usage_of(task.usage.as_ref()),
            calls(1, true),
            "{b}: timed out"
        );
        let run = client
            .list_runs(pb::ListRunsRequest {
                task_id: timed_out.id.clone(),
            })
            .await
            .expect("runs")
            .into_inner()
            .runs;
        assert_eq!(usage_of(run[0].usage.as_ref()), calls(1, true), "{b}");
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_before_the_orchestrator_is_killed_are_kept_and_none_is_counted_twice() {
    use chorus_tests::orchestrator::OrchestratorProcess;
    let data_dir = tempfile::tempdir().expect("data");
    let prices = data_dir.path().join("prices.toml");
    std::fs::write(&prices, PRICES).expect("the price table");
    let prices = prices.display().to_string();
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![
            Step::tool_call("bash", json!({"command": "sleep 60"})),
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": "waited", "output": "ok"}),
            ),
        ])
        .await;
        // The price table from its flag; a short lease, so that on PostgreSQL
        // the restarted replica takes the run back soon.
        let args = ["--prices", prices.as_str(), "--lease-secs", "3"];
        let state = data_dir.path().join(b);
        let first = OrchestratorProcess::spawn(&state, &db.url, &args).await;
        let mut client = first.client().await;
        let team = api_team(&mut client, root.path(), &model, &["bash"], "You wait.").await;
        let task = planned_task(&mut client, &team.workspace, "Wait.").await;
        start(&mut client, &task, &team.agent, 0).await;
        wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["kind"] == "tool_use"
        })
        .await;
        drop(client);
        first.kill().await;

        let second = OrchestratorProcess::spawn(&state, &db.url, &args).await;
        let mut client = second.client().await;
        let kept = task_of(&mut client, &task.id).await;
        assert!(
            kept.usage.as_ref().is_some_and(|u| u.model_calls >= 1),
            "{b}: the call before the kill is kept: {:?}",
            kept.usage
        );
        // The run is resumed and ends; every call the model answered is
        // counted once, priced by the table the flag named.
        wait_for(&mut client, &task.id, completed_by("worker")).await;
        let done = task_of(&mut client, &task.id).await;
        let answered = model.requests().len() as u64;
        assert_eq!(usage_of(done.usage.as_ref()), calls(answered, true), "{b}");
        drop(client);
        second.stop().await;
    }
}

/// An API that says no usage is no free model: each call is recorded with
/// tokens estimated from what it carried, marked estimated and unpriced, and
/// a token limit stops the task on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_without_usage_are_estimated_and_a_token_limit_holds_on_them() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("notes.txt"), "alpha\n").expect("a file");
        let read = || Step::tool_call("file_read", json!({"path": "notes.txt"}));
        let model = FakeOpenAi::start_without_usage((0..20).map(|_| read()).collect()).await;
        let orchestrator = orchestrator(data_dir.path(), &db).await;
        let mut client = orchestrator.client().await;
        let team = api_team(
            &mut client,
            root.path(),
            &model,
            &["file.read"],
            "You read.",
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Read, and read again.").await;
        // Each request carries the system prompt and the tools: thousands of
        // characters, so a few calls' estimates pass this.
        let limit = 5_000;
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
        let events = wait_for(&mut client, &task.id, |e| e.kind == "budget_exceeded").await;
        assert_eq!(
            data(events.last().expect("exceeded"))["limit"],
            "tokens",
            "{b}"
        );
        let u = task_of(&mut client, &task.id)
            .await
            .usage
            .unwrap_or_default();
        assert!(u.model_calls >= 1 && u.model_calls < 20, "{b}: {u:?}");
        assert!(u.input_tokens + u.output_tokens >= limit, "{b}: {u:?}");
        assert_eq!(
            (u.estimated_calls, u.unpriced_calls, u.cost_usd),
            (u.model_calls, u.model_calls, 0.0),
            "{b}: every call estimated and unpriced, never $0 as if priced: {u:?}"
        );
        orchestrator.stop().await;
    }
}

/// A call in flight when the orchestrator is killed was recorded when it was
/// sent: after the restart it is counted, as an estimate, never missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_the_orchestrator_is_killed_stays_counted() {
    use chorus_tests::orchestrator::OrchestratorProcess;
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let model = FakeOpenAi::start(vec![Step::Hold]).await;
        let state = data_dir.path().join(format!("held-{b}"));
        let args = ["--lease-secs", "3"];
        let first = OrchestratorProcess::spawn(&state, &db.url, &args).await;
        let mut client = first.client().await;
        let team = api_team(
            &mut client,
            root.path(),
            &model,
            &["file.read"],
            "You read.",
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Read.").await;
        start(&mut client, &task, &team.agent, 0).await;
        model.holding().await;
        drop(client);
        first.kill().await;

        let second = OrchestratorProcess::spawn(&state, &db.url, &args).await;
        let mut client = second.client().await;
        let kept = task_of(&mut client, &task.id)
            .await
            .usage
            .unwrap_or_default();
        assert_eq!(
            (kept.model_calls, kept.estimated_calls),
            (1, 1),
            "{b}: the call sent before the kill is counted, estimated: {kept:?}"
        );
        assert!(
            kept.input_tokens > 0,
            "{b}: its input is estimated: {kept:?}"
        );
        drop(client);
        second.stop().await;
    }
}
