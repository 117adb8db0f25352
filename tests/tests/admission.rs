//! A replica drives at most `--max-running-runs` top-level runs at once.
//! One more is not started: it waits for a place, its task's history says
//! why (`run_queued`, naming the flag), GetStatus counts it, and it starts
//! when a run ends. A waiting run is canceled at once, with nothing started.
//! Against the orchestrator binary, API agents whose model holds their
//! first request at a gate; SQLite and (with `CHORUS_TEST_DATABASE_URL`)
//! PostgreSQL.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{data, history, settled, wait_for};
use chorus_tests::db::databases;
use chorus_tests::overload::ReadingRuns;

/// Runs started.
const RUNS: usize = 5;
/// Places (`--max-running-runs`).
const PLACES: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_the_limit_wait_for_a_place_and_all_complete() {
    let data_dir = tempfile::tempdir().expect("data");
    for db in databases(data_dir.path()) {
        let places = PLACES.to_string();
        let mut load =
            ReadingRuns::plan(&db.url, &["--max-running-runs", &places], RUNS, false).await;
        load.start_all().await;
        // Two runs reach their model; the others wait for a place.
        load.model.at_gate(PLACES).await;
        let mut queued = Vec::new();
        for task in &load.tasks {
            let events = wait_for(&mut load.admin, &task.id, |e| {
                e.kind == "run_queued" || e.kind == "agent_started"
            })
            .await;
            let last = events.last().expect("an event");
            if last.kind == "run_queued" {
                let reason = data(last)["reason"].as_str().unwrap_or_default().to_owned();
                assert!(
                    reason.contains("--max-running-runs") && reason.contains(&places),
                    "{}: the reason names the limit: {reason}",
                    db.backend
                );
                queued.push(task.id.clone());
            }
        }
        assert_eq!(
            queued.len(),
            RUNS - PLACES,
            "{}: {PLACES} runs started, the rest wait",
            db.backend
        );
        assert_eq!(
            queued_runs(&mut load.admin).await,
            RUNS - PLACES,
            "{}: GetStatus counts the waiting runs",
            db.backend
        );

        // A waiting run is canceled at once: nothing of it started.
        let canceled = queued.pop().expect("a waiting run");
        let task = load
            .admin
            .cancel_task(pb::CancelTaskRequest {
                task_id: canceled.clone(),
                reason: "not needed".into(),
                ..Default::default()
            })
            .await
            .expect("cancel a waiting run")
            .into_inner();
        assert_eq!(task.status, "canceled", "{}", db.backend);
        let story: Vec<String> = history(&mut load.admin, &canceled)
            .await
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert!(
            !story.iter().any(|k| k == "agent_started")
                && story.iter().any(|k| k == "run_canceled"),
            "{}: a canceled waiting run never started: {story:?}",
            db.backend
        );

        // The gate opens: the running ones finish, the waiting ones start in
        // their places and finish too.
        load.model.open_gate();
        for task in load.tasks.iter().filter(|t| t.id != canceled) {
            let done = settled(&mut load.admin, &task.id).await;
            let story: Vec<String> = history(&mut load.admin, &task.id)
                .await
                .into_iter()
                .map(|e| e.kind)
                .collect();
            assert_eq!(done.status, "completed", "{}: {story:?}", db.backend);
            if queued.contains(&task.id) {
                let waited = story.iter().position(|k| k == "run_queued");
                let started = story.iter().position(|k| k == "agent_started");
                assert!(
                    waited < started && waited.is_some(),
                    "{}: a waiting run starts after it waited: {story:?}",
                    db.backend
                );
            }
        }
        assert_eq!(queued_runs(&mut load.admin).await, 0, "{}", db.backend);
        load.orchestrator.kill().await;
    }
}

/// GetStatus's count of runs waiting for a place.
async fn queued_runs(admin: &mut chorus_tests::agents::Client) -> usize {
    admin
        .get_status(pb::GetStatusRequest::default())
        .await
        .expect("status")
        .into_inner()
        .queued_runs as usize
}
