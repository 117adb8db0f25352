use chorus_catalog::args::{CompletionReport, ReportStatus};
use serde_json::json;

use super::{name_of, source, test_stores};
use crate::domain::{DomainError, EventKind, RunId, RunState, TaskStatus};
use crate::store::{EVENT_PAGE_BYTES, StoreError};

fn tools() -> Vec<String> {
    vec!["file.read".into(), "completion-report".into()]
}

#[tokio::test]
async fn opening_a_run_records_run_opened() {
    for t in test_stores().await {
        let b = t.backend;
        let (ws, task) = t.workspace_with_task("docs").await;
        let (root, events) = t
            .store
            .create_run(task.id, name_of("writer-workflow"), None, tools())
            .await
            .expect(b);
        assert_eq!(root.state, RunState::Spawning, "{b}");
        assert_eq!(root.tools, tools(), "{b}");
        assert_eq!(events.len(), 1, "{b}");
        assert_eq!(events[0].sequence, 2, "{b}");
        assert_eq!(events[0].kind, EventKind::RunOpened, "{b}");
        assert_eq!(
            events[0].data,
            json!({"run_id": root.id.to_string(), "agent": "writer-workflow", "parent_run_id": null}),
            "{b}"
        );

        let (child, events) = t
            .store
            .create_run(task.id, name_of("writer"), Some(root.id), tools())
            .await
            .expect(b);
        assert_eq!(child.parent, Some(root.id), "{b}");
        assert_eq!(events[0].sequence, 3, "{b}");
        assert_eq!(events[0].data["parent_run_id"], root.id.to_string(), "{b}");
        assert_eq!(t.store.get_run(child.id).await.expect(b), child, "{b}");
        assert_eq!(
            t.store.get_task(task.id).await.expect(b).last_sequence,
            3,
            "{b}"
        );

        let mut runs = t.store.list_runs(task.id).await.expect(b);
        runs.sort_by_key(|run| run.parent.is_some());
        assert_eq!(runs, [root.clone(), child], "{b}");

        // A parent must be a run of the same task.
        let (other, _) = t
            .store
            .create_task(ws.id, "y".into(), source())
            .await
            .expect(b);
        let err = t
            .store
            .create_run(other.id, name_of("writer"), Some(root.id), tools())
            .await
            .expect_err(b);
        assert!(
            matches!(
                err,
                StoreError::Domain(DomainError::Invalid {
                    field: "parent run",
                    ..
                })
            ),
            "{b}: {err}"
        );
        let unknown = RunId::new();
        assert_eq!(
            t.store
                .create_run(other.id, name_of("writer"), Some(unknown), tools())
                .await,
            Err(StoreError::not_found("run", unknown)),
            "{b}"
        );
        assert_eq!(
            t.store.get_task(other.id).await.expect(b).last_sequence,
            1,
            "{b}"
        );
        assert!(
            t.store.list_runs(other.id).await.expect(b).is_empty(),
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_run_and_its_task_change_together_with_their_events() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let (run, _) = t
            .store
            .create_run(task.id, name_of("writer"), None, tools())
            .await
            .expect(b);

        let (active, task_after, events) = t
            .store
            .change_run(run.id, |run, task| {
                run.state.check_transition(RunState::Active)?;
                run.state = RunState::Active;
                task.current_agent = Some(run.agent.clone());
                Ok(vec![(EventKind::AgentStarted, json!({"agent": run.agent}))])
            })
            .await
            .expect(b);
        assert_eq!(active.state, RunState::Active, "{b}");
        assert_eq!(task_after.current_agent, Some(name_of("writer")), "{b}");
        assert_eq!(events[0].sequence, 3, "{b}");

        let report = CompletionReport {
            status: ReportStatus::Complete,
            summary: "done".into(),
            output: "README written".into(),
            blocked_reason: None,
        };
        let submitted = report.clone();
        let (finished, task_after, events) = t
            .store
            .change_run(run.id, move |run, task| {
                run.state.check_transition(RunState::Finished)?;
                run.state = RunState::Finished;
                run.end_reason = Some("finished normally".into());
                run.completion_report = Some(submitted);
                task.current_agent = None;
                task.status_reason = Some("reported".into());
                Ok(vec![
                    (
                        EventKind::CompletionReportSubmitted,
                        json!({"status": "complete"}),
                    ),
                    (EventKind::AgentCompleted, json!({"agent": run.agent})),
                ])
            })
            .await
            .expect(b);
        assert_eq!(finished.completion_report, Some(report), "{b}");
        assert!(
            finished.finished_ms.is_some_and(|ms| ms >= run.started_ms),
            "{b}"
        );
        assert_eq!(
            events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            [4, 5],
            "{b}"
        );
        assert_eq!(t.store.get_run(run.id).await.expect(b), finished, "{b}");
        assert_eq!(t.store.get_task(task.id).await.expect(b), task_after, "{b}");

        // A refused change writes neither the run, the task nor an event.
        let err = t
            .store
            .change_run(run.id, |run, task| {
                task.status = TaskStatus::Failed;
                run.state.check_transition(RunState::Active)?;
                run.state = RunState::Active;
                Ok(vec![(EventKind::AgentStarted, json!({}))])
            })
            .await
            .expect_err(b);
        assert!(
            matches!(err, StoreError::Domain(DomainError::Transition(_))),
            "{b}: {err}"
        );
        assert_eq!(t.store.get_run(run.id).await.expect(b), finished, "{b}");
        assert_eq!(t.store.get_task(task.id).await.expect(b), task_after, "{b}");
        assert_eq!(
            t.store
                .events(task.id, 0, 0, EVENT_PAGE_BYTES)
                .await
                .expect(b)
                .len(),
            5,
            "{b}"
        );

        let unknown = RunId::new();
        assert_eq!(
            t.store.change_run(unknown, |_, _| Ok(vec![])).await,
            Err(StoreError::not_found("run", unknown)),
            "{b}"
        );
    }
}

#[tokio::test]
async fn unfinished_runs_are_the_ones_to_recover_after_a_restart() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let (spawning, _) = t
            .store
            .create_run(task.id, name_of("writer"), None, tools())
            .await
            .expect(b);
        let (done, _) = t
            .store
            .create_run(task.id, name_of("editor"), None, tools())
            .await
            .expect(b);
        let (active, _) = t
            .store
            .create_run(task.id, name_of("planner"), None, tools())
            .await
            .expect(b);
        t.store
            .change_run(done.id, |run, _| {
                run.state = RunState::Finished;
                Ok(vec![(EventKind::RunCanceled, json!({}))])
            })
            .await
            .expect(b);
        t.store
            .change_run(active.id, |run, _| {
                run.state = RunState::Active;
                Ok(vec![])
            })
            .await
            .expect(b);

        let mut unfinished: Vec<(RunId, RunState)> = t
            .store
            .unfinished_runs()
            .await
            .expect(b)
            .into_iter()
            .map(|run| (run.id, run.state))
            .collect();
        unfinished.sort_by_key(|(id, _)| *id);
        let mut expected = vec![
            (spawning.id, RunState::Spawning),
            (active.id, RunState::Active),
        ];
        expected.sort_by_key(|(id, _)| *id);
        assert_eq!(unfinished, expected, "{b}");
    }
}

#[tokio::test]
async fn a_run_keeps_its_session_usage_and_conversation_in_order() {
    for t in test_stores().await {
        let b = t.backend;
        let (_ws, task) = t.workspace_with_task("docs").await;
        let (run, _) = t
            .store
            .create_run(task.id, name_of("writer"), None, tools())
            .await
            .expect(b);
        let usage = crate::domain::Usage {
            model_calls: 2,
            input_tokens: 10,
            output_tokens: 4,
            cost_pico_usd: 1500,
            ..crate::domain::Usage::default()
        };
        let (changed, _, events) = t
            .store
            .change_run(run.id, move |run, _task| {
                run.session_id = Some("sess-1".into());
                run.usage = usage;
                Ok(Vec::new())
            })
            .await
            .expect(b);
        assert!(events.is_empty(), "{b}");
        let read = t.store.get_run(run.id).await.expect(b);
        assert_eq!(read, changed, "{b}");
        assert_eq!(
            (read.session_id.as_deref(), read.usage),
            (Some("sess-1"), usage),
            "{b}"
        );

        // Only the run's driver appends to its conversation: this run has none.
        let undriven = t
            .store
            .append_run_messages(run.id, 0, vec![json!({"role": "system"})])
            .await
            .expect_err(b);
        assert!(
            matches!(
                undriven,
                StoreError::Domain(crate::domain::DomainError::RunNotActive(_))
            ),
            "{b}: {undriven}"
        );
        let (run, _, _) = t
            .store
            .open_run(
                crate::store::NewRun {
                    task_id: task.id,
                    agent: name_of("writer"),
                    parent: None,
                    tools: tools(),
                    rules: Default::default(),
                    handoff_prompt: None,
                    token: None,
                    drive: Some(std::time::Duration::from_secs(60)),
                },
                |_, _, _| Ok(Vec::new()),
            )
            .await
            .expect(b);
        assert_eq!(
            (run.replica.as_deref(), run.epoch, run.timeout_ms),
            (Some("local"), 0, Some(60_000)),
            "{b}: a driven run is leased to this replica"
        );
        t.store
            .append_run_messages(
                run.id,
                0,
                vec![json!({"role": "system"}), json!({"role": "user"})],
            )
            .await
            .expect(b);
        let stale = t
            .store
            .append_run_messages(run.id, 1, vec![json!({"role": "user"})])
            .await
            .expect_err(b);
        assert!(
            stale.to_string().contains("epoch 1"),
            "{b}: a driver of another epoch is refused: {stale}"
        );
        t.store
            .append_run_messages(
                run.id,
                0,
                vec![json!({"role": "assistant", "content": "é"})],
            )
            .await
            .expect(b);
        let roles: Vec<serde_json::Value> = t
            .store
            .run_messages(run.id)
            .await
            .expect(b)
            .into_iter()
            .map(|m| m["role"].clone())
            .collect();
        assert_eq!(
            roles,
            [json!("system"), json!("user"), json!("assistant")],
            "{b}"
        );
        let missing = t
            .store
            .append_run_messages(RunId::new(), 0, vec![json!({})])
            .await
            .expect_err(b);
        assert!(
            matches!(missing, StoreError::NotFound { what: "run", .. }),
            "{b}"
        );
    }
}

#[tokio::test]
async fn canceling_a_task_ends_its_unfinished_runs_in_one_transaction() {
    for t in test_stores().await {
        let b = t.backend;
        let (_ws, task) = t.workspace_with_task("docs").await;
        t.store
            .change_task(task.id, |task| {
                Ok(vec![crate::domain::policy::change_status(
                    task,
                    TaskStatus::Planning,
                    None,
                )?])
            })
            .await
            .expect(b);
        let (run, _) = t
            .store
            .create_run(task.id, name_of("writer"), None, tools())
            .await
            .expect(b);
        let (task, runs, events) = t
            .store
            .change_task_runs(task.id, |task, runs| {
                crate::domain::policy::cancel_task(task, runs, "stop", 5)
            })
            .await
            .expect(b);
        assert_eq!(task.status, TaskStatus::Canceled, "{b}");
        assert_eq!(runs.len(), 1, "{b}");
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::StatusChanged, EventKind::RunCanceled],
            "{b}"
        );
        let stored = t.store.get_run(run.id).await.expect(b);
        assert_eq!(
            (stored.state, stored.end_reason.as_deref()),
            (RunState::Finished, Some("the task was canceled: stop")),
            "{b}"
        );
        // Nothing to cancel twice: the refused change writes nothing.
        let err = t
            .store
            .change_task_runs(task.id, |task, runs| {
                crate::domain::policy::cancel_task(task, runs, "again", 6)
            })
            .await
            .expect_err(b);
        assert!(
            matches!(err, StoreError::Domain(DomainError::Transition(_))),
            "{b}"
        );
        assert_eq!(
            t.store.get_task(task.id).await.expect(b).last_sequence,
            task.last_sequence,
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_handoff_opens_its_child_and_parks_its_parent_in_one_transaction() {
    use crate::domain::policy::handoff::{begin_handoff, end_handoff};
    use crate::domain::{HandoffOutcome, policy};
    use crate::store::NewRun;

    for t in test_stores().await {
        let b = t.backend;
        let (_ws, task) = t.workspace_with_task("docs").await;
        let binding = crate::domain::TokenBinding {
            root: "/srv/docs".into(),
            expires_ms: 1_900_000_000_000,
            egress: vec!["github.com:443".into(), "*.npmjs.org:443".into()],
        };
        let new = NewRun {
            task_id: task.id,
            agent: name_of("writer-workflow"),
            parent: None,
            tools: tools(),
            rules: Default::default(),
            handoff_prompt: None,
            token: Some(binding.clone()),
            drive: None,
        };
        let (root, _, _) = t
            .store
            .create_run_with(new, |task| {
                Ok(vec![
                    policy::change_status(task, TaskStatus::Planning, None)?,
                    policy::change_status(task, TaskStatus::Planned, None)?,
                    policy::change_status(task, TaskStatus::Active, None)?,
                ])
            })
            .await
            .expect(b);
        t.store
            .change_run(root.id, |run, task| {
                Ok(vec![policy::activate_run(run, task)?])
            })
            .await
            .expect(b);
        // What the token was minted for is kept through every change of the run.
        let stored = t.store.get_run(root.id).await.expect(b);
        assert_eq!(stored.token, Some(binding), "{b}");
        let handoff = |agent: &str, parent| NewRun {
            task_id: task.id,
            agent: name_of(agent),
            parent: Some(parent),
            tools: tools(),
            rules: Default::default(),
            handoff_prompt: Some(format!("{agent}: do it")),
            token: None,
            drive: None,
        };
        let (child, after, events) = t
            .store
            .open_run(handoff("writer", root.id), |task, run, parent| {
                begin_handoff(task, run, parent)
            })
            .await
            .expect(b);
        assert_eq!(child.handoff_index, Some(1), "{b}");
        assert_eq!(child.prompt.as_deref(), Some("writer: do it"), "{b}");
        assert_eq!(after.current_agent, Some(name_of("writer")), "{b}");
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::RunOpened, EventKind::AgentHandoffStarted],
            "{b}"
        );
        let parent = t.store.get_run(root.id).await.expect(b);
        assert_eq!(parent.state, RunState::AwaitingHandoff, "{b}");
        assert_eq!(t.store.get_run(child.id).await.expect(b), child, "{b}");

        // A parent that is waiting cannot hand off again: nothing is written.
        let before = t.store.get_task(task.id).await.expect(b).last_sequence;
        let err = t
            .store
            .open_run(handoff("editor", root.id), |task, run, parent| {
                begin_handoff(task, run, parent)
            })
            .await
            .expect_err(b);
        assert!(
            matches!(err, StoreError::Domain(DomainError::RunNotActive(_))),
            "{b}: {err}"
        );
        assert_eq!(t.store.list_runs(task.id).await.expect(b).len(), 2, "{b}");
        assert_eq!(
            t.store.get_task(task.id).await.expect(b).last_sequence,
            before,
            "{b}"
        );

        // The child ends: in one transaction it finishes, its output is kept and
        // its parent works again.
        let (ended, after, events) = t
            .store
            .change_run_family(child.id, |run, task, others| {
                run.output = Some("a draft".into());
                let mut events = policy::end_run(
                    run,
                    task,
                    EventKind::AgentCompleted,
                    "completed".into(),
                    serde_json::Value::Null,
                    10,
                )?;
                let parent = others.iter_mut().find(|o| Some(o.id) == run.parent);
                events.extend(end_handoff(
                    run,
                    parent,
                    task,
                    &HandoffOutcome::Completed,
                    10,
                )?);
                Ok(events)
            })
            .await
            .expect(b);
        assert_eq!(ended.output.as_deref(), Some("a draft"), "{b}");
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::AgentCompleted,
                EventKind::AgentHandoffCompleted,
                EventKind::ToolExecuted
            ],
            "{b}"
        );
        assert_eq!(after.current_agent, Some(name_of("writer-workflow")), "{b}");
        assert_eq!(
            t.store.get_run(root.id).await.expect(b).state,
            RunState::Active,
            "{b}"
        );
        assert_eq!(t.store.get_run(child.id).await.expect(b), ended, "{b}");

        // The next handoff gets the next number.
        let (second, _, _) = t
            .store
            .open_run(handoff("editor", root.id), |task, run, parent| {
                begin_handoff(task, run, parent)
            })
            .await
            .expect(b);
        assert_eq!(second.handoff_index, Some(2), "{b}");
    }
}

/// However busy the main pool is (every connection checked out by slow
/// requests), a heartbeat renews the replica's leases on its own connection:
/// a flood of requests cannot make a replica fence its own runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_does_not_wait_for_a_busy_pool() {
    for t in test_stores().await {
        let b = t.backend;
        let store = t
            .store
            .clone()
            .as_replica(crate::store::ReplicaIdentity::new(
                "r-busy",
                std::time::Duration::from_secs(30),
            ));
        store.register_replica().await.expect("register");
        let pool = store.pool.clone();
        let size = pool.max_size();
        let held = tokio::task::spawn_blocking(move || {
            (0..size)
                .map(|_| pool.get().expect("a pooled connection"))
                .collect::<Vec<_>>()
        })
        .await
        .expect("check out the whole pool");
        assert_eq!(store.pool.state().idle_connections, 0, "{b}");
        let beat = store.heartbeat(Vec::new()).await;
        drop(held);
        let beat = beat.unwrap_or_else(|e| panic!("{b}: the heartbeat waited for the pool: {e}"));
        assert!(beat.lost.is_empty(), "{b}");
    }
}

/// A call recorded as it is sent counts at once, as an estimate; its answer
/// takes the estimate's place in the run's, the task's and the day's sums;
/// a call its API refused is taken out; and costs add up to the pico-dollar.
#[tokio::test]
async fn a_call_sent_counts_as_estimated_until_its_answer_takes_its_place() {
    use crate::domain::{ModelCall, PricedCall, Prices};
    for t in test_stores().await {
        let b = t.backend;
        let (ws, task) = t.workspace_with_task("docs").await;
        let (run, _) = t
            .store
            .create_run(task.id, name_of("writer"), None, tools())
            .await
            .expect(b);
        let prices = Prices::parse("[models.m]\ninput = 0.4\noutput = 0.4\n").expect("table");
        let priced = |call: ModelCall| PricedCall::of(call, "p", &prices);
        let provider = || name_of("p");
        let sent = ModelCall::estimate("m", 400, 0);
        let (_, task_after_send, _, id) = t
            .store
            .record_model_call(run.id, provider(), priced(sent.clone()), false)
            .await
            .expect(b);
        let u = task_after_send.usage;
        assert_eq!(
            (
                u.model_calls,
                u.input_tokens,
                u.estimated_calls,
                u.unpriced_calls
            ),
            (1, 100, 1, 1),
            "{b}: counted at once, estimated and unpriced"
        );
        let answer = ModelCall {
            model: "m".into(),
            input_tokens: 7,
            output_tokens: 3,
            ..ModelCall::default()
        };
        let (run_after, task_after, _) = t
            .store
            .answer_model_call(id, Some(priced(answer.clone())))
            .await
            .expect(b);
        let u = task_after.usage;
        assert_eq!(
            (
                u.model_calls,
                u.input_tokens,
                u.output_tokens,
                u.estimated_calls,
                u.unpriced_calls
            ),
            (1, 7, 3, 0, 0),
            "{b}: the answer in the estimate's place"
        );
        assert_eq!(u.cost(), 4_000_000, "{b}: 10 tokens at 0.4 µ$, exactly");
        assert_eq!(run_after.usage, u, "{b}");
        // Answered once: a second answer changes nothing.
        let (_, again, _) = t
            .store
            .answer_model_call(id, Some(priced(answer)))
            .await
            .expect(b);
        assert_eq!(again.usage, u, "{b}");
        // Sent and refused by its API: taken out again.
        let (_, _, _, refused) = t
            .store
            .record_model_call(run.id, provider(), priced(sent), false)
            .await
            .expect(b);
        let (_, task_after, _) = t.store.answer_model_call(refused, None).await.expect(b);
        assert_eq!(task_after.usage, u, "{b}: the refused call is gone");
        let today = crate::domain::day_of(crate::domain::now_ms());
        let days = t
            .store
            .usage_days(Some(ws.id), today - 1, today + 2)
            .await
            .expect(b);
        let day = crate::domain::Usage::sum(days.iter().map(|d| &d.usage));
        assert_eq!(day, u, "{b}: the day's sums agree with the task's");
    }
}

/// A replica whose runs' database work holds every blocking thread (and
/// every pooled connection) still renews its leases: the heartbeat waits in
/// no queue of theirs. Before, it went through tokio's blocking pool, and a
/// replica that admitted a thousand runs at once fenced itself.
#[test]
fn the_heartbeat_goes_through_while_the_runs_hold_every_blocking_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        for t in test_stores().await {
            t.store
                .register_replica()
                .await
                .unwrap_or_else(|e| panic!("{}: register: {e}", t.backend));
            let (release, held) = std::sync::mpsc::channel::<()>();
            let held = std::sync::Arc::new(std::sync::Mutex::new(held));
            let (busy, all_busy) = std::sync::mpsc::channel::<()>();
            for _ in 0..2 {
                let held = std::sync::Arc::clone(&held);
                let busy = busy.clone();
                tokio::task::spawn_blocking(move || {
                    let _ = busy.send(());
                    let _ = held.lock().expect("lock").recv();
                });
            }
            for _ in 0..2 {
                all_busy.recv().expect("a blocking thread is held");
            }
            let beat = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                t.store.heartbeat(Vec::new()),
            )
            .await;
            release.send(()).expect("release");
            release.send(()).expect("release");
            let beat = beat.unwrap_or_else(|_| {
                panic!(
                    "{}: the heartbeat waited for the blocking threads the runs hold",
                    t.backend
                )
            });
            assert!(beat.is_ok(), "{}: {:?}", t.backend, beat.err());
        }
    });
}
