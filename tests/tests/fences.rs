//! Fences: a run's processes die by their launchers' hand once their driver
//! can no longer prove its lease — paused, cut from PostgreSQL (reset or
//! hung), or replaced by a second process with its replica id — before any
//! other process resumes the run; CancelTask waits for that.

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{
    ESCAPEES, escapees, eventually, processes_with_arg_containing, survivors,
};
use chorus_tests::agents::{data, history, planned_task, settled, start};
use chorus_tests::cluster::{Cluster, check_history, replica_of};
use chorus_tests::faults::{REPORT_WHEN_RESUMED, behind_a_proxy, no_postgres, stubborn_run_on};

/// A run driven by r0 of a three-replica cluster (4 s leases) whose fake CLI
/// started children that try every way out, each carrying `marker`;
/// `resumed` is what the CLI does when resumed elsewhere.
async fn a_run_with_stubborn_children_on_r0(
    marker: &str,
    resumed: Option<&str>,
) -> Option<(Cluster, pb::Task)> {
    let cluster = Cluster::start(3, 4).await?;
    let task = stubborn_run_on_r0(&cluster, marker, resumed).await;
    Some((cluster, task))
}

/// [`a_run_with_stubborn_children_on_r0`] in `cluster`.
async fn stubborn_run_on_r0(cluster: &Cluster, marker: &str, resumed: Option<&str>) -> pb::Task {
    let mut driver = cluster.client(0).await;
    let ws = cluster.team(&mut driver).await;
    stubborn_run_on(cluster, 0, &ws, marker, resumed).await
}

/// A replica paused (SIGSTOP) longer than its lease: its run's processes — the
/// CLI and children that left its group — are dead, killed by their launchers
/// when the replica's fence ran out, before another replica resumes the run;
/// two replicas never run one run's processes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_replica_has_no_process_alive_when_another_resumes_its_run() {
    let marker = format!("paused-driver-{}", std::process::id());
    let Some((cluster, task)) =
        a_run_with_stubborn_children_on_r0(&marker, Some(REPORT_WHEN_RESUMED)).await
    else {
        return no_postgres();
    };
    cluster.replica(0).signal(nix::sys::signal::Signal::SIGSTOP);
    let mut other = cluster.client(1).await;
    chorus_tests::agents::wait_for(&mut other, &task.id, |e| e.kind == "run_resumed").await;
    let alive = processes_with_arg_containing(&marker);
    // The paused replica goes on before anything else is checked.
    cluster.replica(0).signal(nix::sys::signal::Signal::SIGCONT);
    assert_eq!(
        alive,
        Vec::<i32>::new(),
        "the paused replica's run still had processes when another replica resumed it"
    );
    let task = settled(&mut other, &task.id).await;
    assert_eq!(task.status, "completed", "{task:?}");
    check_history(&history(&mut other, &task.id).await);
}

/// A bash call in flight (in the cluster's tool-exec) when its run's driver
/// is paused past its lease: its processes die by its fence before another
/// replica resumes the run, and the call is recorded — while the paused
/// replica still sleeps — by whichever replica tool-exec reaches, as
/// stopped (its caller or its driver gone) or interrupted (reported after
/// the takeover).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_drivers_bash_call_dies_and_is_recorded_by_another_replica() {
    let Some(cluster) = Cluster::start(3, 4).await else {
        return no_postgres();
    };
    let mut driver = cluster.client(0).await;
    let ws = cluster.team(&mut driver).await;
    let marker = format!("paused-call-{}", std::process::id());
    let command = format!("{} while :; do sleep 1; done", escapees(&marker));
    let call = serde_json::json!({"tool": "bash", "command": command, "timeout_secs": 600});
    let script = [format!("fake: call {call}"), REPORT_WHEN_RESUMED.to_owned()].join("\n");
    let task = planned_task(&mut driver, &ws, &script).await;
    let run = start(&mut driver, &task, "c", 0).await.run.expect("run");
    eventually("the bash call's processes run", || {
        survivors(&marker).len() == ESCAPEES
    })
    .await;
    assert_eq!(replica_of(&mut driver, &run.id).await, "r0");

    cluster.replica(0).signal(nix::sys::signal::Signal::SIGSTOP);
    let mut other = cluster.client(1).await;
    chorus_tests::agents::wait_for(&mut other, &task.id, |e| e.kind == "run_resumed").await;
    let alive = processes_with_arg_containing(&marker);
    let recorded = tokio::spawn({
        let task = task.id.clone();
        async move {
            let events = chorus_tests::agents::wait_for(&mut other, &task, |e| {
                e.kind == "tool_executed" && data(e)["tool"] == "bash"
            })
            .await;
            (other, data(events.last().expect("the record")))
        }
    })
    .await;
    // The paused replica goes on before anything is asserted.
    cluster.replica(0).signal(nix::sys::signal::Signal::SIGCONT);
    assert_eq!(
        alive,
        Vec::<i32>::new(),
        "the paused driver's bash call still had processes when another replica resumed the run"
    );
    let (mut other, call) = recorded.expect("the call was recorded");
    // Stopped as its caller (the fenced CLI) went away, or by the run's
    // driver losing it, or reported after the takeover: never a success.
    assert!(
        ["cancelled", "aborted", "interrupted"].contains(&call["status"].as_str().unwrap_or("")),
        "{call}"
    );
    assert_eq!(call["run_id"], run.id.as_str());
    let task = settled(&mut other, &task.id).await;
    assert_eq!(task.status, "completed", "{task:?}");
    check_history(&history(&mut other, &task.id).await);
}

/// CancelTask on another replica while the driver is paused: it returns only
/// once the run's processes are dead — killed by their launchers when the
/// paused driver's fence fell — not while they still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_task_returns_only_once_a_paused_drivers_processes_are_dead() {
    let marker = format!("paused-cancel-{}", std::process::id());
    let Some((cluster, task)) = a_run_with_stubborn_children_on_r0(&marker, None).await else {
        return no_postgres();
    };
    cluster.replica(0).signal(nix::sys::signal::Signal::SIGSTOP);
    let mut other = cluster.client(1).await;
    let canceled = other
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "not needed".into(),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner);
    let alive = processes_with_arg_containing(&marker);
    cluster.replica(0).signal(nix::sys::signal::Signal::SIGCONT);
    assert_eq!(canceled.expect("cancel").status, "canceled");
    assert_eq!(
        alive,
        Vec::<i32>::new(),
        "CancelTask returned while the paused driver's processes still ran"
    );
}

/// How a replica is cut from the database.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Its connections are reset.
    Reset,
    /// Nothing answers and nothing closes (packets dropped).
    Hung,
}

/// A replica cut from PostgreSQL (through a proxy the test controls) has no
/// process of its run alive when another replica resumes the run.
async fn a_replica_cut_from_the_database_is_fenced(cut: Cut) {
    let Some(mut cluster) = Cluster::start(3, 4).await else {
        return no_postgres();
    };
    let proxy = behind_a_proxy(&mut cluster, 0).await;

    let marker = format!("cut-{cut:?}-{}", std::process::id());
    let task = stubborn_run_on_r0(&cluster, &marker, Some(REPORT_WHEN_RESUMED)).await;

    match cut {
        Cut::Reset => proxy.reset(),
        Cut::Hung => proxy.hang(),
    }
    // Its health says it cannot keep its leases; a balancer following
    // readiness takes it out of rotation.
    chorus_tests::wait_health(
        cluster.replica(0).addr,
        "",
        tonic_health::pb::health_check_response::ServingStatus::NotServing,
    )
    .await;
    cluster.out_of_rotation(0);
    let mut other = cluster.client(1).await;
    chorus_tests::agents::wait_for(&mut other, &task.id, |e| e.kind == "run_resumed").await;
    assert_eq!(
        processes_with_arg_containing(&marker),
        Vec::<i32>::new(),
        "{cut:?}: r0's run still had processes when another replica resumed it"
    );
    let task = settled(&mut other, &task.id).await;
    assert_eq!(task.status, "completed", "{cut:?}: {task:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_database_connections_reset_is_fenced() {
    a_replica_cut_from_the_database_is_fenced(Cut::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_database_hangs_is_fenced() {
    a_replica_cut_from_the_database_is_fenced(Cut::Hung).await;
}

/// The first process of replica r0 loses its database sessions (and with
/// them its replica lock) while it drives a run; a second process started
/// at once with the same replica id takes nothing back while the first's
/// processes live: when the run is resumed, they are dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_process_with_the_same_replica_id_resumes_nothing_while_the_first_runs_it() {
    let Some(mut cluster) = Cluster::start(1, 4).await else {
        return no_postgres();
    };
    let proxy = behind_a_proxy(&mut cluster, 0).await;

    let marker = format!("same-id-{}", std::process::id());
    let task = stubborn_run_on_r0(&cluster, &marker, Some(REPORT_WHEN_RESUMED)).await;

    // The first process is cut off, and keeps running; a second one with
    // its replica id starts on the database directly.
    proxy.reset();
    let first = cluster.take(0);
    cluster.start_replica(0).await;
    let mut second = cluster.client(0).await;
    chorus_tests::agents::wait_for(&mut second, &task.id, |e| e.kind == "run_resumed").await;
    let alive = processes_with_arg_containing(&marker);
    first.kill().await;
    assert_eq!(
        alive,
        Vec::<i32>::new(),
        "the second process resumed the run while the first's processes ran"
    );
    let task = settled(&mut second, &task.id).await;
    assert_eq!(task.status, "completed", "{task:?}");
}
