//! WatchTasks: many tasks' changes in one stream, resumable from a cursor.

use std::collections::HashMap;

use tokio_stream::StreamExt as _;

use super::super::TaskChangeStream;
use super::*;
use chorus_proto::orchestrator::v1::task_change::Change;

async fn watch_tasks(f: &Fixture, req: pb::WatchTasksRequest) -> TaskChangeStream {
    f.svc
        .watch_tasks(Request::new(req))
        .await
        .unwrap_or_else(|e| panic!("{}: WatchTasks: {e}", f.backend()))
        .into_inner()
}

async fn next_change(stream: &mut TaskChangeStream, b: &str) -> pb::TaskChange {
    tokio::time::timeout(STREAM_TIMEOUT, stream.next())
        .await
        .unwrap_or_else(|_| panic!("{b}: the stream neither sent nor ended"))
        .unwrap_or_else(|| panic!("{b}: the stream ended"))
        .unwrap_or_else(|e| panic!("{b}: {e}"))
}

/// The status a change moved its task to ("" for other changes).
fn entered(change: &pb::TaskChange) -> String {
    match &change.change {
        Some(Change::Event(e)) if e.kind == "status_changed" => {
            let data = chorus_proto::json::from_struct(e.data.clone().unwrap_or_default());
            data["to"].as_str().unwrap_or_default().to_owned()
        }
        _ => String::new(),
    }
}

/// 2,000 tasks, each moved through three statuses by concurrent writers,
/// followed by one stream over their workspace that is dropped half-way and
/// resumed from the last cursor seen: every status change arrives once, in
/// order per task; the other workspace's tasks never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_follows_two_thousand_tasks_across_a_reconnect() {
    const TASKS: usize = 2_000;
    const MOVES: [&str; 3] = ["planning", "planned", "canceled"];
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("many").await;
        let other = f.workspace("other").await;
        let mut tasks = Vec::with_capacity(TASKS);
        for n in 0..TASKS {
            tasks.push(f.task(&ws, &format!("task {n}")).await);
        }
        let elsewhere = f.task(&other, "not followed").await;

        let follow = |after_cursor: String| pb::WatchTasksRequest {
            workspace_id: ws.id.clone(),
            kinds: vec!["status_changed".into(), "task_deleted".into()],
            after_cursor,
            ..Default::default()
        };
        // From now on: the first message says where "now" is.
        let mut stream = watch_tasks(&f, follow(String::new())).await;
        let first = next_change(&mut stream, b).await;
        assert!(
            matches!(first.change, Some(Change::CaughtUp(_))),
            "{b}: {first:?}"
        );

        // Eight writers move every task through its statuses, many tasks at once.
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..8 {
            let svc = OrchestratorService::new(f.state.clone());
            let mine: Vec<pb::Task> = tasks
                .iter()
                .chain([&elsewhere])
                .skip(w)
                .step_by(8)
                .cloned()
                .collect();
            writers.spawn(async move {
                for status in MOVES {
                    for task in &mine {
                        svc.update_task_status(Request::new(pb::UpdateTaskStatusRequest {
                            task_id: task.id.clone(),
                            status: status.into(),
                            ..Default::default()
                        }))
                        .await
                        .expect("status change");
                    }
                }
            });
        }

        let expected = TASKS * MOVES.len();
        let mut seen: HashMap<String, Vec<(u64, String)>> = HashMap::new();
        let mut last_cursor = first.cursor.clone();
        let mut received = 0;
        while received < expected {
            if received == expected / 2 {
                // The follower goes away and comes back from its cursor.
                drop(stream);
                stream = watch_tasks(&f, follow(last_cursor.clone())).await;
            }
            let change = next_change(&mut stream, b).await;
            if matches!(change.change, Some(Change::CaughtUp(_))) {
                continue;
            }
            assert_eq!(
                change.workspace_id, ws.id,
                "{b}: another workspace's change"
            );
            let Some(Change::Event(event)) = &change.change else {
                panic!("{b}: not an event: {change:?}");
            };
            seen.entry(change.task_id.clone())
                .or_default()
                .push((event.sequence, entered(&change)));
            last_cursor = change.cursor.clone();
            received += 1;
        }
        while let Some(done) = writers.join_next().await {
            done.expect("writer");
        }
        assert_eq!(seen.len(), TASKS, "{b}");
        for task in &tasks {
            let changes = &seen[&task.id];
            assert_eq!(
                changes,
                &[
                    (2, "planning".to_owned()),
                    (3, "planned".to_owned()),
                    (4, "canceled".to_owned())
                ],
                "{b}: task {}",
                task.id
            );
        }

        // A deletion is a change of its own, after the task's last event.
        f.svc
            .delete_task(Request::new(pb::DeleteTaskRequest {
                task_id: tasks[0].id.clone(),
                ..Default::default()
            }))
            .await
            .expect(b);
        let deleted = next_change(&mut stream, b).await;
        assert_eq!(deleted.task_id, tasks[0].id, "{b}");
        assert_eq!(
            deleted.change,
            Some(Change::Deleted(pb::TaskDeleted { sequence: 5 })),
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_replay_from_the_start_then_live_and_only_what_needs_a_person() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        f.set_status(&task, "planning").await.expect(b);

        let mut all = watch_tasks(
            &f,
            pb::WatchTasksRequest {
                after_cursor: "f1.0".into(),
                ..Default::default()
            },
        )
        .await;
        let created = next_change(&mut all, b).await;
        let Some(Change::Event(event)) = &created.change else {
            panic!("{b}: {created:?}");
        };
        assert_eq!(
            (event.kind.as_str(), event.sequence),
            ("task_created", 1),
            "{b}"
        );
        assert_eq!(entered(&next_change(&mut all, b).await), "planning", "{b}");
        let caught_up = next_change(&mut all, b).await;
        assert!(matches!(caught_up.change, Some(Change::CaughtUp(_))), "{b}");

        let mut needed = watch_tasks(
            &f,
            pb::WatchTasksRequest {
                needs_you_only: true,
                after_cursor: "f1.0".into(),
                ..Default::default()
            },
        )
        .await;
        assert!(
            matches!(
                next_change(&mut needed, b).await.change,
                Some(Change::CaughtUp(_))
            ),
            "{b}: nothing needed a person yet"
        );
        f.set_status(&task, "awaiting_input").await.expect(b);
        let live = next_change(&mut all, b).await;
        assert_eq!(entered(&live), "awaiting_input", "{b}");
        let asked = next_change(&mut needed, b).await;
        assert_eq!(asked.cursor, live.cursor, "{b}");
        let Some(Change::Event(event)) = &asked.change else {
            panic!("{b}: {asked:?}");
        };
        assert_eq!(
            event.needs_you.as_ref().map(|n| n.status.as_str()),
            Some("awaiting_input"),
            "{b}"
        );
    }
}

#[tokio::test]
async fn bad_filters_and_cursors_are_refused_naming_the_fix() {
    for f in fixtures().await {
        let b = f.backend();
        let refused = |req: pb::WatchTasksRequest| {
            let svc = &f.svc;
            async move { svc.watch_tasks(Request::new(req)).await.map(|_| ()) }
        };
        assert_status(
            refused(pb::WatchTasksRequest {
                kinds: vec!["tool_executed".into()],
                ..Default::default()
            })
            .await,
            Code::InvalidArgument,
            "WatchTask",
            b,
        );
        assert_status(
            refused(pb::WatchTasksRequest {
                after_cursor: "42".into(),
                ..Default::default()
            })
            .await,
            Code::InvalidArgument,
            "f1.0",
            b,
        );
        assert_status(
            refused(pb::WatchTasksRequest {
                after_cursor: "f1.999999".into(),
                ..Default::default()
            })
            .await,
            Code::OutOfRange,
            "beyond the last change",
            b,
        );
        assert_status(
            refused(pb::WatchTasksRequest {
                workspace_id: crate::domain::WorkspaceId::new().to_string(),
                ..Default::default()
            })
            .await,
            Code::NotFound,
            "workspace",
            b,
        );
    }
}
