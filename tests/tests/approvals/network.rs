//! Rules on the network grant, end to end: an API agent's bash call fetches
//! from a host its egress list allows; `ask network host=...` holds the
//! connection (not the call's start) until a person answers; the request
//! shows the host and port; approved, the fetch goes through; denied, the
//! program reads the reason and nothing is fetched; a connection whose
//! process ends while it waits (bash's own timeout) leaves no approval
//! waiting.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{TestNet, give_to_test_user, root_for};
use chorus_tests::agents::{api_team, data, planned_task, start, task_of, wait_for};
use chorus_tests::approvals::{answer, approval_id, asked, rule, set_rules};
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_of_the_network_grant_asks_and_a_denial_reaches_the_program() {
    if !root_for("a test network namespace") {
        return;
    }
    let files = tempfile::tempdir().expect("files");
    std::fs::write(files.path().join("f.txt"), "outside\n").expect("write");
    let mut net = TestNet::create();
    let ip = net.ip;
    net.serve_files(files.path(), 8080).await;

    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    give_to_test_user(root.path());
    let fetch = Step::tool_call(
        "bash",
        json!({ "command": format!("curl -sS http://{ip}:8080/f.txt") }),
    );
    let fetch_briefly = Step::tool_call(
        "bash",
        json!({ "command": format!("curl -sS http://{ip}:8080/f.txt"), "timeout_secs": 1 }),
    );
    let model = FakeOpenAi::start(vec![
        fetch.clone(),
        fetch,
        fetch_briefly,
        Step::tool_call(
            "completion-report",
            json!({"status": "complete", "summary": "fetched", "output": "fetched"}),
        ),
    ])
    .await;
    let orchestrator = Orchestrator::for_api_agents(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let team = api_team(
        &mut client,
        root.path(),
        &model,
        &["bash", "network"],
        "You fetch.",
    )
    .await;
    client
        .update_agent(pb::UpdateAgentRequest {
            workspace_id: team.workspace.id.clone(),
            name: team.agent.clone(),
            egress: vec![format!("{ip}:8080")],
            set_egress: true,
            ..Default::default()
        })
        .await
        .expect("the egress list");
    let host_rule = format!("{ip}:8080");
    set_rules(
        &mut client,
        &team.workspace.id,
        &team.agent,
        vec![pb::ApprovalRule {
            host: host_rule.clone(),
            ..rule("network", "ask", "", 0)
        }],
    )
    .await;
    let task = planned_task(&mut client, &team.workspace, "Fetch f.txt.").await;
    start(&mut client, &task, &team.agent, 0).await;

    // The bash call started; its connection waits, showing where it goes.
    let first = asked(&mut client, &task.id, 1).await;
    assert_eq!(data(&first)["tool"], "network", "{:?}", data(&first));
    assert_eq!(
        data(&first)["input"],
        json!({ "host": ip.to_string(), "port": 8080 })
    );
    assert_eq!(
        data(&first)["rule"],
        format!("ask network host={host_rule}")
    );
    answer(&mut client, &task.id, &approval_id(&first), true, false, "")
        .await
        .expect("approve");

    // Approved once: the next connection asks again; denied, the program
    // reads why.
    let second = asked(&mut client, &task.id, 2).await;
    answer(
        &mut client,
        &task.id,
        &approval_id(&second),
        false,
        false,
        "not that host today",
    )
    .await
    .expect("deny");

    // Nobody answers; bash's own timeout ends the process that asked: its
    // approval is ended, not left on the task.
    let third = asked(&mut client, &task.id, 3).await;
    let id = approval_id(&third);
    let ended = wait_for(&mut client, &task.id, |e| {
        e.kind == "approval_answered" && data(e)["approval_id"] == id.as_str()
    })
    .await;
    let ended = data(ended.last().expect("the answer"));
    assert_eq!(ended["outcome"], "canceled", "{ended}");
    assert!(
        ended["reason"]
            .as_str()
            .is_some_and(|r| r.contains("went away")),
        "{ended}"
    );
    assert!(
        task_of(&mut client, &task.id)
            .await
            .waiting_approvals
            .is_empty(),
        "nothing waits"
    );
    wait_for(&mut client, &task.id, |e| {
        e.kind == "status_changed" && data(e)["to"] == "completed"
    })
    .await;
    let results = model.tool_results();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].contains("outside"), "approved: {}", results[0]);
    assert!(
        results[1].contains("not that host today") && !results[1].contains("outside"),
        "denied: {}",
        results[1]
    );
    orchestrator.stop().await;
}
