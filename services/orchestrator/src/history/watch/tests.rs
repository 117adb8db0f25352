use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::*;
use crate::domain::now_ms;

/// An in-memory event store that announces each append on the hub after "commit".
#[derive(Default)]
struct Memory {
    events: Mutex<HashMap<TaskId, Vec<Event>>>,
    /// Bytes of event data a batch ends at, past its first event, as the store's.
    batch_bytes: Option<usize>,
}

impl Memory {
    fn append(
        &self,
        hub: &EventHub,
        task: TaskId,
        kind: EventKind,
        data: serde_json::Value,
    ) -> Event {
        let event = {
            let mut events = self.events.lock().expect("lock");
            let list = events.entry(task).or_default();
            let event = Event {
                task_id: task,
                sequence: list.len() as u64 + 1,
                kind,
                data,
                at_ms: now_ms(),
            };
            list.push(event.clone());
            event
        };
        hub.publish(std::slice::from_ref(&event));
        event
    }

    fn comment(&self, hub: &EventHub, task: TaskId, n: usize) {
        self.append(
            hub,
            task,
            EventKind::CommentAdded,
            json!({ "text": format!("comment {n}") }),
        );
    }

    fn finish(&self, hub: &EventHub, task: TaskId) {
        self.append(
            hub,
            task,
            EventKind::StatusChanged,
            json!({ "from": "active", "to": "completed" }),
        );
    }
}

impl EventSource for Memory {
    type Error = String;

    async fn events_after(
        &self,
        task: TaskId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>, String> {
        let events = self.events.lock().expect("lock");
        let mut bytes = 0;
        Ok(events
            .get(&task)
            .map(|list| {
                list.iter()
                    .filter(|e| e.sequence > after)
                    .take(limit as usize)
                    .enumerate()
                    .take_while(|(i, e)| {
                        bytes += e.data.to_string().len();
                        *i == 0 || self.batch_bytes.is_none_or(|max| bytes <= max)
                    })
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Settled: a final status, and every run_opened matched by the run's end.
    async fn settled(&self, task: TaskId) -> Result<bool, String> {
        let events = self.events.lock().expect("lock");
        let Some(list) = events.get(&task) else {
            return Ok(false);
        };
        let run = |e: &Event| e.data["run_id"].as_str().map(str::to_owned);
        let opened: Vec<_> = list
            .iter()
            .filter(|e| e.kind == EventKind::RunOpened)
            .filter_map(run)
            .collect();
        let ended: Vec<_> = list
            .iter()
            .filter(|e| ends_run(e))
            .filter_map(run)
            .collect();
        Ok(list.iter().any(ends_task) && opened.iter().all(|r| ended.contains(r)))
    }

    /// Waiting for a person: the last status entered needs one, and every
    /// run_opened is matched by the run's end.
    async fn needs_you(&self, task: TaskId) -> Result<Option<u64>, String> {
        let events = self.events.lock().expect("lock");
        let Some(list) = events.get(&task) else {
            return Ok(None);
        };
        let needed = list
            .iter()
            .rev()
            .find_map(Event::status_entered)
            .is_some_and(|s| s.needs_you().is_some());
        let run = |e: &Event| e.data["run_id"].as_str().map(str::to_owned);
        let open = list
            .iter()
            .filter(|e| e.kind == EventKind::RunOpened)
            .filter_map(run)
            .any(|r| {
                !list
                    .iter()
                    .filter(|e| ends_run(e))
                    .filter_map(run)
                    .any(|x| x == r)
            });
        Ok((needed && !open).then_some(list.len() as u64))
    }
}

struct Fixture {
    memory: Arc<Memory>,
    hub: Arc<EventHub>,
    task: TaskId,
}

type Watcher = (
    mpsc::Receiver<Result<Event, String>>,
    tokio::task::JoinHandle<WatchEnd>,
    CancellationToken,
);

impl Fixture {
    fn new() -> Self {
        Self {
            memory: Arc::new(Memory::default()),
            hub: Arc::new(EventHub::new()),
            task: TaskId::new(),
        }
    }

    /// Starts a watcher; returns its receiver, how it ended, and its cancel token.
    fn watch(&self, after: u64, follow: bool, capacity: usize) -> Watcher {
        self.watch_until(after, settled_unless(follow), capacity)
    }

    fn watch_until(&self, after: u64, until: Until, capacity: usize) -> Watcher {
        let (tx, rx) = mpsc::channel(capacity);
        let cancel = CancellationToken::new();
        let (memory, hub, task, token) = (
            Arc::clone(&self.memory),
            Arc::clone(&self.hub),
            self.task,
            cancel.clone(),
        );
        let handle = tokio::spawn(async move {
            watch_task(memory.as_ref(), &hub, task, after, until, tx, token).await
        });
        (rx, handle, cancel)
    }
}

/// Ends once settled, unless following.
fn settled_unless(follow: bool) -> Until {
    Until {
        settled: !follow,
        needed: false,
    }
}

async fn sequences(mut rx: mpsc::Receiver<Result<Event, String>>) -> Vec<u64> {
    let mut seen = Vec::new();
    while let Some(event) = rx.recv().await {
        seen.push(event.expect("no source error").sequence);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_from_a_cursor_then_live_has_no_gap_and_no_duplicate() {
    let fx = Fixture::new();
    for n in 0..10 {
        fx.memory.comment(&fx.hub, fx.task, n);
    }
    let (rx, handle, _cancel) = fx.watch(3, false, 8);
    let (memory, hub, task) = (Arc::clone(&fx.memory), Arc::clone(&fx.hub), fx.task);
    let writer = tokio::spawn(async move {
        for n in 10..1000 {
            memory.comment(&hub, task, n);
            if n % 50 == 0 {
                tokio::task::yield_now().await;
            }
        }
        memory.finish(&hub, task);
    });
    let seen = sequences(rx).await;
    writer.await.expect("writer");
    assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);
    assert_eq!(seen, (4..=1001).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_cut_short_by_their_bytes_replay_every_event_once_in_order() {
    let fx = Fixture {
        memory: Arc::new(Memory {
            batch_bytes: Some(2500),
            ..Memory::default()
        }),
        ..Fixture::new()
    };
    // Events of about 1 KB: the store's batches hold two, and one alone when large.
    for n in 0..20 {
        let text = if n % 7 == 0 { 5000 } else { 1000 };
        fx.memory.append(
            &fx.hub,
            fx.task,
            EventKind::CommentAdded,
            json!({ "text": "x".repeat(text), "n": n }),
        );
    }
    fx.memory.finish(&fx.hub, fx.task);
    for after in [0, 5] {
        let (rx, handle, _cancel) = fx.watch(after, false, 4);
        assert_eq!(sequences(rx).await, (after + 1..=21).collect::<Vec<u64>>());
        assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);
    }
}

/// A store whose task is finished just after its first `settled` answer (a
/// commit racing the watcher's check).
struct FinishedAfterTheCheck {
    memory: Arc<Memory>,
    hub: Arc<EventHub>,
    checked: std::sync::atomic::AtomicBool,
}

impl EventSource for FinishedAfterTheCheck {
    type Error = String;

    async fn events_after(
        &self,
        task: TaskId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>, String> {
        self.memory.events_after(task, after, limit).await
    }

    async fn needs_you(&self, task: TaskId) -> Result<Option<u64>, String> {
        self.memory.needs_you(task).await
    }

    async fn settled(&self, task: TaskId) -> Result<bool, String> {
        let answer = self.memory.settled(task).await;
        if !self.checked.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.memory.finish(&self.hub, task);
        }
        answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_status_committed_during_the_replay_ends_the_watch() {
    let fx = Fixture::new();
    for n in 0..3 {
        fx.memory.comment(&fx.hub, fx.task, n);
    }
    let source = FinishedAfterTheCheck {
        memory: Arc::clone(&fx.memory),
        hub: Arc::clone(&fx.hub),
        checked: false.into(),
    };
    let (tx, rx) = mpsc::channel(8);
    let watch = watch_task(
        &source,
        &fx.hub,
        fx.task,
        0,
        settled_unless(false),
        tx,
        CancellationToken::new(),
    );
    // A safety net, not a timing assertion: without the fix the watch never ends.
    let end = tokio::time::timeout(std::time::Duration::from_secs(60), watch)
        .await
        .expect("the watch ends once the task is finished");
    assert_eq!(end, WatchEnd::TaskFinished);
    assert_eq!(sequences(rx).await, [1, 2, 3, 4]);
}

/// A store where the run's end is committed between the watcher's replay
/// (which read the report that completed the task) and its check that the
/// task is settled: another replica's commit, seen by no hub here.
struct RunEndsAfterTheReplay {
    memory: Arc<Memory>,
    run: String,
    replays: std::sync::atomic::AtomicUsize,
}

impl EventSource for RunEndsAfterTheReplay {
    type Error = String;

    async fn events_after(
        &self,
        task: TaskId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>, String> {
        self.memory.events_after(task, after, limit).await
    }

    async fn needs_you(&self, task: TaskId) -> Result<Option<u64>, String> {
        self.memory.needs_you(task).await
    }

    async fn settled(&self, task: TaskId) -> Result<bool, String> {
        // The first check (before the replay) says no; then the run ends,
        // committed elsewhere: no hub hears it.
        if self
            .replays
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            let elsewhere = EventHub::new();
            self.memory.append(
                &elsewhere,
                task,
                EventKind::AgentCompleted,
                json!({ "run_id": self.run }),
            );
        }
        self.memory.settled(task).await
    }
}

#[tokio::test]
async fn a_runs_end_committed_between_the_replay_and_the_settled_check_is_delivered() {
    let fx = Fixture::new();
    let run = "the-run".to_owned();
    fx.memory.append(
        &fx.hub,
        fx.task,
        EventKind::RunOpened,
        json!({ "run_id": run }),
    );
    fx.memory.finish(&fx.hub, fx.task);
    let source = RunEndsAfterTheReplay {
        memory: Arc::clone(&fx.memory),
        run,
        replays: 0.into(),
    };
    let (tx, rx) = mpsc::channel(8);
    let end = watch_task(
        &source,
        &fx.hub,
        fx.task,
        0,
        settled_unless(false),
        tx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(end, WatchEnd::TaskFinished);
    assert_eq!(
        sequences(rx).await,
        [1, 2, 3],
        "the run's end is the last event seen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_watchers_each_see_every_event_once() {
    let fx = Fixture::new();
    fx.memory.comment(&fx.hub, fx.task, 0);
    // Small channels make slow watchers lag behind the hub and fall back to the store.
    let watchers: Vec<Watcher> = (0..50).map(|i| fx.watch(0, false, 1 + i % 4)).collect();
    let (memory, hub, task) = (Arc::clone(&fx.memory), Arc::clone(&fx.hub), fx.task);
    let writer = tokio::spawn(async move {
        for n in 1..2000 {
            memory.comment(&hub, task, n);
        }
        memory.finish(&hub, task);
    });
    let expected: Vec<u64> = (1..=2001).collect();
    for (rx, handle, _cancel) in watchers {
        assert_eq!(sequences(rx).await, expected);
        assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);
    }
    writer.await.expect("writer");
}

#[tokio::test]
async fn a_finished_task_ends_the_watch_after_replay_unless_following() {
    let fx = Fixture::new();
    fx.memory.comment(&fx.hub, fx.task, 0);
    fx.memory.finish(&fx.hub, fx.task);

    let (rx, handle, _cancel) = fx.watch(2, false, 8);
    assert!(sequences(rx).await.is_empty());
    assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);

    let (mut rx, handle, cancel) = fx.watch(0, true, 8);
    assert_eq!(rx.recv().await.expect("1").expect("ok").sequence, 1);
    assert_eq!(rx.recv().await.expect("2").expect("ok").sequence, 2);
    fx.memory.comment(&fx.hub, fx.task, 1);
    assert_eq!(
        rx.recv().await.expect("3").expect("ok").sequence,
        3,
        "a follower sees events after the end"
    );
    cancel.cancel();
    assert_eq!(handle.await.expect("watcher"), WatchEnd::Cancelled);
}

#[tokio::test]
async fn a_watch_waits_past_the_final_status_for_the_run_to_end() {
    let fx = Fixture::new();
    let run = json!({ "run_id": "r1", "agent": "writer" });
    fx.memory
        .append(&fx.hub, fx.task, EventKind::RunOpened, run.clone());
    let (mut rx, handle, _cancel) = fx.watch(0, false, 8);
    assert_eq!(rx.recv().await.expect("1").expect("ok").sequence, 1);
    // The report completes the task; the run is still going.
    fx.memory.finish(&fx.hub, fx.task);
    assert_eq!(rx.recv().await.expect("2").expect("ok").sequence, 2);
    fx.memory.comment(&fx.hub, fx.task, 1);
    fx.memory
        .append(&fx.hub, fx.task, EventKind::AgentCompleted, run);
    assert_eq!(
        sequences(rx).await,
        [3, 4],
        "what the run records after the final status, up to its end"
    );
    assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);

    // Replaying the settled task gives everything, then ends.
    let (rx, handle, _cancel) = fx.watch(0, false, 8);
    assert_eq!(sequences(rx).await, [1, 2, 3, 4]);
    assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);
}

impl Fixture {
    fn status(&self, from: &str, to: &str) {
        self.memory.append(
            &self.hub,
            self.task,
            EventKind::StatusChanged,
            json!({ "from": from, "to": to }),
        );
    }

    fn run(&self, kind: EventKind, run: &str) {
        self.memory
            .append(&self.hub, self.task, kind, json!({ "run_id": run }));
    }
}

const UNTIL_NEEDED: Until = Until {
    settled: true,
    needed: true,
};

#[tokio::test]
async fn a_watch_until_needed_ends_after_the_question_and_the_planners_end() {
    let fx = Fixture::new();
    fx.memory.comment(&fx.hub, fx.task, 0);
    fx.status("pending", "planning");
    fx.run(EventKind::RunOpened, "planner");
    let (mut rx, handle, _cancel) = fx.watch_until(0, UNTIL_NEEDED, 8);
    for expected in 1..=3 {
        assert_eq!(
            rx.recv().await.expect("event").expect("ok").sequence,
            expected
        );
    }
    // The planner asks: the task waits for a person once the planner's run ends.
    fx.status("planning", "awaiting_input");
    let asked = rx.recv().await.expect("4").expect("ok");
    assert_eq!(asked.sequence, 4);
    assert!(asked.needs_you().is_some(), "{asked:?}");
    fx.run(EventKind::AgentCompleted, "planner");
    assert_eq!(sequences(rx).await, [5], "the planner's end, then the end");
    assert_eq!(handle.await.expect("watcher"), WatchEnd::NeedsYou);

    // Watching a task that waits already: the replay, then the end.
    let (rx, handle, _cancel) = fx.watch_until(2, UNTIL_NEEDED, 8);
    assert_eq!(sequences(rx).await, [3, 4, 5]);
    assert_eq!(handle.await.expect("watcher"), WatchEnd::NeedsYou);

    // Without until_needed the same watch goes on.
    let (mut rx, handle, cancel) = fx.watch(0, false, 8);
    for expected in 1..=5 {
        assert_eq!(
            rx.recv().await.expect("event").expect("ok").sequence,
            expected
        );
    }
    fx.memory.comment(&fx.hub, fx.task, 1);
    assert_eq!(rx.recv().await.expect("6").expect("ok").sequence, 6);
    cancel.cancel();
    assert_eq!(handle.await.expect("watcher"), WatchEnd::Cancelled);
}

#[tokio::test]
async fn a_question_answered_before_the_watch_does_not_end_it() {
    let fx = Fixture::new();
    fx.status("pending", "planning");
    fx.status("planning", "awaiting_input");
    fx.status("awaiting_input", "planning");
    fx.status("planning", "planned");
    fx.status("planned", "active");
    fx.run(EventKind::RunOpened, "writer");
    let (mut rx, handle, _cancel) = fx.watch_until(0, UNTIL_NEEDED, 8);
    for expected in 1..=6 {
        assert_eq!(
            rx.recv().await.expect("event").expect("ok").sequence,
            expected
        );
    }
    // The agent ends without a report: the task waits for a person.
    fx.run(EventKind::RunFailed, "writer");
    fx.status("active", "waiting");
    assert_eq!(sequences(rx).await, [7, 8]);
    assert_eq!(handle.await.expect("watcher"), WatchEnd::NeedsYou);
}

#[tokio::test]
async fn a_watch_until_needed_still_ends_at_a_final_status() {
    let fx = Fixture::new();
    fx.status("pending", "canceled");
    let (rx, handle, _cancel) = fx.watch_until(0, UNTIL_NEEDED, 8);
    assert_eq!(sequences(rx).await, [1]);
    assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);
}

#[tokio::test]
async fn a_watch_stops_when_its_receiver_goes_away() {
    let fx = Fixture::new();
    fx.memory.comment(&fx.hub, fx.task, 0);
    let (mut rx, handle, _cancel) = fx.watch(0, false, 8);
    assert_eq!(rx.recv().await.expect("1").expect("ok").sequence, 1);
    drop(rx);
    assert_eq!(handle.await.expect("watcher"), WatchEnd::ReceiverGone);
    fx.memory.comment(&fx.hub, fx.task, 1);
    assert_eq!(
        fx.hub.watched_tasks(),
        0,
        "the hub forgets tasks nobody watches"
    );
}

/// The same guarantee against the real store, on every configured backend: 50
/// watchers start from a cursor while a writer commits events, and each sees
/// every event after its cursor exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_watchers_of_the_store_see_every_committed_event_once() {
    use crate::domain::policy::change_status;
    use crate::store::tests::{name_of, source, test_stores};

    for t in test_stores().await {
        let store = t.store.clone();
        let root = t.dir.path().join("ws");
        std::fs::create_dir_all(&root).expect("root");
        let workspace = store
            .create_workspace(name_of("watched"), &root.display().to_string())
            .await
            .expect("workspace");
        let (task, _) = store
            .create_task(workspace.id, "watch me".to_owned(), source())
            .await
            .expect("task");
        let hub = Arc::new(EventHub::new());
        let watchers: Vec<_> = (0..50u64)
            .map(|i| {
                let (tx, rx) = mpsc::channel(1 + (i as usize % 4));
                let (store, hub) = (store.clone(), Arc::clone(&hub));
                let cursor = i % 3;
                let handle = tokio::spawn(async move {
                    watch_task(
                        &store,
                        &hub,
                        task.id,
                        cursor,
                        settled_unless(false),
                        tx,
                        CancellationToken::new(),
                    )
                    .await
                });
                (cursor, rx, handle)
            })
            .collect();
        let (writer_store, writer_hub) = (store.clone(), Arc::clone(&hub));
        let writer = tokio::spawn(async move {
            for n in 0..200 {
                let events = writer_store
                    .append_events(task.id, vec![(EventKind::CommentAdded, json!({ "n": n }))])
                    .await
                    .expect("append");
                writer_hub.publish(&events);
            }
            let (_, events) = writer_store
                .change_task(task.id, |task| {
                    Ok(vec![change_status(
                        task,
                        TaskStatus::Canceled,
                        Some("done watching".into()),
                    )?])
                })
                .await
                .expect("cancel");
            writer_hub.publish(&events);
        });
        // 1 task_created + 200 comments + 1 status_changed.
        for (cursor, rx, handle) in watchers {
            let seen = sequences_of_store(rx).await;
            assert_eq!(
                seen,
                ((cursor + 1)..=202).collect::<Vec<u64>>(),
                "{} watcher from {cursor}",
                t.backend
            );
            assert_eq!(handle.await.expect("watcher"), WatchEnd::TaskFinished);
        }
        writer.await.expect("writer");
    }
}

async fn sequences_of_store(
    mut rx: mpsc::Receiver<Result<Event, crate::store::StoreError>>,
) -> Vec<u64> {
    let mut seen = Vec::new();
    while let Some(event) = rx.recv().await {
        seen.push(event.expect("no store error").sequence);
    }
    seen
}
