//! A tool call recorded in one statement on PostgreSQL (`call_record`): the
//! same history, counts and budget events as the locked transaction, and
//! nothing written from a task that changed after it was read.

use diesel::prelude::*;
use serde_json::json;

use super::test_stores;
use crate::domain::{EventKind, TaskId, TaskStatus};
use crate::store::call_record::{Recorded, record_from};
use crate::store::rows::TaskRow;
use crate::store::schema::task_events;
use crate::store::tasks::read_task_row;
use crate::store::{Db, EventDraft};

fn call() -> Vec<EventDraft> {
    vec![(
        EventKind::ToolExecuted,
        json!({"tool": "file.read", "status": "ok"}),
    )]
}

async fn raw_row(t: &super::TestStore, id: TaskId) -> TaskRow {
    t.store
        .with_conn(move |conn| read_task_row(conn, id))
        .await
        .expect("the task's row")
}

async fn event_count(t: &super::TestStore, id: TaskId) -> i64 {
    t.store
        .with_conn(move |conn| {
            task_events::table
                .filter(task_events::task_id.eq(id.to_string()))
                .count()
                .get_result(conn)
                .db()
        })
        .await
        .expect("the task's events")
}

/// Read, then another write of the task, then the call written from what was
/// read: the statement writes nothing and gives the call back, and the call
/// then recorded goes after the other write's event.
#[tokio::test]
async fn a_call_over_a_task_changed_since_it_was_read_writes_nothing() {
    for t in test_stores().await {
        if t.backend != "postgres" {
            continue;
        }
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        let stale = raw_row(&t, task.id).await;
        let comment = t
            .store
            .append_events(task.id, vec![(EventKind::CommentAdded, json!({"n": 1}))])
            .await
            .expect(b);
        let events_before = event_count(&t, task.id).await;

        let recorded: Recorded = t
            .store
            .with_conn(move |conn| record_from(conn, stale, call()))
            .await
            .expect(b);
        let given_back = recorded.expect_err("a call from a stale read is not written");
        assert_eq!(given_back, call(), "{b}: the call comes back whole");
        assert_eq!(
            event_count(&t, task.id).await,
            events_before,
            "{b}: no event"
        );
        let row = raw_row(&t, task.id).await.into_domain().expect(b);
        assert_eq!(row.budget.tool_calls, 0, "{b}: no call counted");
        assert_eq!(row.last_sequence, comment[0].sequence, "{b}");

        let events = t.store.append_events(task.id, call()).await.expect(b);
        assert_eq!(events.len(), 1, "{b}");
        assert_eq!(events[0].sequence, comment[0].sequence + 1, "{b}");
        let row = raw_row(&t, task.id).await.into_domain().expect(b);
        assert_eq!(row.budget.tool_calls, 1, "{b}");
        assert_eq!(row.last_sequence, events[0].sequence, "{b}");
    }
}

/// A planning task allowed five tool calls: the fourth warns (80 %), the
/// fifth fails it — on both backends, whichever path writes each call — and every call
/// is in the history, numbered without gaps.
#[tokio::test]
async fn calls_up_to_a_tool_call_budget_warn_then_stop_on_every_backend() {
    for t in test_stores().await {
        let b = t.backend;
        let (_, task) = t.workspace_with_task("docs").await;
        t.store
            .change_task(task.id, |task| {
                task.budget.limits.tool_calls = Some(5);
                task.status = TaskStatus::Planning;
                Ok(vec![(
                    EventKind::StatusChanged,
                    json!({"from": "pending", "to": "planning"}),
                )])
            })
            .await
            .expect(b);
        let mut kinds = Vec::new();
        let mut sequences = Vec::new();
        for _ in 0..5 {
            for event in t.store.append_events(task.id, call()).await.expect(b) {
                kinds.push(event.kind);
                sequences.push(event.sequence);
            }
        }
        let calls = kinds
            .iter()
            .filter(|k| **k == EventKind::ToolExecuted)
            .count();
        assert_eq!(calls, 5, "{b}: every call recorded: {kinds:?}");
        let warned = kinds
            .iter()
            .position(|k| *k == EventKind::BudgetWarning)
            .unwrap_or_else(|| panic!("{b}: a warning at 80 %: {kinds:?}"));
        let exceeded = kinds
            .iter()
            .position(|k| *k == EventKind::BudgetExceeded)
            .unwrap_or_else(|| panic!("{b}: the limit reached: {kinds:?}"));
        assert!(warned < exceeded, "{b}: {kinds:?}");
        assert_eq!(
            kinds.last(),
            Some(&EventKind::StatusChanged),
            "{b}: the task fails at its limit: {kinds:?}"
        );
        assert!(
            sequences.windows(2).all(|w| w[1] == w[0] + 1),
            "{b}: no gaps: {sequences:?}"
        );
        let row = raw_row(&t, task.id).await.into_domain().expect(b);
        assert_eq!(row.budget.tool_calls, 5, "{b}");
        assert_eq!(row.last_sequence, *sequences.last().expect(b), "{b}");
    }
}
