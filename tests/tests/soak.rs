//! The soak of issue 38: three replicas on one PostgreSQL, each with its
//! database behind a proxy, behind a balancer that follows readiness, and a
//! shared tool-exec. Twenty faults of each kind — a replica paused
//! (SIGSTOP) past its lease, its database connections reset, its database
//! hung, the replica killed (SIGKILL) and started again — fall one after the
//! other while thirty tasks run: each a CLI that hands off to another,
//! whose bash call is in flight when the fault falls. Every task completes
//! (none failed by a fault), every bash call that ran is recorded once, two
//! drivers' CLIs of one run never live at once (each holds a lock in the
//! run's directory while it lives), and no process outlives its task.
//! Resume latency per fault kind (the fault's start to `run_resumed`) is
//! printed: docs/benchmarks.md quotes it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{eventually, processes_with_arg_containing};
use chorus_tests::agents::{Client, data, handoff, history, planned_task, report, settled, start};
use chorus_tests::cluster::{Cluster, check_history};
use chorus_tests::db_proxy::DbProxy;
use chorus_tests::faults::{behind_a_proxy, no_postgres, now_ms, replica_lease, session};
use nix::sys::signal::Signal;
use tonic_health::pb::health_check_response::ServingStatus;

/// Lease of the replicas, in seconds: short, so that eighty faults fit in
/// CI's time.
const LEASE_SECS: u64 = 2;
const FAULTS_PER_KIND: usize = 20;
const TASKS: usize = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Pause,
    Reset,
    Hang,
    Kill,
}

const KINDS: [Fault; 4] = [Fault::Pause, Fault::Reset, Fault::Hang, Fault::Kill];

/// Where the database is, as the proxies see it.
fn database() -> std::net::SocketAddr {
    "127.0.0.1:5432".parse().expect("address")
}

/// The script of task `t`: agent `a` hands off to `c`, whose bash call
/// echoes and notes its pid and then waits; each CLI holds the run's lock
/// while it lives; resumed, each does what is left and reports.
fn script(t: usize) -> String {
    let marker = format!("soak-{t}-{}", std::process::id());
    let call = serde_json::json!({
        "tool": "bash",
        "command": format!(
            "c={marker}-$SRANDOM$SRANDOM; echo $c; echo $c >> .{marker}; sleep 2"
        ),
        "timeout_secs": 60,
    });
    let child = [
        "fake: exclusive exclusive.lock".to_owned(),
        format!("fake: call {call}"),
        report("complete", "child done"),
        "fake-resume: exclusive exclusive.lock".to_owned(),
        format!("fake-resume: call {call}"),
        report("complete", "child resumed").replace("fake:", "fake-resume:"),
    ];
    [
        "fake: exclusive exclusive.lock".to_owned(),
        handoff("c", &child),
        report("complete", "parent done"),
        "fake-resume: exclusive exclusive.lock".to_owned(),
        report("complete", "parent resumed").replace("fake:", "fake-resume:"),
    ]
    .join("\n")
}

/// The marker of task `t`'s bash calls.
fn marker(t: usize) -> String {
    format!("soak-{t}-{}", std::process::id())
}

struct Soak {
    cluster: Cluster,
    proxies: Vec<DbProxy>,
    ws: pb::Workspace,
    tasks: Vec<String>,
    /// Resume latencies (ms) by fault kind.
    latencies: BTreeMap<Fault, Vec<i64>>,
}

impl Soak {
    /// A client of a replica other than `not` that is up.
    async fn client_but(&self, not: usize) -> Client {
        let i = self
            .cluster
            .up()
            .into_iter()
            .find(|i| *i != not)
            .expect("a replica is up");
        self.cluster.client(i).await
    }

    /// Starts task `t` on replica `i` and returns once its bash call runs.
    async fn start_task(&mut self, t: usize, i: usize) {
        let mut client = self.cluster.client(i).await;
        let task = planned_task(&mut client, &self.ws, &script(t)).await;
        start(&mut client, &task, "a", 0).await;
        let calls = self.cluster.root.path().join(format!(".{}", marker(t)));
        eventually("the task's bash call runs", || calls.exists()).await;
        self.tasks.push(task.id);
    }

    /// The runs replica `r<i>` drives now, with their tasks.
    async fn driven_by(&self, i: usize) -> Vec<(String, String)> {
        let mut client = self.client_but(i).await;
        let mut driven = Vec::new();
        for task in &self.tasks {
            let runs = client
                .list_runs(pb::ListRunsRequest {
                    task_id: task.clone(),
                })
                .await
                .expect("runs")
                .into_inner()
                .runs;
            for run in runs {
                if run.replica == format!("r{i}") && run.state != "finished" {
                    driven.push((task.clone(), run.id));
                }
            }
        }
        driven
    }

    /// One fault of `kind` on replica `r<i>`: applied, held until the
    /// replica's lease ran out and every run it drove was resumed elsewhere
    /// (or ended), then healed; the resume latencies noted.
    async fn fault(&mut self, kind: Fault, i: usize) {
        // Before the runs are listed: one that ends meanwhile ends after it.
        let began = now_ms();
        let driven = self.driven_by(i).await;
        match kind {
            Fault::Pause => {
                self.cluster.out_of_rotation(i);
                self.cluster.replica(i).signal(Signal::SIGSTOP);
            }
            Fault::Reset | Fault::Hang => {
                if kind == Fault::Reset {
                    self.proxies[i].reset();
                } else {
                    self.proxies[i].hang();
                }
                chorus_tests::wait_health(
                    self.cluster.replica(i).addr,
                    "",
                    ServingStatus::NotServing,
                )
                .await;
                self.cluster.out_of_rotation(i);
            }
            Fault::Kill => self.cluster.take(i).kill().await,
        }
        let db = RefCell::new(session(&self.cluster));
        let id = format!("r{i}");
        eventually("the faulty replica's lease ran out", || {
            replica_lease(&mut db.borrow_mut(), &id) < now_ms()
        })
        .await;
        let mut client = self.client_but(i).await;
        for (task, run) in &driven {
            if let Some(resumed) = resumed_at(&mut client, task, run, began).await {
                self.latencies
                    .entry(kind)
                    .or_default()
                    .push(resumed - began);
            }
        }
        match kind {
            Fault::Pause => self.cluster.replica(i).signal(Signal::SIGCONT),
            Fault::Reset | Fault::Hang => self.proxies[i].open(),
            Fault::Kill => {
                let url = self.proxies[i].url(&self.cluster.db.url, database());
                self.cluster.start_replica_on(i, &url).await;
            }
        }
        chorus_tests::wait_health(self.cluster.replica(i).addr, "", ServingStatus::Serving).await;
        self.cluster.rebalance();
    }
}

/// When `run` of `task` was resumed after `after`; None when it ended
/// instead (it finished before its lease ran out, or its task ended); waits
/// for one or the other.
async fn resumed_at(client: &mut Client, task: &str, run: &str, after: i64) -> Option<i64> {
    let events = chorus_tests::agents::wait_for(client, task, |e| {
        let own = data(e)["run_id"] == run;
        own && e.at_ms >= after && (e.kind == "run_resumed" || chorus_tests::agents::ends_run(e))
    })
    .await;
    events
        .last()
        .filter(|e| e.kind == "run_resumed")
        .map(|e| e.at_ms)
}

/// p50, p99 and the largest of `ms`.
fn percentiles(ms: &mut [i64]) -> (i64, i64, i64) {
    ms.sort_unstable();
    let at = |q: f64| {
        let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
        ms.get(i).copied().unwrap_or(0)
    };
    (at(0.5), at(0.99), ms.last().copied().unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_tasks_survive_twenty_faults_of_each_kind() {
    let Some(mut cluster) = Cluster::start(3, LEASE_SECS).await else {
        return no_postgres();
    };
    let mut proxies = Vec::new();
    for i in 0..3 {
        proxies.push(behind_a_proxy(&mut cluster, i).await);
    }
    let mut admin = cluster.client(0).await;
    let ws = cluster.team(&mut admin).await;
    let mut soak = Soak {
        cluster,
        proxies,
        ws,
        tasks: Vec::new(),
        latencies: BTreeMap::new(),
    };
    let faults = KINDS.len() * FAULTS_PER_KIND;
    for n in 0..faults {
        let kind = KINDS[n % KINDS.len()];
        let target = (n + n / KINDS.len()) % 3;
        // A task starts on the target before three faults in eight: its
        // parent's CLI and its child's bash call are there when it falls.
        if soak.tasks.len() < TASKS && n % 8 < 3 {
            let t = soak.tasks.len();
            soak.start_task(t, target).await;
        }
        soak.fault(kind, target).await;
    }
    while soak.tasks.len() < TASKS {
        let t = soak.tasks.len();
        soak.start_task(t, t % 3).await;
    }

    let mut client = soak.cluster.client(0).await;
    let mut recorded = BTreeSet::new();
    // Every bash record of each task, for the failure messages.
    let mut records: Vec<Vec<serde_json::Value>> = Vec::new();
    for task in &soak.tasks {
        let settled = settled(&mut client, task).await;
        let events = history(&mut client, task).await;
        let story: Vec<String> = events.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(settled.status, "completed", "task {task}: {story:?}");
        for e in &events {
            assert!(
                e.kind != "run_failed" && e.kind != "run_interrupted",
                "a fault ended a run of task {task}: {:?}",
                data(e)
            );
            if e.kind == "tool_executed" && data(e)["tool"] == "bash" {
                // The call's own id, in its output (none when it was
                // stopped before it echoed).
                let record = data(e);
                if let Some(call) = call_id(record["output_excerpt"].as_str().unwrap_or("")) {
                    assert!(
                        recorded.insert(call.clone()),
                        "the call {call} was recorded twice"
                    );
                }
            }
        }
        check_history(&events);
        records.push(
            events
                .iter()
                .filter(|e| e.kind == "tool_executed")
                .map(data)
                .filter(|d| d["tool"] == "bash")
                .collect(),
        );
    }
    for (t, task_records) in records.iter().enumerate() {
        let calls = soak.cluster.root.path().join(format!(".{}", marker(t)));
        for call in std::fs::read_to_string(&calls).unwrap_or_default().lines() {
            assert!(
                recorded.contains(call),
                "the call {call} ran and was never recorded; the task's bash records: {task_records:#?}"
            );
        }
        assert_eq!(
            processes_with_arg_containing(&marker(t)),
            Vec::<i32>::new(),
            "a process of task {t} outlived it"
        );
    }
    let overlaps: Vec<std::path::PathBuf> = walk(&soak.cluster.runs_dir())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "overlap"))
        .collect();
    assert!(
        overlaps.is_empty(),
        "two drivers' CLIs of a run lived at once: {overlaps:?}"
    );

    println!("resume latency by fault kind (lease {LEASE_SECS} s), fault start to run_resumed:");
    for (kind, ms) in &mut soak.latencies {
        let (p50, p99, max) = percentiles(ms);
        println!(
            "{kind:?}: {} runs, p50 {p50} ms, p99 {p99} ms, max {max} ms",
            ms.len()
        );
    }
}

/// The id a soak call echoed (`soak-<task>-<pid>-<random>`), found in the
/// output its record holds (JSON text, or a message and the output so far).
fn call_id(output: &str) -> Option<String> {
    let at = output.find("soak-")?;
    let id: String = output[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (id.matches('-').count() == 3).then_some(id)
}

/// Every file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}
