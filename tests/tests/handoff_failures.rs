//! Handoffs that do not complete: a timeout, a cancel in the middle of a chain,
//! a parent killed while its child works, and calls refused before anything
//! starts. No process of the tree is left and every stream ends with exactly one
//! terminal message.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{processes_with_arg_containing, program_processes, survivors};
use chorus_tests::agents::{
    add_agent, call, data, ends, fake_cli, handoff, history, planned_task, report, runs_of, saved,
    start, task_of, wait_for,
};
use chorus_tests::db::databases;
use chorus_tests::flows::{Setup, save, setup, stubborn, wait_stubborn};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_that_times_out_stops_the_child_and_the_parent_goes_on() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let Setup {
        orchestrator,
        mut client,
        ws,
        root: _root,
    } = setup(data_dir.path(), &db).await;
    add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
    add_agent(&mut client, &ws, "slow", &["file.read"], "opencode").await;
    let marker = "chorus-escapee-handoff-timeout";
    let script = [
        call(&json!({
            "tool": "handoff",
            "agent": "slow",
            "timeout_secs": 1,
            "prompt": stubborn(marker),
        })),
        save("slow.json"),
        report("blocked", "the slow agent timed out"),
    ]
    .join("\n");
    let task = planned_task(&mut client, &ws, &script).await;
    let run = start(&mut client, &task, "lead", 60)
        .await
        .run
        .expect("run")
        .id;
    let events = wait_for(&mut client, &task.id, |e| ends(e, &run)).await;

    let result = saved(&orchestrator.run_file("slow.json"));
    assert_eq!(result["code"], 1, "{result}");
    let error: Value =
        serde_json::from_str(result["stderr"].as_str().expect("stderr").trim()).expect("json");
    assert_eq!(error["code"], "timed_out", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("timed out after 1 s"),
        "{error}"
    );
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "processes of the timed-out child survived"
    );
    let completed = events
        .iter()
        .find(|e| e.kind == "agent_handoff_completed")
        .map(data)
        .expect("handoff completed");
    assert_eq!(completed["outcome"], "failed");
    assert_eq!(completed["failure"], "timed_out");
    let task = task_of(&mut client, &task.id).await;
    assert_eq!(
        task.status, "waiting",
        "the parent went on and reported blocked"
    );
    assert_eq!(task.status_reason, "the slow agent timed out");
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_task_mid_chain_ends_every_run_stream_and_process() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let Setup {
            orchestrator,
            mut client,
            ws,
            root: _root,
        } = setup(data_dir.path(), &db).await;
        add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
        add_agent(&mut client, &ws, "middle", &["handoff"], "opencode").await;
        add_agent(&mut client, &ws, "leaf", &["file.read"], "claude").await;
        // In every CLI's arguments (each script holds its children's).
        let chain = format!("chain-{b}-cancel");
        let marker = format!("chorus-escapee-cancel-{b}");
        let middle = [
            format!("fake: say middle of {chain}"),
            handoff(
                "leaf",
                &[format!("fake: say leaf of {chain}"), stubborn(&marker)],
            ),
        ];
        let script = [
            format!("fake: say lead of {chain}"),
            handoff("middle", &middle),
        ]
        .join("\n");
        let task = planned_task(&mut client, &ws, &script).await;
        start(&mut client, &task, "lead", 60).await;
        let events = wait_stubborn(&mut client, &task.id, "leaf").await;
        let handoff_runs: Vec<String> = events
            .iter()
            .filter(|e| e.kind == "agent_handoff_started")
            .map(|e| data(e)["run_id"].as_str().expect("run id").to_owned())
            .collect();
        assert_eq!(handoff_runs.len(), 2, "{b}");
        let working = task_of(&mut client, &task.id).await;
        assert_eq!(
            working.current_agent, "leaf",
            "{b}: the innermost agent is the current one"
        );
        // Follow both handoffs as other gRPC callers would.
        let mut streams = Vec::new();
        for run_id in &handoff_runs {
            streams.push(
                client
                    .handoff(pb::HandoffRequest {
                        run_id: run_id.clone(),
                        ..Default::default()
                    })
                    .await
                    .expect("reopen")
                    .into_inner(),
            );
        }

        let canceled = client
            .cancel_task(pb::CancelTaskRequest {
                id: task.id.clone(),
                reason: "changed my mind".into(),
                ..Default::default()
            })
            .await
            .expect("cancel")
            .into_inner();
        assert_eq!(canceled.status, "canceled", "{b}");

        // Every process of the tree is dead when CancelTask returns: the
        // three CLIs and everything the leaf started.
        assert_eq!(survivors(&marker), Vec::<i32>::new(), "{b}");
        assert_eq!(
            processes_with_arg_containing(&chain),
            Vec::<i32>::new(),
            "{b}: a CLI of the chain survived the cancel"
        );
        use pb::handoff_event::Event;
        for stream in streams {
            let messages: Vec<Event> = stream
                .map(|m| m.expect("message").event.expect("event"))
                .collect()
                .await;
            match messages.last() {
                Some(Event::Failed(failed)) => {
                    assert_eq!(failed.failure, pb::HandoffFailure::Canceled as i32, "{b}");
                    assert!(failed.reason.contains("changed my mind"), "{b}: {failed:?}");
                }
                other => panic!("{b}: the stream ends with failed: canceled, not {other:?}"),
            }
        }
        let runs = client
            .list_runs(pb::ListRunsRequest {
                task_id: task.id.clone(),
            })
            .await
            .expect("runs")
            .into_inner()
            .runs;
        assert!(runs.iter().all(|r| r.state == "finished"), "{b}: {runs:?}");
        let history = history(&mut client, &task.id).await;
        let canceled_runs = history.iter().filter(|e| e.kind == "run_canceled").count();
        assert_eq!(canceled_runs, 3, "{b}");
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_killed_while_its_child_runs_takes_the_child_with_it() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let Setup {
        orchestrator,
        mut client,
        ws,
        root: _root,
    } = setup(data_dir.path(), &db).await;
    add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
    add_agent(&mut client, &ws, "worker", &["file.read"], "claude").await;
    let marker = "chorus-escapee-parent-killed";
    let script = [
        "fake: say the lead of the parent-killed test".to_owned(),
        handoff("worker", &[stubborn(marker)]),
    ]
    .join("\n");
    let task = planned_task(&mut client, &ws, &script).await;
    start(&mut client, &task, "lead", 60).await;
    wait_stubborn(&mut client, &task.id, "worker").await;
    let worker = runs_of(&mut client, &task.id, "worker").await.remove(0);

    // The lead's CLI, found by its host pid (what it knows is its sandbox's).
    let lead = program_processes(&fake_cli(), "the lead of the parent-killed test");
    assert_eq!(lead.len(), 1, "{lead:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(lead[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the parent");
    let events = wait_for(&mut client, &task.id, |e| {
        e.kind == "status_changed" && data(e)["to"] == "failed"
    })
    .await;
    let worker_end = events
        .iter()
        .find(|e| ends(e, &worker.id))
        .expect("the child's end");
    assert_eq!(worker_end.kind, "run_canceled");
    assert!(
        data(worker_end)["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("'lead' that handed off to it ended"),
        "{:?}",
        data(worker_end)
    );
    let lead_end = events
        .iter()
        .find(|e| e.kind == "run_failed")
        .map(data)
        .expect("the parent's end");
    assert!(
        lead_end["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("signal 9"),
        "{lead_end}"
    );
    // The child's processes die with it (the orchestrator waits for them).
    let worker_done = wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_handoff_completed" && data(e)["run_id"] == worker.id
    })
    .await;
    assert_eq!(
        data(worker_done.last().expect("event"))["failure"],
        "canceled"
    );
    let task_now = task_of(&mut client, &task.id).await;
    assert_eq!(task_now.status, "failed");
    // stop() waits for every run's driver, so the processes are reaped by now.
    drop(client);
    orchestrator.stop().await;
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "processes of the child survived its parent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_refusals_are_precise_and_change_nothing() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let Setup {
        orchestrator,
        mut client,
        ws,
        root: _root,
    } = setup(data_dir.path(), &db).await;
    let task = client
        .create_task(pb::CreateTaskRequest {
            budget: None,
            workspace_id: ws.id.clone(),
            description: "not planned yet".into(),
            source: None,
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner();
    // An agent hands off with its run token as the call's credential.
    let request = |agent: &str, token: &str| {
        let mut request = tonic::Request::new(pb::HandoffRequest {
            task_id: task.id.clone(),
            agent: agent.into(),
            prompt: "do it".into(),
            ..Default::default()
        });
        if !token.is_empty() {
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {token}").parse().expect("ascii"),
            );
        }
        request
    };
    // A caller that is not an agent can start only a planned or waiting task.
    let err = client
        .handoff(request("writer", ""))
        .await
        .expect_err("pending");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("from pending"), "{err:?}");
    let err = client
        .handoff(request("writer", "not-a-token"))
        .await
        .expect_err("token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let mut empty = request("writer", "");
    empty.get_mut().prompt = " ".into();
    let err = client.handoff(empty).await.expect_err("prompt");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("prompt"), "{err:?}");

    chorus_tests::agents::mark_planned(&mut client, &task.id).await;
    // An agent without the handoff tool is refused, and that is recorded.
    let editor = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "editor".into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner();
    let err = client
        .handoff(request("writer", &editor.token))
        .await
        .expect_err("not allowed");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");

    // An unknown target ends the handoff with target_unknown, naming the agents.
    let lead = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "writer-workflow".into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner();
    let before = task_of(&mut client, &task.id).await.last_sequence;
    let messages: Vec<pb::HandoffEvent> = client
        .handoff(request("ghost", &lead.token))
        .await
        .expect("stream")
        .into_inner()
        .map(|m| m.expect("message"))
        .collect()
        .await;
    let [
        pb::HandoffEvent {
            event: Some(pb::handoff_event::Event::Failed(failed)),
        },
    ] = messages.as_slice()
    else {
        panic!("one failed message: {messages:?}");
    };
    assert_eq!(failed.failure, pb::HandoffFailure::TargetUnknown as i32);
    assert!(failed.reason.contains("no agent 'ghost'"), "{failed:?}");
    assert!(failed.reason.contains("writer"), "{failed:?}");
    let history = client
        .get_history(pb::GetHistoryRequest {
            task_id: task.id.clone(),
            after_sequence: before,
            limit: 0,
        })
        .await
        .expect("history")
        .into_inner()
        .events;
    assert_eq!(
        history.len(),
        1,
        "only the refused call is recorded: {history:?}"
    );
    assert_eq!(data(&history[0])["tool"], "handoff");
    assert_eq!(data(&history[0])["status"], "not_found");
    // So is a handoff to the internal planner.
    let messages: Vec<pb::HandoffEvent> = client
        .handoff(request("task-validator", &lead.token))
        .await
        .expect("stream")
        .into_inner()
        .map(|m| m.expect("message"))
        .collect()
        .await;
    assert!(
        matches!(&messages[..], [pb::HandoffEvent { event: Some(pb::handoff_event::Event::Failed(f)) }] if f.reason.contains("internal")),
        "{messages:?}"
    );
    // A run that was not a handoff cannot be re-opened as one.
    let err = client
        .handoff(pb::HandoffRequest {
            run_id: lead.run.expect("run").id,
            ..Default::default()
        })
        .await
        .expect_err("not a handoff");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("WatchTask"), "{err:?}");
    drop(client);
    orchestrator.stop().await;
}
