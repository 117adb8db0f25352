use std::collections::BTreeSet;

use serde_json::json;

use super::{source, test_stores};
use crate::domain::{DomainError, EventKind, Stage, TaskId, TaskStatus, WorkspaceId};
use crate::store::{EVENT_PAGE_BYTES, EventDraft, StoreError};

/// The change a status update makes: checked against the table, recorded as an event.
fn move_to(
    to: TaskStatus,
) -> impl FnOnce(&mut crate::domain::Task) -> Result<Vec<EventDraft>, DomainError> + Send + 'static
{
    move |task| {
        task.status.check_transition(to)?;
        let from = task.status;
        task.status = to;
        Ok(vec![(
            EventKind::StatusChanged,
            json!({ "from": from.as_str(), "to": to.as_str() }),
        )])
    }
}

#[tokio::test]
async fn creating_a_task_writes_its_first_event() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let (task, events) = t
            .store
            .create_task(ws.id, "write the README".into(), source())
            .await
            .expect(b);
        assert_eq!(task.status, TaskStatus::Pending, "{b}");
        assert_eq!(task.stage, Stage::Backlog, "{b}");
        assert_eq!(task.last_sequence, 1, "{b}");
        assert_eq!(task.source, source(), "{b}");
        assert_eq!(events.len(), 1, "{b}");
        assert_eq!(events[0].sequence, 1, "{b}");
        assert_eq!(events[0].kind, EventKind::TaskCreated, "{b}");
        assert_eq!(
            events[0].data,
            json!({"description": "write the README"}),
            "{b}"
        );
        assert_eq!(
            t.store
                .events(task.id, 0, 0, EVENT_PAGE_BYTES)
                .await
                .expect(b),
            events,
            "{b}"
        );
        assert_eq!(t.store.get_task(task.id).await.expect(b), task, "{b}");

        let err = t
            .store
            .create_task(ws.id, "  ".into(), source())
            .await
            .expect_err(b);
        assert!(matches!(err, StoreError::Domain(_)), "{b}: {err}");
        let missing = WorkspaceId::new();
        assert_eq!(
            t.store.create_task(missing, "x".into(), source()).await,
            Err(StoreError::not_found("workspace", missing)),
            "{b}"
        );
        let unknown = TaskId::new();
        assert_eq!(
            t.store.get_task(unknown).await,
            Err(StoreError::not_found("task", unknown)),
            "{b}"
        );
    }
}

/// A request made again — the same id, the same kind of source, the same
/// caller — makes no second task: the store refuses it (AlreadyExists, of a
/// task request) and finds the first. Another caller's, or another
/// workspace's, same id is another request.
#[tokio::test]
async fn a_request_made_again_makes_no_second_task() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let other = t.workspace("code").await;
        let sent = |user: &str| crate::domain::TaskSource {
            kind: "a2a".into(),
            user_id: Some(user.into()),
            conversation_id: Some("c1".into()),
            request_id: Some("m1".into()),
        };
        let (first, _) = t
            .store
            .create_task(ws.id, "write the README".into(), sent("ops"))
            .await
            .expect(b);
        let again = t
            .store
            .create_task(ws.id, "write the README".into(), sent("ops"))
            .await;
        assert!(
            matches!(
                &again,
                Err(StoreError::AlreadyExists { what, .. }) if *what == crate::store::TASK_REQUEST
            ),
            "{b}: {again:?}"
        );
        let key = sent("ops").request_key().expect("a key");
        let found = t.store.task_of_request(ws.id, key.clone()).await.expect(b);
        assert_eq!(found.map(|t| t.id), Some(first.id), "{b}");
        assert_eq!(
            t.store.task_of_request(other.id, key).await.expect(b),
            None,
            "{b}"
        );
        // Another caller's, another workspace's, and requests without an id.
        t.store
            .create_task(ws.id, "write the README".into(), sent("dev"))
            .await
            .expect(b);
        t.store
            .create_task(other.id, "write the README".into(), sent("ops"))
            .await
            .expect(b);
        for _ in 0..2 {
            t.store
                .create_task(ws.id, "no id".into(), source())
                .await
                .expect(b);
        }
    }
}

#[tokio::test]
async fn an_allowed_change_is_saved_with_its_event_and_a_refused_one_writes_nothing() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;

        let (planning, events) = t
            .store
            .change_task(task.id, move_to(TaskStatus::Planning))
            .await
            .expect(b);
        assert_eq!(planning.status, TaskStatus::Planning, "{b}");
        assert_eq!(planning.last_sequence, 2, "{b}");
        assert!(planning.updated_ms >= task.updated_ms, "{b}");
        assert_eq!(events.len(), 1, "{b}");
        assert_eq!(events[0].sequence, 2, "{b}");
        assert_eq!(
            events[0].data,
            json!({"from": "pending", "to": "planning"}),
            "{b}"
        );
        assert_eq!(t.store.get_task(task.id).await.expect(b), planning, "{b}");

        let err = t
            .store
            .change_task(task.id, move_to(TaskStatus::Completed))
            .await
            .expect_err(b);
        assert!(
            matches!(err, StoreError::Domain(DomainError::Transition(_))),
            "{b}: {err}"
        );
        assert_eq!(t.store.get_task(task.id).await.expect(b), planning, "{b}");
        assert_eq!(
            t.store
                .events(task.id, 0, 0, EVENT_PAGE_BYTES)
                .await
                .expect(b)
                .len(),
            2,
            "{b}"
        );

        // A closure that changes the task and then fails leaves no trace either.
        let err = t
            .store
            .change_task(task.id, |task| {
                task.status_reason = Some("half-done".into());
                Err(DomainError::Transition("no".into()))
            })
            .await
            .expect_err(b);
        assert_eq!(
            err,
            StoreError::Domain(DomainError::Transition("no".into())),
            "{b}"
        );
        assert_eq!(t.store.get_task(task.id).await.expect(b), planning, "{b}");

        // The store keeps the fields it owns.
        let (kept, events) = t
            .store
            .change_task(task.id, |task| {
                task.last_sequence = 99;
                task.id = TaskId::new();
                task.status_reason = Some("thinking".into());
                Ok(vec![])
            })
            .await
            .expect(b);
        assert!(events.is_empty(), "{b}");
        assert_eq!((kept.id, kept.last_sequence), (task.id, 2), "{b}");
        assert_eq!(t.store.get_task(task.id).await.expect(b), kept, "{b}");

        let unknown = TaskId::new();
        assert_eq!(
            t.store.append_events(unknown, vec![]).await,
            Err(StoreError::not_found("task", unknown)),
            "{b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_get_gapless_unique_sequences() {
    const TASKS: usize = 8;
    const APPENDS: usize = 50;
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("docs").await;
        let mut ids = Vec::new();
        for i in 0..TASKS {
            let (task, _) = t
                .store
                .create_task(ws.id, format!("task {i}"), source())
                .await
                .expect(b);
            ids.push(task.id);
        }
        let mut writers = tokio::task::JoinSet::new();
        for n in 0..APPENDS {
            for &id in &ids {
                let store = t.store.clone();
                writers.spawn(async move {
                    if n % 2 == 0 {
                        store
                            .append_events(id, vec![(EventKind::CommentAdded, json!({ "n": n }))])
                            .await
                    } else {
                        store
                            .change_task(id, move |task| {
                                task.status_reason = Some(format!("writer {n}"));
                                Ok(vec![(EventKind::CommentAdded, json!({ "n": n }))])
                            })
                            .await
                            .map(|(_, events)| events)
                    }
                });
            }
        }
        while let Some(joined) = writers.join_next().await {
            let events = joined.expect("writer task").expect(b);
            assert_eq!(events.len(), 1, "{b}");
        }
        for id in ids {
            let events = t.store.events(id, 0, 0, EVENT_PAGE_BYTES).await.expect(b);
            let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
            let expected: Vec<u64> = (1..=(APPENDS as u64 + 1)).collect();
            assert_eq!(sequences, expected, "{b}: gapless and unique");
            let written: BTreeSet<u64> = events[1..]
                .iter()
                .map(|e| e.data["n"].as_u64().expect("n"))
                .collect();
            assert_eq!(written.len(), APPENDS, "{b}: every append recorded once");
            let task = t.store.get_task(id).await.expect(b);
            assert_eq!(task.last_sequence, APPENDS as u64 + 1, "{b}");
        }
    }
}

#[tokio::test]
async fn events_are_read_in_pages_after_a_sequence() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let drafts = (0..9)
            .map(|n| (EventKind::CommentAdded, json!({ "n": n })))
            .collect();
        let appended = t.store.append_events(task.id, drafts).await.expect(b);
        let sequences: Vec<u64> = appended.iter().map(|e| e.sequence).collect();
        assert_eq!(sequences, (2..=10).collect::<Vec<_>>(), "{b}");

        let page = |after, limit| t.store.events(task.id, after, limit, EVENT_PAGE_BYTES);
        let seqs = |events: Vec<crate::domain::Event>| -> Vec<u64> {
            events.iter().map(|e| e.sequence).collect()
        };
        assert_eq!(seqs(page(0, 4).await.expect(b)), [1, 2, 3, 4], "{b}");
        assert_eq!(seqs(page(4, 4).await.expect(b)), [5, 6, 7, 8], "{b}");
        assert_eq!(seqs(page(8, 4).await.expect(b)), [9, 10], "{b}");
        assert!(page(10, 4).await.expect(b).is_empty(), "{b}");
        assert_eq!(page(0, 0).await.expect(b).len(), 10, "{b}");
        assert_eq!(page(3, 1).await.expect(b), appended[2..3], "{b}");

        let unknown = TaskId::new();
        assert_eq!(
            t.store.events(unknown, 0, 10, EVENT_PAGE_BYTES).await,
            Err(StoreError::not_found("task", unknown)),
            "{b}"
        );
    }
}

#[tokio::test]
async fn pages_of_large_events_end_at_their_bytes_and_a_larger_event_comes_alone() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        // 100 KB events, every fourth 600 KB: old data, recorded before inputs were cut.
        let drafts = (0..12)
            .map(|n| {
                let size = if n % 4 == 3 { 600_000 } else { 100_000 };
                (
                    EventKind::CommentAdded,
                    json!({ "n": n, "text": "x".repeat(size) }),
                )
            })
            .collect();
        t.store.append_events(task.id, drafts).await.expect(b);

        let mut after = 0;
        let mut pages = Vec::new();
        loop {
            let page = t.store.events(task.id, after, 20, 500_000).await.expect(b);
            let Some(last) = page.last() else { break };
            after = last.sequence;
            let bytes: usize = page.iter().map(|e| e.data.to_string().len()).sum();
            assert!(page.len() == 1 || bytes <= 500_000, "{b}: {bytes} bytes");
            pages.push(page.iter().map(|e| e.sequence).collect::<Vec<u64>>());
        }
        // Sequence 1 is task_created; 5, 9 and 13 are the large ones.
        assert_eq!(
            pages,
            [
                vec![1, 2, 3, 4],
                vec![5],
                vec![6, 7, 8],
                vec![9],
                vec![10, 11, 12],
                vec![13]
            ],
            "{b}"
        );
        let counted = t.store.events(task.id, 0, 3, 10_000_000).await.expect(b);
        assert_eq!(counted.len(), 3, "{b}: the count bounds too");
    }
}

#[tokio::test]
async fn tasks_are_listed_by_workspace_and_status_in_pages() {
    for t in test_stores().await {
        let b = t.backend;
        let docs = t.workspace("docs").await;
        let code = t.workspace("code").await;
        let mut docs_tasks = Vec::new();
        for i in 0..7 {
            let (task, _) = t
                .store
                .create_task(docs.id, format!("doc {i}"), source())
                .await
                .expect(b);
            docs_tasks.push(task.id);
        }
        for i in 0..2 {
            t.store
                .create_task(code.id, format!("code {i}"), source())
                .await
                .expect(b);
        }
        for &id in &docs_tasks[..3] {
            t.store
                .change_task(id, move_to(TaskStatus::Planning))
                .await
                .expect(b);
        }

        // Pages of 3 over the workspace's 7 tasks, in creation order.
        let mut seen = Vec::new();
        let mut token = None;
        let mut pages = 0;
        loop {
            let (tasks, next) = t
                .store
                .list_tasks(Some(docs.id), None, 3, token.clone())
                .await
                .expect(b);
            pages += 1;
            assert!(tasks.len() <= 3, "{b}");
            seen.extend(tasks.iter().map(|task| task.id));
            match next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 3, "{b}");
        let mut expected = docs_tasks.clone();
        let created: Vec<(i64, TaskId)> = {
            let mut all = Vec::new();
            for &id in &expected {
                all.push((t.store.get_task(id).await.expect(b).created_ms, id));
            }
            all.sort();
            all
        };
        expected = created.into_iter().map(|(_, id)| id).collect();
        assert_eq!(seen, expected, "{b}: every task once, oldest first");

        let (planning, next) = t
            .store
            .list_tasks(Some(docs.id), Some(TaskStatus::Planning), 0, None)
            .await
            .expect(b);
        assert_eq!(planning.len(), 3, "{b}");
        assert!(
            planning
                .iter()
                .all(|task| task.status == TaskStatus::Planning),
            "{b}"
        );
        assert_eq!(next, None, "{b}");

        let (pending, _) = t
            .store
            .list_tasks(None, Some(TaskStatus::Pending), 500, None)
            .await
            .expect(b);
        assert_eq!(pending.len(), 4 + 2, "{b}: all workspaces");
        let (all, _) = t.store.list_tasks(None, None, 1000, None).await.expect(b);
        assert_eq!(all.len(), 9, "{b}");
        let (code_tasks, _) = t
            .store
            .list_tasks(Some(code.id), None, 0, None)
            .await
            .expect(b);
        assert!(
            code_tasks.iter().all(|task| task.workspace_id == code.id),
            "{b}"
        );
        assert_eq!(code_tasks.len(), 2, "{b}");

        let err = t
            .store
            .list_tasks(None, None, 3, Some("not-a-token".into()))
            .await
            .expect_err(b);
        assert!(
            matches!(
                err,
                StoreError::Domain(DomainError::Invalid {
                    field: "page_token",
                    ..
                })
            ),
            "{b}: {err}"
        );
        let missing = WorkspaceId::new();
        assert_eq!(
            t.store.list_tasks(Some(missing), None, 3, None).await,
            Err(StoreError::not_found("workspace", missing)),
            "{b}"
        );
    }
}

/// A page of large tasks ends at its bytes whatever the page size asked, with
/// a token for the rest: 40 tasks of 60 KB come in pages of at most 1 MiB.
#[tokio::test]
async fn pages_of_large_tasks_end_at_their_bytes() {
    for t in test_stores().await {
        let b = t.backend;
        let ws = t.workspace("big").await;
        let large = "x".repeat(60 * 1024);
        for i in 0..40 {
            t.store
                .create_task(ws.id, format!("{i} {large}"), source())
                .await
                .expect(b);
        }
        let mut token = None;
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let (tasks, next) = t
                .store
                .list_tasks(Some(ws.id), None, 500, token.clone())
                .await
                .expect(b);
            pages += 1;
            let bytes: usize = tasks.iter().map(|task| task.description.len()).sum();
            assert!(
                bytes <= crate::store::TASK_PAGE_BYTES,
                "{b}: a page of {} tasks holds {bytes} bytes",
                tasks.len()
            );
            seen += tasks.len();
            match next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, 40, "{b}: every task once");
        assert!(pages >= 3, "{b}: 2.4 MB of tasks came in {pages} pages");
    }
}

/// The task as its row says now, read past the store's cache.
async fn row_of(t: &super::TestStore, id: TaskId) -> Option<crate::domain::Task> {
    use crate::store::rows::TaskRow;
    use crate::store::schema::tasks;
    use diesel::prelude::*;
    t.store
        .with_conn(move |conn| {
            let row: Option<TaskRow> = tasks::table
                .find(id.to_string())
                .select(TaskRow::as_select())
                .first(conn)
                .optional()
                .map_err(|e| StoreError::Database(e.to_string()))?;
            row.map(TaskRow::into_domain).transpose()
        })
        .await
        .expect("the task's row")
}

#[tokio::test]
async fn a_task_read_again_after_a_change_or_a_delete_is_what_the_database_holds() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        for change in [TaskStatus::Planning, TaskStatus::Planned] {
            // Read twice (the second read is the one a cache would answer).
            t.store.get_task(task.id).await.expect(b);
            t.store.get_task(task.id).await.expect(b);
            t.store
                .change_task(task.id, move_to(change))
                .await
                .expect(b);
            let read = t.store.get_task(task.id).await.expect(b);
            assert_eq!(read.status, change, "{b}");
            assert_eq!(Some(read), row_of(&t, task.id).await, "{b}");
        }
        t.store
            .change_task_runs(task.id, |task, _| {
                task.description = "changed with its runs".into();
                Ok(Vec::new())
            })
            .await
            .expect(b);
        let read = t.store.get_task(task.id).await.expect(b);
        assert_eq!(read.description, "changed with its runs", "{b}");
        assert_eq!(Some(read), row_of(&t, task.id).await, "{b}");

        t.store
            .change_task(task.id, move_to(TaskStatus::Canceled))
            .await
            .expect(b);
        t.store.get_task(task.id).await.expect(b);
        t.store.delete_task(task.id).await.expect(b);
        let err = t.store.get_task(task.id).await.expect_err(b);
        assert!(
            matches!(err, StoreError::NotFound { what: "task", .. }),
            "{b}: {err}"
        );
    }
}

/// A recorded tool call changes only its task's history end, time and
/// count of calls (written by a statement kept prepared); the row holds them
/// after each call, and a change of anything else after it is written whole.
#[tokio::test]
async fn a_recorded_call_saves_the_tasks_count_sequence_and_time() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let call = || {
            vec![(
                EventKind::ToolExecuted,
                json!({"tool": "file.read", "status": "ok"}),
            )]
        };
        for n in 1..=3_u64 {
            t.store.append_events(task.id, call()).await.expect(b);
            let row = row_of(&t, task.id).await.expect(b);
            assert_eq!(row.budget.tool_calls, n, "{b}: the count of calls");
            assert_eq!(
                row.last_sequence,
                task.last_sequence + n,
                "{b}: the history's end"
            );
            assert!(row.updated_ms >= task.updated_ms, "{b}: its time");
            assert_eq!(row.description, task.description, "{b}");
            assert_eq!(row.status, task.status, "{b}");
            assert_eq!(
                Some(t.store.get_task(task.id).await.expect(b)),
                Some(row),
                "{b}"
            );
        }
        // A call and another change in one transaction: all of it is saved.
        t.store
            .change_task(task.id, |task| {
                task.description = "changed with a call".into();
                Ok(vec![(
                    EventKind::ToolExecuted,
                    json!({"tool": "file.read"}),
                )])
            })
            .await
            .expect(b);
        let row = row_of(&t, task.id).await.expect(b);
        assert_eq!(row.description, "changed with a call", "{b}");
        assert_eq!(row.budget.tool_calls, 4, "{b}");
        assert_eq!(row.last_sequence, task.last_sequence + 4, "{b}");
    }
}

/// On PostgreSQL a recorded call announces its task's change to the other
/// replicas (`<task> <sequence>` on the task channel), as every task write
/// does: their watchers follow the call.
#[tokio::test]
async fn a_recorded_call_is_announced_to_the_other_replicas() {
    use diesel::connection::SimpleConnection as _;
    use diesel::{Connection as _, PgConnection};
    for t in test_stores().await {
        if t.backend != "postgres" {
            continue;
        }
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let mut listener = PgConnection::establish(&t.url).expect("a listening connection");
        listener
            .batch_execute(&format!("LISTEN {}", crate::store::TASK_CHANNEL))
            .expect("listen");
        let events = t
            .store
            .append_events(
                task.id,
                vec![(EventKind::ToolExecuted, json!({"tool": "file.read"}))],
            )
            .await
            .expect(b);
        let want = format!("{} {}", task.id, events[0].sequence);
        let mut heard = Vec::new();
        // Each query reads what the server has sent the listener since.
        for _ in 0..1000 {
            listener.batch_execute("SELECT 1").expect("a query");
            heard.extend(
                listener
                    .notifications_iter()
                    .filter_map(Result::ok)
                    .filter(|n| n.channel == crate::store::TASK_CHANNEL)
                    .map(|n| n.payload),
            );
            if heard.contains(&want) {
                break;
            }
        }
        assert!(heard.contains(&want), "{b}: heard {heard:?}, not {want}");
    }
}

#[tokio::test]
async fn a_read_that_raced_a_write_does_not_keep_the_older_task() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        // A reader misses and reads the row; before it stores what it read,
        // a write of the task commits.
        let seen = t.store.tasks.get(task.id).expect_err(b);
        let before = row_of(&t, task.id).await.expect(b);
        t.store
            .change_task(task.id, move_to(TaskStatus::Planning))
            .await
            .expect(b);
        t.store.tasks.store(seen, &before, 100);
        assert_eq!(
            t.store.get_task(task.id).await.expect(b).status,
            TaskStatus::Planning,
            "{b}"
        );
    }
}

#[tokio::test]
async fn the_task_cache_keeps_at_most_its_bytes_dropping_the_oldest() {
    use crate::store::task_cache::TaskCache;
    let t = test_stores().await.remove(0);
    let (_, task) = t.workspace_with_task("docs").await;
    let cache = TaskCache::enabled(1000);
    let mut ids = Vec::new();
    for _ in 0..10 {
        let mut one = task.clone();
        one.id = TaskId::new();
        let seen = cache.get(one.id).expect_err("not stored yet");
        cache.store(seen, &one, 300);
        ids.push(one.id);
    }
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            cache.get(*id).is_ok(),
            i >= 7,
            "task {i} of 10 (300 bytes each, 1000 kept)"
        );
    }
    // Storing one again does not count it twice.
    let mut again = task.clone();
    again.id = ids[9];
    let seen = cache.get(TaskId::new()).expect_err("a task never stored");
    cache.store(seen, &again, 300);
    assert!(
        cache.get(ids[7]).is_ok(),
        "the 8th task is still within 1000 bytes"
    );
    // A task larger than the whole cache is not kept.
    let mut large = task.clone();
    large.id = TaskId::new();
    let seen = cache.get(large.id).expect_err("not stored yet");
    cache.store(seen, &large, 1001);
    assert!(cache.get(large.id).is_err());
    assert!(cache.get(ids[9]).is_ok());
}
