//! Several orchestrator replicas on one PostgreSQL database, as users run them
//! behind a load balancer (see `chorus_tests::cluster`): handoff chains whose
//! runs spread over the replicas, watched from every replica; a replica
//! killed mid-chain; CancelTask sent to a replica that does not drive the
//! run; a rolling restart; a replica that joins while the others work. And
//! SQLite, which serves one orchestrator: a second one on the same file is
//! refused, saying so.
//!
//! The replica tests need PostgreSQL (`CHORUS_TEST_DATABASE_URL`, which CI
//! sets); without it they say so and pass.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::processes_with_arg_containing;
use chorus_tests::agents::{
    Client, data, handoff, history, planned_task, report, settled, start, task_of,
};
use chorus_tests::cluster::{Cluster, check_history, replica_of};
use chorus_tests::faults::no_postgres;
use tokio_stream::StreamExt;

/// The safety net of every wait here: a bound that only a hang reaches.
const HANG: Duration = Duration::from_secs(240);

/// Follows a task's history on one replica until it is settled; returns the
/// events.
fn watch(mut client: Client, task: String) -> tokio::task::JoinHandle<Vec<pb::TaskEvent>> {
    tokio::spawn(async move {
        let mut stream = client
            .watch_task(pb::WatchTaskRequest {
                task_id: task,
                after_sequence: 0,
                follow: false,
                until_needed: false,
            })
            .await
            .expect("watch")
            .into_inner();
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            events.push(event.expect("event"));
        }
        events
    })
}

/// The script of an A → B → C chain: each hands off, then reports.
fn chain(c: &[String]) -> String {
    let b = [handoff("c", c), report("complete", "B done")];
    [handoff("b", &b), report("complete", "A done")].join("\n")
}

/// The replica each run started on (`agent_started`), by run id.
fn started_on(events: &[pb::TaskEvent]) -> BTreeMap<String, String> {
    events
        .iter()
        .filter(|e| e.kind == "agent_started")
        .map(|e| {
            let d = data(e);
            (
                d["run_id"].as_str().unwrap_or_default().to_owned(),
                d["replica"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handoff_chains_spread_over_three_replicas_complete_and_every_replica_sees_every_event() {
    let Some(cluster) = Cluster::start(3, 20).await else {
        return no_postgres();
    };
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(cluster.client(i).await);
    }
    let ws = cluster.team(&mut clients[0]).await;
    const CHAINS: usize = 100;
    let c = [report("complete", "C done")];
    let mut tasks = Vec::new();
    let mut watchers = Vec::new();
    for n in 0..CHAINS {
        let task = planned_task(&mut clients[n % 3], &ws, &chain(&c)).await;
        // Every replica watches every task from before it starts.
        for client in &clients {
            watchers.push((task.id.clone(), watch(client.clone(), task.id.clone())));
        }
        tasks.push(task);
    }
    for (n, task) in tasks.iter().enumerate() {
        start(&mut clients[(n + 1) % 3], task, "a", 0).await;
    }
    let mut seen: HashMap<String, Vec<Vec<pb::TaskEvent>>> = HashMap::new();
    for (task, watcher) in watchers {
        let events = tokio::time::timeout(HANG, watcher)
            .await
            .expect("every watch ends when its task settles")
            .expect("watcher");
        seen.entry(task).or_default().push(events);
    }
    let mut spread = 0;
    let mut replicas_used = BTreeSet::new();
    for task in &tasks {
        let record = history(&mut clients[0], &task.id).await;
        assert_eq!(
            task_of(&mut clients[1], &task.id).await.status,
            "completed",
            "{:#?}",
            record
                .iter()
                .map(|e| (&e.kind, data(e)))
                .collect::<Vec<_>>()
        );
        check_history(&record);
        for (i, events) in seen[&task.id].iter().enumerate() {
            let kinds = |events: &[pb::TaskEvent]| {
                events
                    .iter()
                    .map(|e| format!("{} {} {}", e.sequence, e.kind, data(e)["agent"]))
                    .collect::<Vec<_>>()
            };
            assert!(
                events == &record,
                "the watch on replica r{i} saw every event of task {} in order: {:#?} != {:#?}",
                task.id,
                kinds(events),
                kinds(&record)
            );
        }
        let on: BTreeSet<String> = started_on(&record).into_values().collect();
        assert_eq!(started_on(&record).len(), 3, "three runs per chain");
        if on.len() > 1 {
            spread += 1;
        }
        replicas_used.extend(on);
    }
    assert_eq!(
        replicas_used,
        BTreeSet::from(["r0".to_owned(), "r1".to_owned(), "r2".to_owned()]),
        "every replica drove runs"
    );
    assert!(
        spread >= CHAINS / 2,
        "most chains ran on more than one replica: {spread} of {CHAINS}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_chain_has_its_runs_resumed_elsewhere_and_nothing_is_lost() {
    let Some(mut cluster) = Cluster::start(3, 6).await else {
        return no_postgres();
    };
    let mut client = cluster.client(0).await;
    let ws = cluster.team(&mut client).await;
    // C records its pid and waits at a gate; resumed, it reports at once.
    // C's own arguments carry `killed"<n>`; its parents' carry it escaped in
    // their JSON (`killed\"<n>`), so the marker finds C's processes only.
    let marker = |n: usize| format!("killed\"{}-{n}", std::process::id());
    let script = |n: usize| {
        let c = [
            format!("fake: say {}", marker(n)),
            "fake: wait gate.fifo".to_owned(),
            report("complete", "C done"),
            "fake-resume: call {\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"C resumed\",\"output\":\"C resumed\"}".to_owned(),
        ];
        let resume_b = "fake-resume: call {\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"B resumed\",\"output\":\"B resumed\"}";
        let b = [
            handoff("c", &c),
            report("complete", "B done"),
            resume_b.to_owned(),
        ];
        let resume_a = "fake-resume: call {\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"A resumed\",\"output\":\"A resumed\"}";
        [
            handoff("b", &b),
            report("complete", "A done"),
            resume_a.to_owned(),
        ]
        .join("\n")
    };
    const CHAINS: usize = 9;
    let mut tasks = Vec::new();
    for n in 0..CHAINS {
        let task = planned_task(&mut client, &ws, &script(n)).await;
        let mut starter = cluster.client(n % 3).await;
        start(&mut starter, &task, "a", 0).await;
        tasks.push(task);
    }
    // Every C waits at its gate.
    let mut gates: Vec<(String, String)> = Vec::new();
    for task in &tasks {
        let events = chorus_tests::agents::wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["text"] == "waiting on gate.fifo"
        })
        .await;
        let run = data(events.last().expect("waiting"))["run_id"]
            .as_str()
            .expect("run")
            .to_owned();
        gates.push((task.id.clone(), run));
    }
    // The replica that drives the most runs dies.
    let mut driven: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut handoff_runs = BTreeSet::new();
    for task in &tasks {
        for run in chorus_tests::agents::runs_of(&mut client, &task.id, "").await {
            if run.handoff_index > 0 {
                handoff_runs.insert(run.id.clone());
            }
            driven.entry(run.replica.clone()).or_default().push(run.id);
        }
    }
    let (victim, victim_runs) = driven
        .iter()
        .filter(|(r, _)| !r.is_empty())
        .max_by_key(|(_, runs)| runs.len())
        .map(|(r, runs)| (r.clone(), runs.clone()))
        .expect("runs are driven");
    let victim_index: usize = victim[1..].parse().expect("r<i>");
    let survivor = (victim_index + 1) % 3;
    let mut observer = cluster.client(survivor).await;
    // Watches on a surviving replica, opened before the death.
    let watchers: Vec<_> = tasks
        .iter()
        .map(|t| (t.id.clone(), watch(observer.clone(), t.id.clone())))
        .collect();
    // Handoff streams re-opened on the survivor for the victim's handoff runs.
    let mut streams = Vec::new();
    for run in victim_runs.iter().filter(|r| handoff_runs.contains(*r)) {
        let mut c = observer.clone();
        let run = run.clone();
        streams.push(tokio::spawn(async move {
            chorus_tests::agents::reopen_handoff(&mut c, &run).await
        }));
    }

    for n in 0..CHAINS {
        assert!(
            !processes_with_arg_containing(&marker(n)).is_empty(),
            "C {n} runs"
        );
    }
    cluster.take(victim_index).kill().await;
    // Its agent processes died with it; the others' live on.
    for (n, (_, run)) in gates.iter().enumerate() {
        if victim_runs.contains(run) {
            let marker = marker(n);
            chorus_sandbox::testing::eventually("the victim's agent processes die with it", || {
                processes_with_arg_containing(&marker).is_empty()
            })
            .await;
        } else {
            assert!(
                !processes_with_arg_containing(&marker(n)).is_empty(),
                "C {n} lives on"
            );
        }
    }
    // The live Cs go on through their gates; the resumed ones report at once.
    for (_, run) in gates.iter().filter(|(_, run)| !victim_runs.contains(run)) {
        let fifo = cluster.run_file(run, "gate.fifo");
        tokio::task::spawn_blocking(move || std::fs::write(fifo, "go"))
            .await
            .expect("writer")
            .expect("open the gate");
    }
    for task in &tasks {
        let task = settled(&mut observer, &task.id).await;
        assert_eq!(task.status, "completed", "{task:?}");
    }
    for (task, watcher) in watchers {
        let events = tokio::time::timeout(HANG, watcher)
            .await
            .expect("watch ends")
            .expect("watcher");
        let record = history(&mut observer, &task).await;
        check_history(&record);
        assert_eq!(
            events, record,
            "the survivor's watch of {task} lost nothing"
        );
        // Each of the victim's runs was resumed by a survivor, once.
        for event in record.iter().filter(|e| e.kind == "run_resumed") {
            let d = data(event);
            assert_eq!(d["from_replica"], victim.as_str());
            assert_ne!(d["replica"], victim.as_str());
        }
    }
    let mut resumed = BTreeSet::new();
    for task in &tasks {
        for event in history(&mut observer, &task.id).await {
            if event.kind == "run_resumed" {
                resumed.insert(
                    data(&event)["run_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
            assert_ne!(event.kind, "run_interrupted", "every run could be resumed");
        }
    }
    let expected: BTreeSet<String> = victim_runs.iter().cloned().collect();
    assert_eq!(resumed, expected, "every run of the victim was resumed");
    for stream in streams {
        let events = tokio::time::timeout(HANG, stream)
            .await
            .expect("the handoff stream on a survivor ends")
            .expect("stream");
        assert!(
            matches!(
                events.last(),
                Some(pb::handoff_event::Event::Completed(_))
                    | Some(pb::handoff_event::Event::Failed(_))
            ),
            "{events:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_task_on_a_replica_that_does_not_drive_the_run_returns_once_its_processes_are_dead()
{
    let Some(cluster) = Cluster::start(2, 10).await else {
        return no_postgres();
    };
    let mut driver = cluster.client(0).await;
    let ws = cluster.team(&mut driver).await;
    // The CLI's arguments carry its message, and so this marker.
    let marker = format!("cancel-elsewhere-{}", std::process::id());
    let task = planned_task(
        &mut driver,
        &ws,
        &format!("fake: say {marker}\nfake: wait gate.fifo"),
    )
    .await;
    let run = start(&mut driver, &task, "c", 0).await.run.expect("run");
    chorus_tests::agents::wait_for(&mut driver, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "waiting on gate.fifo"
    })
    .await;
    assert_eq!(replica_of(&mut driver, &run.id).await, "r0");
    assert!(!processes_with_arg_containing(&marker).is_empty());

    let mut other = cluster.client(1).await;
    let canceled = chorus_tests::agents::cancel(&mut other, &task.id, "not needed").await;
    assert_eq!(canceled.status, "canceled");
    assert_eq!(
        processes_with_arg_containing(&marker),
        Vec::<i32>::new(),
        "CancelTask on r1 returned while r0's agent process still ran"
    );
    assert_eq!(
        replica_of(&mut other, &run.id).await,
        "",
        "the run was released"
    );
    let record = history(&mut other, &task.id).await;
    check_history(&record);
    assert!(record.iter().any(|e| e.kind == "run_canceled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_of_every_replica_while_tasks_run_finishes_them_all() {
    let Some(mut cluster) = Cluster::start(3, 10).await else {
        return no_postgres();
    };
    let mut client = cluster.client(0).await;
    let ws = cluster.team(&mut client).await;
    // Each waits at its gate; resumed elsewhere, it reports at once.
    let script = [
        "fake: wait gate.fifo".to_owned(),
        report("complete", "done"),
        "fake-resume: call {\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"resumed\",\"output\":\"resumed\"}".to_owned(),
    ]
    .join("\n");
    const TASKS: usize = 50;
    let mut tasks = Vec::new();
    for n in 0..TASKS {
        let task = planned_task(&mut client, &ws, &script).await;
        let mut starter = cluster.client(n % 3).await;
        let run = start(&mut starter, &task, "c", 0).await.run.expect("run");
        tasks.push((task, run));
    }
    for (task, _) in &tasks {
        chorus_tests::agents::wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["text"] == "waiting on gate.fifo"
        })
        .await;
    }
    // One replica at a time: SIGTERM, wait for it to end, start it again.
    for i in 0..3 {
        let status = cluster.take(i).stop().await;
        assert!(status.success(), "r{i} stopped cleanly: {status:?}");
        cluster.start_replica(i).await;
    }
    let mut client = cluster.client(0).await;
    // Runs never moved are still at their gates.
    for (_, run) in &tasks {
        let fifo = cluster.run_file(&run.id, "gate.fifo");
        if let Ok(run_now) = client
            .get_run(pb::GetRunRequest { id: run.id.clone() })
            .await
            && run_now.into_inner().epoch == 0
            && fifo.exists()
        {
            // Only a CLI still waiting at its gate reads it: a run handed on
            // and not yet taken back (its CLI gone) has nobody to read it.
            let opened = tokio::task::spawn_blocking(move || {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(nix::libc::O_NONBLOCK)
                    .open(fifo)
                    .and_then(|mut f| f.write_all(b"go"))
            })
            .await
            .expect("writer");
            if let Err(e) = opened {
                assert_eq!(
                    e.raw_os_error(),
                    Some(nix::libc::ENXIO),
                    "open the gate: {e}"
                );
            }
        }
    }
    for (task, _) in &tasks {
        let task = settled(&mut client, &task.id).await;
        assert_eq!(task.status, "completed", "{task:?}");
        check_history(&history(&mut client, &task.id).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_starts_while_others_run_touches_nothing_of_theirs() {
    let Some(mut cluster) = Cluster::start(2, 6).await else {
        return no_postgres();
    };
    cluster.replicas.push(None);
    let mut client = cluster.client(0).await;
    let ws = cluster.team(&mut client).await;
    let mut tasks = Vec::new();
    for n in 0..4 {
        let script = [
            "fake: wait gate.fifo".to_owned(),
            report("complete", "done"),
        ]
        .join("\n");
        let task = planned_task(&mut client, &ws, &script).await;
        let mut starter = cluster.client(n % 2).await;
        let run = start(&mut starter, &task, "c", 0).await.run.expect("run");
        chorus_tests::agents::wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress" && data(e)["text"] == "waiting on gate.fifo"
        })
        .await;
        tasks.push((task, run));
    }
    let before: Vec<Vec<pb::TaskEvent>> = {
        let mut all = Vec::new();
        for (task, _) in &tasks {
            all.push(history(&mut client, &task.id).await);
        }
        all
    };
    cluster.start_replica(2).await;
    let mut newcomer = cluster.client(2).await;
    // Its start-up claim is done once it serves; then it heartbeats and
    // claims like the others: wait until its heartbeat has moved on three
    // times (a lease is 2 s, a beat every 2/3 s).
    let beats = |status: &pb::GetStatusResponse| {
        status
            .replicas
            .iter()
            .find(|r| r.id == "r2")
            .map(|r| r.heartbeat_ms)
            .unwrap_or_default()
    };
    let first = beats(
        &newcomer
            .get_status(pb::GetStatusRequest {})
            .await
            .expect("status")
            .into_inner(),
    );
    let mut seen = BTreeSet::from([first]);
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    tokio::time::timeout(HANG, async {
        while seen.len() < 4 {
            poll.tick().await;
            let status = newcomer
                .get_status(pb::GetStatusRequest {})
                .await
                .expect("status")
                .into_inner();
            assert!(
                status.replicas.iter().filter(|r| r.live).count() == 3,
                "{status:?}"
            );
            seen.insert(beats(&status));
        }
    })
    .await
    .expect("the newcomer heartbeats");
    for ((task, run), earlier) in tasks.iter().zip(&before) {
        assert_eq!(
            &history(&mut newcomer, &task.id).await,
            earlier,
            "nothing was recorded"
        );
        let now = newcomer
            .get_run(pb::GetRunRequest { id: run.id.clone() })
            .await
            .expect("run")
            .into_inner();
        assert_eq!((now.epoch, now.state.as_str()), (0, "active"));
        assert!(now.replica == "r0" || now.replica == "r1", "{now:?}");
    }
    for (task, run) in &tasks {
        let fifo = cluster.run_file(&run.id, "gate.fifo");
        tokio::task::spawn_blocking(move || std::fs::write(fifo, "go"))
            .await
            .expect("writer")
            .expect("open the gate");
        settled(&mut newcomer, &task.id).await;
    }
}

/// One WatchTasks stream on one replica follows what another replica
/// commits (each commit announces its feed position; the follower's replica
/// reads the rest), and its cursor resumes on the other replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_tasks_on_one_replica_sees_every_change_committed_on_another() {
    use pb::task_change::Change;
    let Some(cluster) = Cluster::start(2, 20).await else {
        return no_postgres();
    };
    let (mut follower, mut writer) = (cluster.client(0).await, cluster.client(1).await);
    let ws = chorus_tests::agents::workspace(&mut writer, "feed", cluster.root.path()).await;
    let request = |after_cursor: String| pb::WatchTasksRequest {
        workspace_id: ws.id.clone(),
        after_cursor,
        ..Default::default()
    };
    let mut stream = follower
        .watch_tasks(request(String::new()))
        .await
        .expect("watch")
        .into_inner();
    let first = stream.next().await.expect("caught up").expect("ok");
    assert!(
        matches!(first.change, Some(Change::CaughtUp(_))),
        "{first:?}"
    );

    const TASKS: usize = 50;
    let mut tasks = Vec::new();
    for n in 0..TASKS {
        let task = writer
            .create_task(pb::CreateTaskRequest {
                budget: None,
                workspace_id: ws.id.clone(),
                description: format!("task {n}"),
                source: None,
                ..Default::default()
            })
            .await
            .expect("task")
            .into_inner();
        for status in ["planning", "canceled"] {
            writer
                .update_task_status(pb::UpdateTaskStatusRequest {
                    task_id: task.id.clone(),
                    status: status.into(),
                    ..Default::default()
                })
                .await
                .expect("status");
        }
        tasks.push(task.id);
    }
    let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
    let mut last = first.cursor.clone();
    for received in 0..TASKS * 3 {
        if received == TASKS * 3 / 2 {
            // Dropped here, resumed on the writer's replica from the cursor.
            stream = writer
                .watch_tasks(request(last.clone()))
                .await
                .expect("resume")
                .into_inner();
        }
        let change = loop {
            let change = tokio::time::timeout(HANG, stream.next())
                .await
                .expect("a change within the bound")
                .expect("open")
                .expect("ok");
            if !matches!(change.change, Some(Change::CaughtUp(_))) {
                break change;
            }
        };
        let Some(Change::Event(event)) = &change.change else {
            panic!("not an event: {change:?}");
        };
        seen.entry(change.task_id.clone())
            .or_default()
            .push(event.sequence);
        last = change.cursor.clone();
    }
    for task in &tasks {
        assert_eq!(
            seen[task],
            [1, 2, 3],
            "task {task}: created, planning, canceled once each, in order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_orchestrator_on_one_sqlite_file_is_refused_saying_why() {
    let dir = tempfile::tempdir().expect("dir");
    let database = dir.path().join("chorus.db").display().to_string();
    let first = chorus_tests::orchestrator::OrchestratorProcess::spawn(
        &dir.path().join("one"),
        &database,
        &[],
    )
    .await;
    let second = tokio::process::Command::new(chorus_tests::built_bin(
        "chorus-orchestrator",
        "chorus-orchestrator",
    ))
    .args([
        "--listen",
        "127.0.0.1:0",
        "--tool-exec-listen",
        "127.0.0.1:0",
        "--console-listen",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(dir.path().join("two"))
    .args(["--database-url", &database])
    .output()
    .await
    .expect("run a second orchestrator");
    assert!(!second.status.success());
    let log = String::from_utf8_lossy(&second.stderr);
    assert!(
        log.contains("SQLite serves one orchestrator") && log.contains("use PostgreSQL"),
        "{log}"
    );
    first.stop().await;
}
