//! Faults survived, not only fenced: replicas on one PostgreSQL, paused
//! (SIGSTOP), cut from the database through a proxy, killed, or held up by
//! a row a stuck transaction keeps locked. Each run goes on — resumed by
//! its own replica or another, never failed by the fault — and every call
//! that ends a run returns only once its processes are gone.

use std::cell::RefCell;

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{eventually, processes_with_arg_containing};
use chorus_tests::agents::{Client, data, handoff, history, planned_task, report, settled, start};
use chorus_tests::cluster::{Cluster, check_history};
use chorus_tests::faults::{
    REPORT_WHEN_RESUMED, behind_a_proxy, fence_up_of, freeze_tree, lease_of, lock_task_row,
    no_postgres, now_ms, session, stubborn_run_on,
};
use nix::sys::signal::Signal;
use tonic_health::pb::health_check_response::ServingStatus;

/// `kind` of each event, with the reason of those that end runs.
fn story(events: &[pb::TaskEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match data(e)["reason"].as_str() {
            Some(reason) => format!("{}: {reason}", e.kind),
            None => e.kind.clone(),
        })
        .collect()
}

/// The task completed, no run of it failed, and `resumed` runs were resumed.
async fn completed_after_resuming(client: &mut Client, task: &str, resumed: usize) {
    let settled = settled(client, task).await;
    let events = history(client, task).await;
    assert_eq!(settled.status, "completed", "{:#?}", story(&events));
    assert!(
        !events
            .iter()
            .any(|e| e.kind == "run_failed" || e.kind == "run_interrupted"),
        "a fault ended a run: {:#?}",
        story(&events)
    );
    assert_eq!(
        events.iter().filter(|e| e.kind == "run_resumed").count(),
        resumed,
        "{:#?}",
        story(&events)
    );
    check_history(&events);
}

/// The id of the task's first run.
async fn first_run(client: &mut Client, task: &str) -> String {
    let runs = chorus_tests::agents::runs_of(client, task, "").await;
    runs.first().expect("a run").id.clone()
}

/// Every replica paused past its fence (a host or VM suspended): their runs'
/// processes die by their launchers' hand; when the replicas go on, every run
/// is resumed — a root run on each replica, and a handoff's parent and child
/// — none failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_of_replicas_paused_past_their_fences_are_resumed_not_failed() {
    let Some(cluster) = Cluster::start(3, 3).await else {
        return no_postgres();
    };
    let mut admin = cluster.client(0).await;
    let ws = cluster.team(&mut admin).await;
    let pid = std::process::id();
    let mut markers = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let marker = format!("paused-all-{i}-{pid}");
        tasks.push(stubborn_run_on(&cluster, i, &ws, &marker, Some(REPORT_WHEN_RESUMED)).await);
        markers.push(marker);
    }
    // A handoff whose child holds stubborn children; parent and child each
    // report when resumed.
    let child_marker = format!("paused-child-{pid}");
    let child = [
        format!("fake: say {child_marker}"),
        chorus_tests::flows::stubborn(&child_marker),
        REPORT_WHEN_RESUMED.to_owned(),
    ];
    let parent = [
        handoff("c", &child),
        report("complete", "parent done"),
        REPORT_WHEN_RESUMED.to_owned(),
    ]
    .join("\n");
    let handoff_task = planned_task(&mut admin, &ws, &parent).await;
    start(&mut admin, &handoff_task, "a", 0).await;
    chorus_tests::agents::wait_for(&mut admin, &handoff_task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "stubborn children started"
    })
    .await;
    markers.push(child_marker);

    for i in 0..3 {
        cluster.replica(i).signal(Signal::SIGSTOP);
    }
    // Their launchers, which go on, kill every process once the fences fell.
    for marker in &markers {
        eventually("every process of the paused replicas' runs is dead", || {
            processes_with_arg_containing(marker).is_empty()
        })
        .await;
    }
    for i in 0..3 {
        cluster.replica(i).signal(Signal::SIGCONT);
    }
    let mut client = cluster.client(1).await;
    for task in &tasks {
        completed_after_resuming(&mut client, &task.id, 1).await;
    }
    completed_after_resuming(&mut client, &handoff_task.id, 2).await;
}

/// A replica frozen with every process of its runs, launchers included (a
/// host or VM suspended): another replica resumes its run and the task
/// completes. When the replica wakes, its heartbeat reaching the database
/// before its launchers look again, they find their fence down all the
/// same, and the old processes die: a fence that fell is never raised
/// again for those that watched it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_woken_from_a_suspend_leaves_no_process_of_a_run_taken_over() {
    let Some(cluster) = Cluster::start(2, 3).await else {
        return no_postgres();
    };
    let mut admin = cluster.client(1).await;
    let ws = cluster.team(&mut admin).await;
    let marker = format!("suspended-{}", std::process::id());
    let task = stubborn_run_on(&cluster, 0, &ws, &marker, Some(REPORT_WHEN_RESUMED)).await;
    let r0 = cluster.replica(0).pid();
    let frozen = freeze_tree(r0);
    assert!(
        !frozen.is_empty(),
        "the run's processes are not under its replica"
    );
    completed_after_resuming(&mut admin, &task.id, 1).await;

    // The replica wakes first and proves it is alive again ...
    cluster.replica(0).signal(Signal::SIGCONT);
    eventually("the woken replica's heartbeat raised its fence", || {
        fence_up_of(r0)
    })
    .await;
    // ... then its launchers and the run's old processes.
    for pid in &frozen {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGCONT);
    }
    eventually("the old processes of the run taken over are gone", || {
        processes_with_arg_containing(&marker).is_empty()
    })
    .await;
    let mut client = cluster.client(0).await;
    completed_after_resuming(&mut client, &task.id, 1).await;
}

/// A replica just healed from a database cut claims a dead replica's run only
/// once it can drive it (its heartbeat has reached the database and its
/// fence is up): the run is resumed, not failed by a start its own fence
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_healed_from_a_database_cut_resumes_the_runs_it_claims() {
    let Some(mut cluster) = Cluster::start(2, 3).await else {
        return no_postgres();
    };
    let proxy = behind_a_proxy(&mut cluster, 1).await;
    let mut admin = cluster.client(0).await;
    let ws = cluster.team(&mut admin).await;
    let marker = format!("healed-{}", std::process::id());
    let task = stubborn_run_on(&cluster, 0, &ws, &marker, Some(REPORT_WHEN_RESUMED)).await;
    let run = first_run(&mut admin, &task.id).await;

    proxy.hang();
    chorus_tests::wait_health(cluster.replica(1).addr, "", ServingStatus::NotServing).await;
    // The run's driver dies (its processes with it); nobody may claim the
    // run until r1 is back.
    cluster.take(0).kill().await;
    let db = RefCell::new(session(&cluster));
    eventually("the dead replica's run's lease ran out", || {
        lease_of(&mut db.borrow_mut(), &run).is_some_and(|until| until < now_ms())
    })
    .await;
    proxy.open();
    let mut client = cluster.client(1).await;
    completed_after_resuming(&mut client, &task.id, 1).await;
}

/// A row a stuck transaction holds locked (a replica paused or cut
/// mid-write) holds up the takeover of its own task only: the other tasks'
/// runs are resumed meanwhile, and that one once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_locked_by_a_stuck_transaction_holds_up_no_other_tasks_takeover() {
    let Some(mut cluster) = Cluster::start(2, 3).await else {
        return no_postgres();
    };
    let mut admin = cluster.client(0).await;
    let ws = cluster.team(&mut admin).await;
    let pid = std::process::id();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let marker = format!("locked-{i}-{pid}");
        tasks.push(stubborn_run_on(&cluster, 0, &ws, &marker, Some(REPORT_WHEN_RESUMED)).await);
    }
    // The oldest task, claimed first, is held.
    let lock = lock_task_row(&cluster, &tasks[0].id);
    cluster.take(0).kill().await;
    let mut client = cluster.client(1).await;
    for task in &tasks[1..] {
        completed_after_resuming(&mut client, &task.id, 1).await;
    }
    drop(lock);
    completed_after_resuming(&mut client, &tasks[0].id, 1).await;
}

/// CancelTask, with a healthy driver on another replica whose run's children
/// ignore SIGTERM (they die at the end of the kill grace): it returns only
/// once they are dead, though the run's lease is no longer extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_task_returns_only_once_a_healthy_drivers_processes_are_gone() {
    // Two-second leases: an ended run's lease, no longer extended, falls
    // well within the kill grace its children live out in the landlock
    // tier (SIGTERM reaches each of them there; the namespace tier's init
    // ends them all at once).
    let Some(cluster) = Cluster::start_with(2, 2, &["--sandbox-tier", "landlock"]).await else {
        return no_postgres();
    };
    let mut admin = cluster.client(0).await;
    let ws = cluster.team(&mut admin).await;
    let mut other = cluster.client(1).await;
    for attempt in 0..3 {
        let marker = format!("cancel-healthy-{attempt}-{}", std::process::id());
        let task = stubborn_run_on(&cluster, 0, &ws, &marker, None).await;
        let canceled = chorus_tests::agents::cancel(&mut other, &task.id, "not needed").await;
        assert_eq!(
            processes_with_arg_containing(&marker),
            Vec::<i32>::new(),
            "attempt {attempt}: CancelTask returned while the run's processes ran"
        );
        assert_eq!(canceled.status, "canceled");
    }
}

/// FinishRun of a run Chorus drives (a CLI run on another replica) stops it
/// as CancelTask does, and returns once its processes are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finish_run_stops_a_driven_run_and_returns_once_its_processes_are_gone() {
    // In the landlock tier the run's children, which ignore SIGTERM, live
    // out the kill grace (see above).
    let Some(cluster) = Cluster::start_with(2, 2, &["--sandbox-tier", "landlock"]).await else {
        return no_postgres();
    };
    let mut admin = cluster.client(0).await;
    let ws = cluster.team(&mut admin).await;
    let marker = format!("finish-driven-{}", std::process::id());
    let task = stubborn_run_on(&cluster, 0, &ws, &marker, None).await;
    let run = first_run(&mut admin, &task.id).await;
    let mut other = cluster.client(1).await;
    let finished = other
        .finish_run(pb::FinishRunRequest {
            id: run.clone(),
            reason: "enough".into(),
        })
        .await
        .expect("finish")
        .into_inner();
    assert_eq!(
        processes_with_arg_containing(&marker),
        Vec::<i32>::new(),
        "FinishRun returned while the run's processes ran"
    );
    assert_eq!(finished.state, "finished", "{finished:?}");
    let events = history(&mut other, &task.id).await;
    let task = chorus_tests::agents::task_of(&mut other, &task.id).await;
    assert_eq!(task.status, "waiting", "{:#?}", story(&events));
    let ends: Vec<&pb::TaskEvent> = events
        .iter()
        .filter(|e| chorus_tests::agents::ends_run(e))
        .collect();
    assert_eq!(ends.len(), 1, "{:#?}", story(&events));
    assert_eq!(data(ends[0])["reason"], "enough");
    check_history(&events);
}

/// The shared tool-exec's connections all on one replica, which is then cut
/// from the database: the bash calls of a run on a healthy replica go on
/// over connections made again to the healthy replicas, instead of hanging
/// on the cut one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tool_calls_of_healthy_replicas_runs_go_on_while_one_replica_is_cut() {
    let Some(mut cluster) = Cluster::start(3, 3).await else {
        return no_postgres();
    };
    let proxy = behind_a_proxy(&mut cluster, 0).await;
    let mut admin = cluster.client(1).await;
    let ws = cluster.team(&mut admin).await;
    // tool-exec connects again, to r0 alone; then every replica is back in
    // the rotation.
    cluster.only_in_rotation(0);
    cluster.balancer.cut_all();
    let r0 = cluster.replica(0).addr;
    eventually("tool-exec is connected to r0", || {
        cluster.balancer.connections_to(r0) >= 1
    })
    .await;
    cluster.rebalance();

    proxy.hang();
    chorus_tests::wait_health(r0, "", ServingStatus::NotServing).await;
    cluster.out_of_rotation(0);
    let call = serde_json::json!({"tool": "bash", "command": "echo spread-ok"});
    let script = [format!("fake: call {call}"), report("complete", "called")].join("\n");
    let task = planned_task(&mut admin, &ws, &script).await;
    start(&mut admin, &task, "c", 0).await;
    let settled = settled(&mut admin, &task.id).await;
    let events = history(&mut admin, &task.id).await;
    assert_eq!(settled.status, "completed", "{:#?}", story(&events));
    let bash: Vec<serde_json::Value> = events
        .iter()
        .filter(|e| e.kind == "tool_executed")
        .map(data)
        .filter(|d| d["tool"] == "bash")
        .collect();
    assert_eq!(bash.len(), 1, "{bash:#?}");
    assert_eq!(bash[0]["status"], "ok", "{bash:#?}");
}
