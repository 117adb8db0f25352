//! A budget stop leaves no process of the task's runs, as a cancel does: a
//! CLI agent (the fake Claude Code) makes a tool call, then starts children
//! that try every way out of the run; its tool-call limit is then set to
//! what it has spent, which stops the task at once, and none of them
//! survives.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{ESCAPEES, eventually, survivors};
use chorus_tests::agents::{data, fake_cli_team, planned_task, start, task_of, wait_for};
use chorus_tests::orchestrator::Orchestrator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_kills_every_process_of_the_run() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::with_fake_cli_on_sqlite(data_dir.path(), |_| {}).await;
    let mut client = orchestrator.client().await;
    let team = fake_cli_team(&mut client, root.path(), &[], "You wait.").await;
    let marker = &format!("chorus-escapee-budget-{}", std::process::id());
    // One tool call, then children that try every way out, and a wait.
    let script = format!("fake: call {{\"tool\":\"help\"}}\nfake: stubborn {marker}");
    let task = planned_task(&mut client, &team.workspace, &script).await;
    start(&mut client, &task, &team.agent, 0).await;
    wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "stubborn children started"
    })
    .await;
    eventually("the children run before the stop", || {
        survivors(marker).len() == ESCAPEES
    })
    .await;
    let spent = task_of(&mut client, &task.id)
        .await
        .budget
        .unwrap_or_default();
    assert_eq!(spent.tool_calls, 1, "its help call");
    let stopped = client
        .update_task_budget(pb::UpdateTaskBudgetRequest {
            task_id: task.id.clone(),
            budget: Some(pb::Budget {
                tool_calls: Some(1),
                ..Default::default()
            }),
        })
        .await
        .expect("a limit below what it spent")
        .into_inner();
    assert_eq!(stopped.status, "waiting", "{}", stopped.status_reason);
    assert!(
        stopped
            .status_reason
            .starts_with("budget_exceeded: its tool_calls limit"),
        "{}",
        stopped.status_reason
    );
    eventually("every process of the run is gone", || {
        survivors(marker).is_empty()
    })
    .await;
    let task = task_of(&mut client, &task.id).await;
    assert_eq!(task.status, "waiting");
    orchestrator.stop().await;
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
