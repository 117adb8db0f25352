//! An orchestrator killed with SIGKILL in the middle of a handoff, then started
//! again on the same data: nothing recorded is lost, the runs it was driving are
//! marked interrupted (the handoff's stream, re-opened, says so), the task waits
//! to be started again, and no agent process is left running — the CLIs die
//! with the orchestrator (parent-death signal), what they started is killed at
//! the restart by its run marker.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    add_agent, alive, data, fake_cli, handoff, history, pids, planned_task, reopen_handoff, saved,
    start, task_of, wait_for, workspace,
};
use chorus_tests::db::databases;
use chorus_tests::flows::{record, stubborn};
use chorus_tests::orchestrator::OrchestratorProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_orchestrator_restarts_with_its_runs_interrupted_and_no_process_left() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let out = tempfile::tempdir().expect("out");
        let fake = fake_cli();
        let fake = fake.to_str().expect("utf-8 path");
        let args = ["--claude-bin", fake, "--opencode-bin", fake];
        let first = OrchestratorProcess::spawn(data_dir.path(), &db.url, &args).await;
        let mut client = first.client().await;
        let ws = workspace(&mut client, &format!("restart-{b}"), root.path()).await;
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "cli".into(),
                kind: pb::ProviderKind::ClaudeCode.into(),
                ..Default::default()
            })
            .await
            .expect("provider");
        add_agent(&mut client, &ws, "lead", &["handoff"], "cli").await;
        add_agent(&mut client, &ws, "worker", &["file.read"], "cli").await;
        let worker_pids = out.path().join("worker.pids");
        let script = [
            record(&out.path().join("lead.json")),
            handoff(
                "worker",
                &[
                    record(&out.path().join("worker.json")),
                    stubborn(&worker_pids),
                ],
            ),
        ]
        .join("\n");
        let task = planned_task(&mut client, &ws, &script).await;
        start(&mut client, &task, "lead", 0).await;
        wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["text"] == "stubborn children started"
        })
        .await;
        let before = history(&mut client, &task.id).await;
        let worker_run = before
            .iter()
            .find(|e| e.kind == "agent_handoff_started")
            .map(|e| data(e)["run_id"].as_str().expect("run id").to_owned())
            .expect("the handoff started");
        let leftovers = pids(&worker_pids);
        drop(client);

        first.kill().await;
        assert!(
            leftovers.iter().all(|pid| alive(*pid)),
            "{b}: the worker's children outlive a SIGKILLed orchestrator until the restart"
        );

        let second = OrchestratorProcess::spawn(data_dir.path(), &db.url, &args).await;
        let mut client = second.client().await;
        // Serving means recovery is done: nothing of the old runs is alive.
        let mut processes = leftovers.clone();
        for file in ["lead.json", "worker.json"] {
            let pid = saved(&out.path().join(file))["pid"].as_i64().expect("pid");
            processes.push(i32::try_from(pid).expect("pid"));
        }
        for pid in processes {
            assert!(!alive(pid), "{b}: process {pid} survived the restart");
        }

        // Nothing recorded before the kill was lost; the end was added after it.
        let after = history(&mut client, &task.id).await;
        assert_eq!(after[..before.len()], before[..], "{b}");
        let added: Vec<String> = after[before.len()..]
            .iter()
            .map(|e| match data(e)["failure"].as_str() {
                Some(failure) => format!("{}:{failure}", e.kind),
                None => e.kind.clone(),
            })
            .collect();
        assert_eq!(
            added,
            [
                "run_interrupted",
                "agent_handoff_completed:interrupted",
                "run_interrupted",
                "status_changed",
            ],
            "{b}"
        );
        let task_now = task_of(&mut client, &task.id).await;
        assert_eq!(task_now.status, "waiting", "{b}");
        assert!(
            task_now.status_reason.contains("interrupted")
                && task_now.status_reason.contains("start it again"),
            "{b}: {}",
            task_now.status_reason
        );
        let runs = client
            .list_runs(pb::ListRunsRequest {
                task_id: task.id.clone(),
            })
            .await
            .expect("runs")
            .into_inner()
            .runs;
        assert!(
            runs.iter()
                .all(|r| r.state == "finished" && r.end_reason.starts_with("interrupted")),
            "{b}: {runs:?}"
        );

        // The handoff's stream, re-opened, ends with its outcome.
        let messages: Vec<pb::handoff_event::Event> =
            reopen_handoff(&mut client, &worker_run).await;
        assert!(
            matches!(messages.last(), Some(pb::handoff_event::Event::Failed(f)) if f.failure == pb::HandoffFailure::Interrupted as i32),
            "{b}: {messages:?}"
        );
        drop(client);
        let status = second.stop().await;
        assert!(status.success(), "{b}: a graceful stop exits 0: {status:?}");
    }
}
