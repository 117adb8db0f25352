//! Handoffs between agents, end to end, with the fake CLI as every model: the
//! real orchestrator, tool-exec, chorus-tools and Handoff stream. A parent hands
//! off and waits; it gets its child's output and report back and works on; only
//! the root run's report settles the task; a caller that disconnects loses
//! nothing. Each flow runs on SQLite, and on PostgreSQL too when
//! CHORUS_TEST_DATABASE_URL is set. (Failures, timeouts and cancels:
//! handoff_failures.rs.)

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    add_agent, call, data, ends, handoff, planned_task, reopen_handoff, report, runs_of, saved,
    start, task_of, wait_for,
};
use chorus_tests::db::databases;
use chorus_tests::flows::{Setup, save, setup, story};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_workflow_hands_off_to_writer_then_editor_and_only_its_report_settles_the_task() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let Setup {
            orchestrator,
            mut client,
            ws,
            root: _root,
        } = setup(data_dir.path(), &db).await;
        let writer = [
            "Write the draft.".to_owned(),
            call(
                &json!({"tool": "file.create", "path": "draft.md", "content": "Once upon a time.\n"}),
            ),
            report("complete", "draft written"),
            "fake: say Draft done.".to_owned(),
        ];
        let editor = [
            "Review the draft.".to_owned(),
            call(&json!({"tool": "file.read", "path": "draft.md"})),
            report("complete", "APPROVED"),
            "fake: say Approved.".to_owned(),
        ];
        let script = [
            "Write a story, then have it edited.".to_owned(),
            handoff("writer", &writer),
            save("writer.json"),
            handoff("editor", &editor),
            save("editor.json"),
            call(&json!({"tool": "file.read", "path": "draft.md"})),
            save("read.json"),
            report("complete", "story written and approved"),
            "fake: say All done.".to_owned(),
        ]
        .join("\n");
        let task = planned_task(&mut client, &ws, &script).await;
        let started = start(&mut client, &task, "writer-workflow", 60).await;
        let root_run = started.run.expect("run").id;
        let events = wait_for(&mut client, &task.id, |e| ends(e, &root_run)).await;

        // Each handoff returned the child's output and report to the parent.
        for (file, agent, summary, output) in [
            ("writer.json", "writer", "draft written", "Draft done."),
            ("editor.json", "editor", "APPROVED", "Approved."),
        ] {
            let result = saved(&orchestrator.run_file(file));
            assert_eq!(result["code"], 0, "{b} {file}: {result}");
            let answer: Value =
                serde_json::from_str(result["stdout"].as_str().expect("stdout")).expect("json");
            let output_json = &answer["output"];
            assert_eq!(output_json["agent"], agent, "{b}: {answer}");
            assert_eq!(output_json["output"], output, "{b}: {answer}");
            assert_eq!(
                output_json["completion_report"]["status"], "complete",
                "{b}: {answer}"
            );
            assert_eq!(
                output_json["completion_report"]["summary"], summary,
                "{b}: {answer}"
            );
            // Each model message of the fake CLI reports 120 input tokens;
            // the cost is the CLI's own total for the attempt.
            let input = output_json["usage"]["input_tokens"].as_u64().unwrap_or(0);
            assert!(input > 0 && input.is_multiple_of(120), "{b}: {answer}");
            assert_eq!(output_json["usage"]["cost_usd"], 0.0042, "{b}: {answer}");
        }
        // The parent could call tools again after its handoffs.
        let read = saved(&orchestrator.run_file("read.json"));
        assert_eq!(read["code"], 0, "{b}: {read}");
        assert!(
            read["stdout"]
                .as_str()
                .unwrap_or_default()
                .contains("Once upon a time."),
            "{b}: {read}"
        );

        assert_eq!(
            story(&events),
            [
                "status_changed:planning",
                "status_changed:planned",
                "status_changed:active",
                "agent_started:writer-workflow",
                "agent_handoff_started:writer",
                "agent_started:writer",
                "tool_executed:writer:file.create",
                "completion_report_submitted:writer",
                "tool_executed:writer:completion-report",
                "agent_completed:writer",
                "agent_handoff_completed:writer",
                "tool_executed:writer-workflow:handoff",
                "agent_handoff_started:editor",
                "agent_started:editor",
                "tool_executed:editor:file.read",
                "completion_report_submitted:editor",
                "tool_executed:editor:completion-report",
                "agent_completed:editor",
                "agent_handoff_completed:editor",
                "tool_executed:writer-workflow:handoff",
                "tool_executed:writer-workflow:file.read",
                "completion_report_submitted:writer-workflow",
                "status_changed:completed",
                "tool_executed:writer-workflow:completion-report",
                "agent_completed:writer-workflow",
            ],
            "{b}: the children's complete reports left the task active; only the root's completed it"
        );
        let handoffs: Vec<Value> = events
            .iter()
            .filter(|e| e.kind == "agent_handoff_started")
            .map(data)
            .collect();
        assert_eq!(handoffs[0]["from_agent"], "writer-workflow", "{b}");
        assert_eq!(handoffs[0]["parent_run_id"], root_run, "{b}");
        assert_eq!(
            (
                handoffs[0]["handoff_index"].as_u64(),
                handoffs[1]["handoff_index"].as_u64()
            ),
            (Some(1), Some(2)),
            "{b}"
        );
        let done = task_of(&mut client, &task.id).await;
        assert_eq!(done.status, "completed", "{b}");
        assert_eq!(done.current_agent, "", "{b}");

        // The run tree: both children under the root, finished, with their
        // handoff records (prompt, output, report).
        let writer_run = &runs_of(&mut client, &task.id, "writer").await[0];
        assert_eq!(writer_run.parent_run_id, root_run, "{b}");
        assert_eq!(writer_run.handoff_index, 1, "{b}");
        assert_eq!(writer_run.state, "finished", "{b}");
        assert!(writer_run.prompt.starts_with("Write the draft."), "{b}");
        assert_eq!(writer_run.output, "Draft done.", "{b}");
        let report = writer_run.completion_report.clone().expect("report");
        assert!(format!("{report:?}").contains("draft written"), "{b}");
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_rpc_caller_sees_a_nested_chain_stream_to_one_terminal_message() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let b = db.backend;
        let Setup {
            orchestrator,
            mut client,
            ws,
            root,
        } = setup(data_dir.path(), &db).await;
        add_agent(
            &mut client,
            &ws,
            "lead",
            &["handoff", "file.read"],
            "claude",
        )
        .await;
        add_agent(&mut client, &ws, "middle", &["handoff"], "opencode").await;
        add_agent(&mut client, &ws, "leaf", &["file.create"], "claude").await;
        let leaf = [
            call(&json!({"tool": "file.create", "path": "leaf.txt", "content": "from C"})),
            report("complete", "C made leaf.txt"),
            "fake: say C done.".to_owned(),
        ];
        let middle = [
            handoff("leaf", &leaf),
            save("c.json"),
            report("complete", "B got C's work"),
            "fake: say B done.".to_owned(),
        ];
        let lead = [
            handoff("middle", &middle),
            save("b.json"),
            report("complete", "A got B's work"),
            "fake: say A done.".to_owned(),
        ];
        let task = planned_task(&mut client, &ws, "Build it in three layers.").await;
        // Not an agent: no parent token, so the run is the task's root.
        let mut stream = client
            .handoff(pb::HandoffRequest {
                task_id: task.id.clone(),
                agent: "lead".into(),
                prompt: lead.join("\n"),
                ..Default::default()
            })
            .await
            .expect("handoff")
            .into_inner();
        let mut messages = Vec::new();
        while let Some(message) = stream.next().await {
            messages.push(message.expect("message").event.expect("event"));
        }
        use pb::handoff_event::Event;
        let Some(Event::Started(started)) = messages.first() else {
            panic!("{b}: the stream starts with started: {messages:?}");
        };
        assert_eq!(
            (
                started.agent.as_str(),
                started.handoff_index,
                started.parent_run_id.as_str()
            ),
            ("lead", 1, ""),
            "{b}"
        );
        let terminals = messages
            .iter()
            .filter(|m| matches!(m, Event::Completed(_) | Event::Failed(_)))
            .count();
        assert_eq!(
            terminals, 1,
            "{b}: exactly one terminal message: {messages:?}"
        );
        let Some(Event::Completed(completed)) = messages.last() else {
            panic!("{b}: the stream ends with completed: {messages:?}");
        };
        assert_eq!(completed.output, "A done.", "{b}");
        assert_eq!(completed.run_id, started.run_id, "{b}");
        let summary = completed
            .completion_report
            .clone()
            .map(|r| Value::Object(chorus_proto::json::from_struct(r))["summary"].clone());
        assert_eq!(summary, Some(json!("A got B's work")), "{b}");
        let progress: Vec<&str> = messages
            .iter()
            .filter_map(|m| match m {
                Event::Progress(p) => Some(p.kind.as_str()),
                _ => None,
            })
            .collect();
        for kind in [
            "agent_started",
            "handoff_started",
            "handoff_completed",
            "completion_report_submitted",
        ] {
            assert!(
                progress.contains(&kind),
                "{b}: {kind} missing from {progress:?}"
            );
        }

        // Each parent got its child's output and report.
        for (file, agent, output, summary) in [
            ("c.json", "leaf", "C done.", "C made leaf.txt"),
            ("b.json", "middle", "B done.", "B got C's work"),
        ] {
            let result = saved(&orchestrator.run_file(file));
            let answer: Value =
                serde_json::from_str(result["stdout"].as_str().expect("stdout")).expect("json");
            assert_eq!(answer["output"]["agent"], agent, "{b}: {answer}");
            assert_eq!(answer["output"]["output"], output, "{b}: {answer}");
            assert_eq!(
                answer["output"]["completion_report"]["summary"], summary,
                "{b}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(root.path().join("leaf.txt")).expect("leaf"),
            "from C"
        );
        let done = task_of(&mut client, &task.id).await;
        assert_eq!(
            done.status, "completed",
            "{b}: the root's report settles the task"
        );

        let runs = client
            .list_runs(pb::ListRunsRequest {
                task_id: task.id.clone(),
            })
            .await
            .expect("runs")
            .into_inner()
            .runs;
        let tree: Vec<(String, u32, String)> = runs
            .iter()
            .map(|r| {
                let parent = runs
                    .iter()
                    .find(|p| p.id == r.parent_run_id)
                    .map_or(String::new(), |p| p.agent.clone());
                (r.agent.clone(), r.handoff_index, parent)
            })
            .collect();
        assert_eq!(
            tree,
            [
                ("lead".to_owned(), 1, String::new()),
                ("middle".to_owned(), 2, "lead".to_owned()),
                ("leaf".to_owned(), 3, "middle".to_owned()),
            ],
            "{b}"
        );

        // Re-opening the finished handoff replays it to the same outcome.
        let replay: Vec<Event> = reopen_handoff(&mut client, &runs[1].id).await;
        assert!(
            matches!(replay.first(), Some(Event::Started(s)) if s.agent == "middle"),
            "{b}"
        );
        assert!(
            matches!(replay.last(), Some(Event::Completed(c)) if c.output == "B done."),
            "{b}: {replay:?}"
        );
        drop(client);
        orchestrator.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_disconnects_leaves_the_run_going_and_its_result_in_the_history() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let Setup {
        orchestrator,
        mut client,
        ws,
        root,
    } = setup(data_dir.path(), &db).await;
    add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
    add_agent(&mut client, &ws, "writer2", &["file.create"], "claude").await;
    let task = planned_task(&mut client, &ws, "Write it.").await;
    let mut stream = client
        .handoff(pb::HandoffRequest {
            task_id: task.id.clone(),
            agent: "writer2".into(),
            // It waits until the caller is gone (something is written to the fifo).
            prompt: [
                "fake: wait gate.fifo".to_owned(),
                call(&json!({"tool": "file.create", "path": "out.txt", "content": "written"})),
                report("complete", "written anyway"),
                "fake: say Written.".to_owned(),
            ]
            .join("\n"),
            ..Default::default()
        })
        .await
        .expect("handoff")
        .into_inner();
    let started = match stream.next().await.expect("a message").expect("ok").event {
        Some(pb::handoff_event::Event::Started(started)) => started,
        other => panic!("started first, not {other:?}"),
    };
    drop(stream);
    wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "waiting on gate.fifo"
    })
    .await;
    let fifo = orchestrator.run_file("gate.fifo");
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go"))
        .await
        .expect("writer")
        .expect("open the gate");

    let events = wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_handoff_completed"
    })
    .await;
    assert_eq!(data(events.last().expect("end"))["outcome"], "completed");
    assert_eq!(task_of(&mut client, &task.id).await.status, "completed");
    assert_eq!(
        std::fs::read_to_string(root.path().join("out.txt")).expect("written"),
        "written"
    );
    let replay: Vec<pb::handoff_event::Event> = reopen_handoff(&mut client, &started.run_id).await;
    assert!(
        matches!(replay.last(), Some(pb::handoff_event::Event::Completed(c)) if c.output == "Written."),
        "{replay:?}"
    );
    drop(client);
    orchestrator.stop().await;
}
