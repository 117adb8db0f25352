//! An orchestrator killed with SIGKILL in the middle of a handoff, then started
//! again on the same data: nothing recorded is lost, and no agent process is
//! left running — not even before the restart: every process of a run lives in
//! its sandbox, which the kernel kills with the orchestrator. The runs it was
//! driving are resumed (their sessions are in the runs directory), and the task
//! completes; when their session files are gone (a replica that does not see
//! them), they are marked interrupted instead (the handoff's stream, re-opened,
//! says so), and the task waits to be started again.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{eventually, processes_with_arg_containing, survivors};
use chorus_tests::agents::{
    add_agent, data, fake_cli, handoff, history, planned_task, reopen_handoff, start, task_of,
    wait_for, workspace,
};
use chorus_tests::db::databases;
use chorus_tests::flows::stubborn;
use chorus_tests::orchestrator::OrchestratorProcess;

/// What the restarted orchestrator finds of the killed one's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sessions {
    /// The run directories with the CLI's sessions: the runs resume.
    Kept,
    /// Removed: the runs cannot resume.
    Gone,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_orchestrator_restarts_and_resumes_its_claude_code_runs_with_no_process_left() {
    killed_and_restarted(Sessions::Kept, pb::ProviderKind::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_orchestrator_restarts_and_resumes_its_opencode_runs_with_no_process_left() {
    killed_and_restarted(Sessions::Kept, pb::ProviderKind::Opencode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_orchestrator_without_its_runs_sessions_restarts_with_them_interrupted() {
    killed_and_restarted(Sessions::Gone, pb::ProviderKind::ClaudeCode).await;
}

async fn killed_and_restarted(sessions: Sessions, kind: pb::ProviderKind) {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        let fake = fake_cli();
        let fake = fake.to_str().expect("utf-8 path");
        // A short lease: with PostgreSQL the restarted replica takes its runs
        // back once the killed process's leases ran out.
        let args = [
            "--claude-bin",
            fake,
            "--opencode-bin",
            fake,
            "--lease-secs",
            "3",
        ];
        let first = OrchestratorProcess::spawn(data_dir.path(), &db.url, &args).await;
        let mut client = first.client().await;
        let ws = workspace(&mut client, &format!("restart-{b}"), root.path()).await;
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: ws.id.clone(),
                name: "cli".into(),
                kind: kind.into(),
                ..Default::default()
            })
            .await
            .expect("provider");
        add_agent(&mut client, &ws, "lead", &["handoff"], "cli").await;
        add_agent(&mut client, &ws, "worker", &["file.read"], "cli").await;
        // In both CLIs' arguments.
        let chain = format!("the restart chain on {b} ({})", std::process::id());
        let marker = format!("chorus-escapee-restart-{b}-{}", std::process::id());
        // Resumed, each reports at once.
        let resumed = |who: &str| {
            format!(
                "fake-resume: call {}",
                serde_json::json!({"tool": "completion-report", "status": "complete", "summary": format!("{who} resumed"), "output": format!("{who} resumed")})
            )
        };
        let script = [
            format!("fake: say {chain}"),
            handoff(
                "worker",
                &[
                    format!("fake: say {chain}"),
                    stubborn(&marker),
                    resumed("worker"),
                ],
            ),
            resumed("lead"),
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
        assert!(!processes_with_arg_containing(&chain).is_empty(), "{b}");
        drop(client);

        first.kill().await;
        // Before any restart, the kernel takes every process of every run with
        // the orchestrator: the CLIs, and what they started.
        eventually(
            "every process of the runs died with the orchestrator",
            || survivors(&marker).is_empty() && processes_with_arg_containing(&chain).is_empty(),
        )
        .await;

        let runs_dir = data_dir.path().join("runs");
        if sessions == Sessions::Gone {
            // Each run's session files (its HOME) are gone; the rest of its
            // directory is left.
            for run in std::fs::read_dir(&runs_dir).expect("runs") {
                let home = run.expect("run").path().join("home");
                if home.is_dir() {
                    std::fs::remove_dir_all(home).expect("remove a session");
                }
            }
        }
        let second = OrchestratorProcess::spawn(data_dir.path(), &db.url, &args).await;
        let mut client = second.client().await;
        if sessions == Sessions::Kept {
            // The lead's run is the last to end.
            let events = wait_for(&mut client, &task.id, |e| {
                e.kind == "agent_completed" && data(e)["agent"] == "lead"
            })
            .await;
            assert_eq!(
                task_of(&mut client, &task.id).await.status,
                "completed",
                "{b}"
            );
            // Nothing recorded before the kill was lost; both runs were
            // resumed by the restarted replica, in one claim.
            assert_eq!(events[..before.len()], before[..], "{b}");
            let added: Vec<&str> = events[before.len()..]
                .iter()
                .map(|e| e.kind.as_str())
                .collect();
            assert_eq!(added[..2], ["run_resumed", "run_resumed"], "{b}: {added:?}");
            let runs = client
                .list_runs(pb::ListRunsRequest {
                    task_id: task.id.clone(),
                })
                .await
                .expect("runs")
                .into_inner()
                .runs;
            assert!(
                runs.iter().all(|r| r.epoch == 1 && r.state == "finished"),
                "{b}: {runs:?}"
            );
            // The lead resumed once its handoff had ended, and reported.
            let lead = runs.iter().find(|r| r.agent == "lead").expect("lead");
            let report = lead.completion_report.clone().expect("the lead's report");
            assert_eq!(
                chorus_proto::json::from_struct(report)["summary"],
                "lead resumed",
                "{b}"
            );
            let completed: Vec<pb::handoff_event::Event> =
                reopen_handoff(&mut client, &worker_run).await;
            let summary = match completed.last() {
                Some(pb::handoff_event::Event::Completed(c)) => c
                    .completion_report
                    .clone()
                    .map(|r| chorus_proto::json::from_struct(r)["summary"].clone()),
                _ => None,
            };
            assert_eq!(
                summary,
                Some(serde_json::json!("worker resumed")),
                "{b}: {completed:?}"
            );
            drop(client);
            let status = second.stop().await;
            assert!(status.success(), "{b}: a graceful stop exits 0: {status:?}");
            continue;
        }

        // Taken back once the port serves (with PostgreSQL, once the killed
        // process's leases ran out): the task's status changes last.
        wait_for(&mut client, &task.id, |e| {
            e.kind == "status_changed" && e.sequence > before.len() as u64
        })
        .await;
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
                "tool_executed",
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
        // Recovery settled them: their directories go with them, right after
        // the transaction that settled them (which the watch saw).
        for run in &runs {
            let dir = runs_dir.join(&run.id);
            let mut polls = 0;
            while dir.exists() && polls < 1000 {
                polls += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(
                !dir.exists(),
                "{b}: the directory of interrupted run {} was left",
                run.id
            );
        }

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_agent_killed_mid_call_resumes_its_conversation_after_a_restart() {
    use chorus_tests::fake_openai::{FakeOpenAi, Step};
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let root = tempfile::tempdir().expect("root");
        // First a bash call that outlives the orchestrator; resumed, the report.
        let model = FakeOpenAi::start(vec![
            Step::tool_call("bash", serde_json::json!({"command": "sleep 600"})),
            Step::tool_call(
                "completion-report",
                serde_json::json!({"status": "complete", "summary": "done after the restart", "output": "done"}),
            ),
        ])
        .await;
        let first = OrchestratorProcess::spawn(data_dir.path(), &db.url, &[]).await;
        let mut client = first.client().await;
        let team = chorus_tests::agents::team(
            &mut client,
            root.path(),
            pb::ProviderKind::OpenaiCompatible,
            &model.base_url(),
            "sk-test",
            "fake-model",
            &["bash"],
            "You run commands and report.",
        )
        .await;
        let task = planned_task(&mut client, &team.workspace, "Wait, then report.").await;
        let run = start(&mut client, &task, &team.agent, 0)
            .await
            .run
            .expect("run");
        wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["kind"] == "tool_use"
        })
        .await;
        drop(client);
        first.kill().await;

        let second = OrchestratorProcess::spawn(data_dir.path(), &db.url, &[]).await;
        let mut client = second.client().await;
        let events = wait_for(&mut client, &task.id, chorus_tests::agents::ends_run).await;
        let resumed = events
            .iter()
            .find(|e| e.kind == "run_resumed")
            .unwrap_or_else(|| {
                panic!(
                    "{b}: the run was resumed: {:?}",
                    chorus_tests::agents::summary(&events)
                )
            });
        assert_eq!(data(resumed)["run_id"], run.id.as_str(), "{b}");
        assert_eq!(
            task_of(&mut client, &task.id).await.status,
            "completed",
            "{b}"
        );
        // The model was given its conversation back: the cut-off call answered
        // as interrupted, then the message saying what happened.
        let last = model.requests().pop().expect("requests");
        let messages = last["messages"].as_array().expect("messages").clone();
        let n = messages.len();
        assert!(n >= 5, "{b}: {messages:#?}");
        assert_eq!(messages[n - 2]["role"], "tool", "{b}");
        assert!(
            messages[n - 2]["content"]
                .as_str()
                .is_some_and(|c| c.contains("interrupted")),
            "{b}: {messages:#?}"
        );
        assert_eq!(messages[n - 1]["role"], "user", "{b}");
        assert!(
            messages[n - 1]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Chorus resumed you")),
            "{b}: {messages:#?}"
        );
        drop(client);
        let status = second.stop().await;
        assert!(status.success(), "{b}: {status:?}");
    }
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
