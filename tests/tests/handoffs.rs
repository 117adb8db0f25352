//! Handoffs between agents, end to end, with the fake CLI as every model: the
//! real orchestrator, tool-exec, chorus-tools and Handoff stream. A parent hands
//! off and waits; it gets its child's output and report back and works on; only
//! the root run's report settles the task; timeouts, cancels and a parent's death
//! end the whole tree with no process left. Each flow runs on SQLite, and on
//! PostgreSQL too when CHORUS_TEST_DATABASE_URL is set.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    Client, add_agent, alive, call, data, ends, fake_cli, handoff, history, pids, planned_task,
    reopen_handoff, report, runs_of, saved, start, task_of, use_provider, wait_for,
};
use chorus_tests::db::{TestDatabase, databases};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

async fn orchestrator(data_dir: &Path, db: &TestDatabase) -> Orchestrator {
    let signer = chorus_run_token::load_or_create_signer(data_dir).expect("key pair");
    Orchestrator::start_configured(&db.url, signer, true, |config| {
        config.runner.claude_bin = fake_cli();
        config.runner.opencode_bin = fake_cli();
        config.runner.kill_grace = std::time::Duration::from_millis(300);
    })
    .await
}

/// A workspace at `root` with a Claude Code and an OpenCode provider (both the
/// fake CLI); the seeded writing agents use Claude Code.
async fn workspace(client: &mut Client, root: &Path) -> pb::Workspace {
    let workspace = chorus_tests::agents::workspace(client, "team", root).await;
    for (name, kind) in [
        ("claude", pb::ProviderKind::ClaudeCode),
        ("opencode", pb::ProviderKind::Opencode),
    ] {
        client
            .create_provider(pb::CreateProviderRequest {
                workspace_id: workspace.id.clone(),
                name: name.into(),
                kind: kind.into(),
                ..Default::default()
            })
            .await
            .expect("provider");
    }
    use_provider(
        client,
        &workspace,
        &["writer-workflow", "writer", "editor"],
        "claude",
    )
    .await;
    workspace
}

/// An orchestrator on one database with a workspace, its root, and a directory
/// for what the fake CLIs record.
struct Setup {
    orchestrator: Orchestrator,
    client: Client,
    ws: pb::Workspace,
    root: tempfile::TempDir,
    out: tempfile::TempDir,
}

async fn setup(data_dir: &Path, db: &TestDatabase) -> Setup {
    let root = tempfile::tempdir().expect("root");
    let out = tempfile::tempdir().expect("out");
    let orchestrator = orchestrator(data_dir, db).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, root.path()).await;
    Setup {
        orchestrator,
        client,
        ws,
        root,
        out,
    }
}

fn save(path: &Path) -> String {
    format!("fake: save {}", path.display())
}

fn record(path: &Path) -> String {
    format!("fake: record {}", path.display())
}

/// `kind:agent[:tool or status]` for the events that tell the story of a run tree.
fn story(events: &[pb::TaskEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "status_changed"
                    | "agent_started"
                    | "agent_completed"
                    | "agent_handoff_started"
                    | "agent_handoff_completed"
                    | "completion_report_submitted"
                    | "tool_executed"
                    | "run_failed"
                    | "run_canceled"
            )
        })
        .map(|e| {
            let d = data(e);
            let mut line = e.kind.clone();
            if let Some(agent) = d["agent"].as_str() {
                line = format!("{line}:{agent}");
            }
            for key in ["tool", "to"] {
                if let Some(v) = d[key].as_str() {
                    line = format!("{line}:{v}");
                }
            }
            line
        })
        .collect()
}

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
            out,
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
            save(&out.path().join("writer.json")),
            handoff("editor", &editor),
            save(&out.path().join("editor.json")),
            call(&json!({"tool": "file.read", "path": "draft.md"})),
            save(&out.path().join("read.json")),
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
            let result = saved(&out.path().join(file));
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
            assert_eq!(output_json["usage"]["input_tokens"], 120, "{b}: {answer}");
        }
        // The parent could call tools again after its handoffs.
        let read = saved(&out.path().join("read.json"));
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
            out,
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
            save(&out.path().join("c.json")),
            report("complete", "B got C's work"),
            "fake: say B done.".to_owned(),
        ];
        let lead = [
            handoff("middle", &middle),
            save(&out.path().join("b.json")),
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
            let result = saved(&out.path().join(file));
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
async fn a_handoff_that_times_out_stops_the_child_and_the_parent_goes_on() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let Setup {
        orchestrator,
        mut client,
        ws,
        root: _root,
        out,
    } = setup(data_dir.path(), &db).await;
    add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
    add_agent(&mut client, &ws, "slow", &["file.read"], "opencode").await;
    let pid_file = out.path().join("slow.pids");
    let script = [
        call(&json!({
            "tool": "handoff",
            "agent": "slow",
            "timeout_secs": 1,
            "prompt": format!("fake: stubborn 2 {}", pid_file.display()),
        })),
        save(&out.path().join("slow.json")),
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

    let result = saved(&out.path().join("slow.json"));
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
    for pid in pids(&pid_file) {
        assert!(!alive(pid), "process {pid} of the timed-out child is dead");
    }
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

/// Waits until the fake CLI of `agent` says its stubborn children started.
async fn wait_stubborn(client: &mut Client, task: &str, agent: &str) -> Vec<pb::TaskEvent> {
    wait_for(client, task, |e| {
        let d = data(e);
        e.kind == "agent_progress"
            && d["agent"] == agent
            && d["text"] == "stubborn children started"
    })
    .await
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
            out,
        } = setup(data_dir.path(), &db).await;
        add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
        add_agent(&mut client, &ws, "middle", &["handoff"], "opencode").await;
        add_agent(&mut client, &ws, "leaf", &["file.read"], "claude").await;
        let leaf_pids = out.path().join("leaf.pids");
        let middle = [
            record(&out.path().join("middle.json")),
            handoff(
                "leaf",
                &[format!("fake: stubborn 2 {}", leaf_pids.display())],
            ),
        ];
        let script = [
            record(&out.path().join("lead.json")),
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
            })
            .await
            .expect("cancel")
            .into_inner();
        assert_eq!(canceled.status, "canceled", "{b}");

        // Every process of the tree is dead when CancelTask returns.
        let mut processes = pids(&leaf_pids);
        for file in ["lead.json", "middle.json"] {
            let pid = saved(&out.path().join(file))["pid"].as_i64().expect("pid");
            processes.push(i32::try_from(pid).expect("pid"));
        }
        for pid in processes {
            assert!(!alive(pid), "{b}: process {pid} survived the cancel");
        }
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
        out,
    } = setup(data_dir.path(), &db).await;
    add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
    add_agent(&mut client, &ws, "worker", &["file.read"], "claude").await;
    let worker_pids = out.path().join("worker.pids");
    let script = [
        record(&out.path().join("lead.json")),
        handoff(
            "worker",
            &[format!("fake: stubborn 2 {}", worker_pids.display())],
        ),
    ]
    .join("\n");
    let task = planned_task(&mut client, &ws, &script).await;
    start(&mut client, &task, "lead", 60).await;
    wait_stubborn(&mut client, &task.id, "worker").await;
    let worker = runs_of(&mut client, &task.id, "worker").await.remove(0);

    let lead_pid = saved(&out.path().join("lead.json"))["pid"]
        .as_i64()
        .expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(lead_pid).expect("pid")),
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
    for pid in pids(&worker_pids) {
        assert!(
            !alive(pid),
            "process {pid} of the child survived its parent"
        );
    }
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
        out: _out,
    } = setup(data_dir.path(), &db).await;
    let task = client
        .create_task(pb::CreateTaskRequest {
            workspace_id: ws.id.clone(),
            description: "not planned yet".into(),
            source: None,
        })
        .await
        .expect("task")
        .into_inner();
    let request = |agent: &str, token: &str| pb::HandoffRequest {
        task_id: task.id.clone(),
        agent: agent.into(),
        prompt: "do it".into(),
        parent_run_token: token.into(),
        ..Default::default()
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
    empty.prompt = " ".into();
    let err = client.handoff(empty).await.expect_err("prompt");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("prompt"), "{err:?}");

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_disconnects_leaves_the_run_going_and_its_result_in_the_history() {
    let data_dir = tempfile::tempdir().expect("data");
    let db = databases(data_dir.path()).remove(0);
    let Setup {
        orchestrator,
        mut client,
        ws,
        root,
        out,
    } = setup(data_dir.path(), &db).await;
    add_agent(&mut client, &ws, "lead", &["handoff"], "claude").await;
    add_agent(&mut client, &ws, "writer2", &["file.create"], "claude").await;
    let gate = out.path().join("gate.fifo");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let task = planned_task(&mut client, &ws, "Write it.").await;
    let mut stream = client
        .handoff(pb::HandoffRequest {
            task_id: task.id.clone(),
            agent: "writer2".into(),
            // It waits until the caller is gone (something is written to the fifo).
            prompt: [
                format!("fake: wait {}", gate.display()),
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
    let fifo = gate.clone();
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
