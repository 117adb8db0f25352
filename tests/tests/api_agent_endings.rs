//! An API agent's run ends at once, whatever its tool call is doing: a
//! CancelTask or the run's timeout stops the call in flight (its bash is killed,
//! the command's later effects never happen), and after its end nothing is
//! recorded for the run but that call, once, as stopped. A model's call of an unknown tool, or with arguments that
//! are not a JSON object, is answered to the model and recorded.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{eventually, processes_with_arg_containing};
use chorus_tests::agents::{Client, data, ends_run, planned_task, start, summary, team, wait_for};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

async fn orchestrator(data_dir: &Path) -> Orchestrator {
    Orchestrator::for_api_agents(data_dir).await
}

/// A workspace with an API agent granted `tools`, on `model`.
async fn api_team(
    client: &mut Client,
    root: &Path,
    model: &FakeOpenAi,
    tools: &[&str],
) -> chorus_tests::agents::Team {
    team(
        client,
        root,
        pb::ProviderKind::OpenaiCompatible,
        &model.base_url(),
        "sk-test",
        "fake-model",
        tools,
        "You do what you are asked.",
    )
    .await
}

/// A bash call that runs for a long while, then writes `file`; `marker` names it.
fn slow_bash(file: &str, marker: &str) -> Step {
    Step::tool_call(
        "bash",
        json!({"command": format!("sleep 45; echo {marker} > {file}"), "timeout_secs": 120}),
    )
}

/// Events after the run's end event.
fn after_end(events: &[pb::TaskEvent]) -> Vec<String> {
    let end = events.iter().position(ends_run).expect("the run ended");
    summary(&events[end + 1..])
}

/// After the run's end, no tool event but the record of the bash call the
/// end stopped (it began before the end: the audit keeps it, as cancelled or
/// aborted); that call recorded once in all.
fn only_the_stopped_call_after_the_end(all: &[pb::TaskEvent]) {
    let after = after_end(all);
    assert!(
        after
            .iter()
            .filter(|k| k.starts_with("tool_"))
            .all(|k| k == "tool_executed bash cancelled" || k == "tool_executed bash aborted"),
        "recorded after the run's end: {:#?}",
        summary(all)
    );
    let records = summary(all)
        .iter()
        .filter(|k| k.starts_with("tool_executed bash"))
        .count();
    assert_eq!(records, 1, "{:#?}", summary(all));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_stops_an_api_agents_running_bash_call_at_once() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let marker = "chorus-api-cancel-marker";
    let model = FakeOpenAi::start(vec![slow_bash("after_cancel.txt", marker)]).await;
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, root.path(), &model, &["bash"]).await;
    let task = planned_task(&mut client, &team.workspace, "Wait, then write.").await;
    start(&mut client, &task, &team.agent, 0).await;
    eventually("the bash call runs", || {
        !processes_with_arg_containing(marker).is_empty()
    })
    .await;

    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "stop".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    eventually("the bash call's processes are gone", || {
        processes_with_arg_containing(marker).is_empty()
    })
    .await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(events.last().expect("end").kind, "run_canceled");
    let all = chorus_tests::agents::history(&mut client, &task.id).await;
    only_the_stopped_call_after_the_end(&all);
    assert!(
        !root.path().join("after_cancel.txt").exists(),
        "the canceled command went on"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_timeout_stops_an_api_agents_running_bash_call() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let marker = "chorus-api-timeout-marker";
    let model = FakeOpenAi::start(vec![slow_bash("late.txt", marker)]).await;
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, root.path(), &model, &["bash"]).await;
    let task = planned_task(&mut client, &team.workspace, "Wait, then write.").await;
    start(&mut client, &task, &team.agent, 3).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let end = events.last().expect("end");
    assert_eq!(end.kind, "run_failed");
    assert!(
        data(end)["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("timed out after 3 s"),
        "{end:?}"
    );
    eventually("the bash call's processes are gone", || {
        processes_with_arg_containing(marker).is_empty()
    })
    .await;
    // No call waits for its record here (CancelTask would).
    wait_for(&mut client, &task.id, |e| e.kind == "tool_executed").await;
    let all = chorus_tests::agents::history(&mut client, &task.id).await;
    only_the_stopped_call_after_the_end(&all);
    assert!(
        !root.path().join("late.txt").exists(),
        "the timed-out command went on"
    );
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_call_of_an_unknown_tool_or_with_bad_arguments_is_recorded() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let model = FakeOpenAi::start(vec![
        Step::tool_call("rm_rf", json!({"path": "/"})),
        Step::RawToolCall("file_read".into(), "{\"path\": \"notes.txt\"".into()),
        Step::RawToolCall("file_read".into(), "[1, 2]".into()),
        Step::tool_call(
            "completion-report",
            json!({"status": "complete", "summary": "tried", "output": ""}),
        ),
    ])
    .await;
    let orchestrator = orchestrator(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, root.path(), &model, &["file.read"]).await;
    let task = planned_task(&mut client, &team.workspace, "Try some calls.").await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    let denied: Vec<(String, String, String)> = events
        .iter()
        .filter(|e| e.kind == "tool_denied")
        .map(data)
        .map(|d| {
            (
                d["tool"].as_str().unwrap_or_default().to_owned(),
                d["by"].as_str().unwrap_or_default().to_owned(),
                d["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(denied.len(), 3, "{denied:#?}");
    assert_eq!(denied[0].0, "rm_rf");
    assert!(denied[0].2.contains("unknown tool 'rm_rf'"), "{denied:#?}");
    assert!(denied[1].2.contains("not valid JSON"), "{denied:#?}");
    assert!(denied[2].2.contains("must be a JSON object"), "{denied:#?}");
    assert!(
        denied.iter().all(|(_, by, _)| by == "chorus"),
        "{denied:#?}"
    );
    // The model was told each time.
    let last = model.requests().last().cloned().expect("requests");
    let results: Vec<String> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(results.len(), 3, "{results:#?}");
    assert!(
        results.iter().all(|r| r.contains("invalid_argument")),
        "{results:#?}"
    );
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    orchestrator.stop().await;
}
