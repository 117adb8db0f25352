//! WatchTask: replay, then live events, in order; the end of the stream.

use tokio_stream::StreamExt;

use super::super::TaskEventStream;
use super::*;

async fn watch(f: &Fixture, task: &pb::Task, after_sequence: u64, follow: bool) -> TaskEventStream {
    f.svc
        .watch_task(Request::new(pb::WatchTaskRequest {
            task_id: task.id.clone(),
            after_sequence,
            follow,
            until_needed: false,
        }))
        .await
        .unwrap_or_else(|e| panic!("{}: watch: {e}", f.backend()))
        .into_inner()
}

/// The next item of the stream; `None` when it ended.
async fn next(stream: &mut TaskEventStream) -> Option<Result<pb::TaskEvent, Status>> {
    tokio::time::timeout(STREAM_TIMEOUT, stream.next())
        .await
        .expect("the stream neither sent nor ended")
}

async fn next_event(stream: &mut TaskEventStream, b: &str) -> pb::TaskEvent {
    next(stream)
        .await
        .unwrap_or_else(|| panic!("{b}: the stream ended"))
        .unwrap_or_else(|e| panic!("{b}: {e}"))
}

fn to(event: &pb::TaskEvent) -> String {
    let data = chorus_proto::json::from_struct(event.data.clone().unwrap_or_default());
    data.get("to")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_watch_replays_then_follows_live_changes_and_ends_with_the_task() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        f.set_status(&task, "planning").await.expect(b);

        let mut stream = watch(&f, &task, 0, false).await;
        // Replay: what was committed before the watch started.
        let created = next_event(&mut stream, b).await;
        assert_eq!(
            (created.sequence, created.kind.as_str()),
            (1, "task_created"),
            "{b}"
        );
        assert_eq!(to(&next_event(&mut stream, b).await), "planning", "{b}");

        // Live: each change arrives, in order, as it is committed.
        for (sequence, status) in [(3, "planned"), (4, "active"), (5, "completed")] {
            f.set_status(&task, status).await.expect(b);
            let event = next_event(&mut stream, b).await;
            assert_eq!(event.sequence, sequence, "{b}");
            assert_eq!(event.task_id, task.id, "{b}");
            assert_eq!(to(&event), status, "{b}");
        }
        assert!(
            next(&mut stream).await.is_none(),
            "{b}: ends after completed"
        );

        // Resuming after a sequence number replays only what came after it.
        let mut resumed = watch(&f, &task, 3, false).await;
        let sequences = [
            next_event(&mut resumed, b).await.sequence,
            next_event(&mut resumed, b).await.sequence,
        ];
        assert_eq!(sequences, [4, 5], "{b}");
        assert!(next(&mut resumed).await.is_none(), "{b}");
    }
}

#[tokio::test]
async fn a_followed_watch_stays_open_after_the_task_ends() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        f.set_status(&task, "failed").await.expect(b);

        let mut stream = watch(&f, &task, 0, true).await;
        assert_eq!(next_event(&mut stream, b).await.sequence, 1, "{b}");
        assert_eq!(to(&next_event(&mut stream, b).await), "failed", "{b}");
        // Still open: a retry of the failed task arrives on the same stream.
        f.set_status(&task, "pending").await.expect(b);
        let retried = next_event(&mut stream, b).await;
        assert_eq!(
            (retried.sequence, to(&retried).as_str()),
            (3, "pending"),
            "{b}"
        );

        // Shutdown ends it with UNAVAILABLE.
        f.state.shutdown.cancel();
        let end = next(&mut stream).await.expect("a last item");
        assert_eq!(end.expect_err(b).code(), Code::Unavailable, "{b}");
        assert!(next(&mut stream).await.is_none(), "{b}");
    }
}

#[tokio::test]
async fn watching_an_unknown_task_is_refused_up_front() {
    for f in fixtures().await {
        let b = f.backend();
        let err = f
            .svc
            .watch_task(Request::new(pb::WatchTaskRequest {
                task_id: crate::domain::TaskId::new().to_string(),
                after_sequence: 0,
                follow: true,
                until_needed: false,
            }))
            .await;
        assert_status(err.map(|_| ()), Code::NotFound, "task", b);
        let err = f
            .svc
            .watch_task(Request::new(pb::WatchTaskRequest::default()))
            .await;
        assert_status(err.map(|_| ()), Code::InvalidArgument, "task_id", b);
        assert_eq!(f.state.hub.watched_tasks(), 0, "{b}");
    }
}

async fn watch_until_needed(f: &Fixture, task: &pb::Task, after_sequence: u64) -> TaskEventStream {
    f.svc
        .watch_task(Request::new(pb::WatchTaskRequest {
            task_id: task.id.clone(),
            after_sequence,
            follow: false,
            until_needed: true,
        }))
        .await
        .unwrap_or_else(|e| panic!("{}: watch: {e}", f.backend()))
        .into_inner()
}

#[tokio::test]
async fn a_watch_until_needed_ends_where_a_person_must_act_and_says_what_to_do() {
    for f in fixtures().await {
        let b = f.backend();
        let ws = f.workspace("docs").await;
        let task = f.task(&ws, "write").await;
        f.set_status(&task, "planning").await.expect(b);

        let mut stream = watch_until_needed(&f, &task, 0).await;
        for _ in 1..=2 {
            let event = next_event(&mut stream, b).await;
            assert_eq!(event.needs_you, None, "{b}: {event:?}");
        }
        // The planner asks: the change says so, and the stream ends there.
        f.set_status(&task, "awaiting_input").await.expect(b);
        let asked = next_event(&mut stream, b).await;
        let needs = asked.needs_you.expect("the question needs a person");
        assert_eq!(needs.status, "awaiting_input", "{b}");
        assert!(
            needs.action.contains("SubmitAnswers"),
            "{b}: {}",
            needs.action
        );
        assert!(
            next(&mut stream).await.is_none(),
            "{b}: ends at the question"
        );

        // Answered and planned: a plan waits for someone to start it.
        f.set_status(&task, "planning").await.expect(b);
        let mut stream = watch_until_needed(&f, &task, 3).await;
        assert_eq!(next_event(&mut stream, b).await.sequence, 4, "{b}");
        f.set_status(&task, "planned").await.expect(b);
        let planned = next_event(&mut stream, b).await;
        assert!(
            planned
                .needs_you
                .expect("planned")
                .action
                .contains("StartTask"),
            "{b}"
        );
        assert!(next(&mut stream).await.is_none(), "{b}");

        // An agent ends without a report: waiting, with its reason.
        f.set_status(&task, "active").await.expect(b);
        f.svc
            .update_task_status(Request::new(pb::UpdateTaskStatusRequest {
                id: task.id.clone(),
                status: "waiting".into(),
                reason: "the agent stopped without a report".into(),
                ..Default::default()
            }))
            .await
            .expect(b);
        // Watching a task that waits already: the replay, then the end.
        let mut stream = watch_until_needed(&f, &task, 5).await;
        assert_eq!(next_event(&mut stream, b).await.sequence, 6, "{b}");
        let waiting = next_event(&mut stream, b).await.needs_you.expect("waiting");
        assert_eq!(
            (waiting.status.as_str(), waiting.reason.as_str()),
            ("waiting", "the agent stopped without a report"),
            "{b}"
        );
        assert!(next(&mut stream).await.is_none(), "{b}");

        // Without until_needed the same watch stays open.
        let mut open = watch(&f, &task, 7, false).await;
        f.set_status(&task, "completed").await.expect(b);
        assert_eq!(to(&next_event(&mut open, b).await), "completed", "{b}");
        assert!(next(&mut open).await.is_none(), "{b}: ends with the task");
    }
}
