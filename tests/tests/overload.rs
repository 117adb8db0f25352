//! Overload slows runs, never fails them. A thousand API-agent runs wait at
//! a gate in front of their model and are let through at once; each then
//! reads a file four times (four tool calls in one answer) and reports.
//! Every run completes: none failed, none stopped because the replica could
//! not renew its leases while its runs kept the database busy, and no task
//! is left `active` without a run. Leases are short (three seconds), so a
//! heartbeat that waits behind the runs' database work for two seconds
//! fences the replica.
//!
//! Before the leases had a thread of their own, the heartbeat waited in
//! tokio's blocking pool behind the runs' database calls: the replica fenced
//! itself twice and handed on 334 of its 1,000 runs (300 runs were not
//! enough to show it). `CHORUS_TEST_OVERLOAD_RUNS` sets the count (1,000 by
//! default: about a minute per database here).

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{history, settled};
use chorus_tests::db::databases;
use chorus_tests::overload::ReadingRuns;

fn runs() -> usize {
    std::env::var("CHORUS_TEST_OVERLOAD_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_released_at_once_all_complete_with_none_failed_or_stuck() {
    let runs = runs();
    let data = tempfile::tempdir().expect("data");
    for db in databases(data.path()) {
        let mut load = ReadingRuns::plan(&db.url, &["--lease-secs", "3"], runs, false).await;
        load.start_all().await;
        // Every run waits for its model's first answer; then all go at once.
        load.release().await;
        let admin = &mut load.admin;

        // A run its replica stopped and resumed is one its load fenced: the
        // heartbeat waited behind the runs' work.
        let mut failed = Vec::new();
        let mut resumed = 0;
        for task in &load.tasks {
            let settled = settled(admin, &task.id).await;
            let events = history(admin, &task.id).await;
            let story: Vec<String> = events.iter().map(|e| e.kind.clone()).collect();
            if events.iter().any(|e| e.kind == "run_resumed") {
                resumed += 1;
            }
            if settled.status != "completed" {
                failed.push(format!("{}: {} {story:?}", task.id, settled.status));
            }
        }
        assert!(
            failed.is_empty(),
            "{}: {} of {runs} tasks did not complete: {:#?}",
            db.backend,
            failed.len(),
            &failed[..failed.len().min(5)]
        );
        assert_eq!(
            resumed, 0,
            "{}: the replica stopped runs of {resumed} tasks it could not keep the leases of",
            db.backend
        );
        let active = admin
            .list_tasks(pb::ListTasksRequest {
                status: "active".into(),
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        assert_eq!(active.tasks.len(), 0, "{}: tasks left active", db.backend);
        load.orchestrator.kill().await;
    }
}
