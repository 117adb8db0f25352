//! Faults made to a [`Cluster`]: a replica's database behind a proxy that
//! cuts it, runs whose fake CLI holds children that try every way out, and
//! looks into the database the replicas share (a run's lease, a row held
//! locked as a paused replica's transaction would hold it).

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::processes_with_arg_containing;
use diesel::connection::SimpleConnection as _;
use diesel::{Connection as _, PgConnection, RunQueryDsl as _};

use crate::agents::{data, planned_task, start, wait_for};
use crate::cluster::{Cluster, replica_of};
use crate::db_proxy::DbProxy;

/// What a test that needs PostgreSQL says when there is none (under
/// `CHORUS_TEST_REQUIRE_POSTGRES=1` the cluster has already failed).
pub fn no_postgres() {
    eprintln!("not run: CHORUS_TEST_DATABASE_URL is not set, and replicas need PostgreSQL");
}

/// What the fake CLI does when resumed: report the task complete.
pub const REPORT_WHEN_RESUMED: &str = "fake-resume: call {\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"resumed\",\"output\":\"resumed\"}";

/// Starts a run of agent `c` on replica `r<i>` whose fake CLI says `marker`,
/// starts children that try every way out (each carrying `marker`) and
/// waits; `resumed` is what it does when resumed. Returns once they run.
pub async fn stubborn_run_on(
    cluster: &Cluster,
    i: usize,
    ws: &pb::Workspace,
    marker: &str,
    resumed: Option<&str>,
) -> pb::Task {
    let mut driver = cluster.client(i).await;
    let mut script = vec![
        format!("fake: say {marker}"),
        crate::flows::stubborn(marker),
    ];
    script.extend(resumed.map(str::to_owned));
    let task = planned_task(&mut driver, ws, &script.join("\n")).await;
    let run = start(&mut driver, &task, "c", 0).await.run.expect("run");
    wait_for(&mut driver, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "stubborn children started"
    })
    .await;
    assert_eq!(replica_of(&mut driver, &run.id).await, format!("r{i}"));
    assert!(
        !processes_with_arg_containing(marker).is_empty(),
        "the run's processes do not run"
    );
    task
}

/// Starts replica `r<i>` again with its database behind a proxy the test
/// controls.
pub async fn behind_a_proxy(cluster: &mut Cluster, i: usize) -> DbProxy {
    let target: std::net::SocketAddr = "127.0.0.1:5432".parse().expect("address");
    let proxy = DbProxy::start(target).await;
    let status = cluster.take(i).stop().await;
    assert!(status.success(), "{status:?}");
    let url = proxy.url(&cluster.db.url, target);
    cluster.start_replica_on(i, &url).await;
    proxy
}

/// A session of the test's own on the cluster's database.
pub fn session(cluster: &Cluster) -> PgConnection {
    PgConnection::establish(&cluster.db.url).expect("connect to the cluster's database")
}

/// Until when (ms since the epoch) the lease of `run` holds; None: no lease.
pub fn lease_of(conn: &mut PgConnection, run: &str) -> Option<i64> {
    #[derive(diesel::QueryableByName)]
    struct Lease {
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
        lease_expires_ms: Option<i64>,
    }
    diesel::sql_query("SELECT lease_expires_ms FROM runs WHERE id = $1")
        .bind::<diesel::sql_types::Text, _>(run)
        .get_result::<Lease>(conn)
        .expect("the run's lease")
        .lease_expires_ms
}

/// Holds task `task`'s row locked, as a transaction of a replica paused or
/// cut mid-write holds it, until the returned session is dropped (or
/// rolled back).
pub fn lock_task_row(cluster: &Cluster, task: &str) -> PgConnection {
    let mut conn = session(cluster);
    // The id is a UUID the service made: no quoting is needed.
    assert!(task.chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
    conn.batch_execute(&format!(
        "BEGIN; SELECT id FROM tasks WHERE id = '{task}' FOR UPDATE;"
    ))
    .expect("lock the task's row");
    conn
}

/// Now, in ms since the epoch.
pub fn now_ms() -> i64 {
    chorus_sandbox::fence::now_ms()
}

/// Until when (ms since the epoch) replica `id`'s own lease holds.
pub fn replica_lease(conn: &mut PgConnection, id: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Lease {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        lease_expires_ms: i64,
    }
    diesel::sql_query("SELECT lease_expires_ms FROM replicas WHERE id = $1")
        .bind::<diesel::sql_types::Text, _>(id)
        .get_result::<Lease>(conn)
        .expect("the replica's lease")
        .lease_expires_ms
}

/// The parent of each process, as /proc says.
fn parents() -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// Every process under `pid`, parents before their children.
pub fn descendants(pid: i32) -> Vec<i32> {
    let parents = parents();
    let mut found = vec![pid];
    let mut i = 0;
    while let Some(&parent) = found.get(i) {
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Stops `pid` and every process under it, as a suspended host or VM
/// stops them all: `pid` first (it starts no more), then the others until
/// no new one is found. The processes stopped under `pid`.
pub fn freeze_tree(pid: i32) -> Vec<i32> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    kill(Pid::from_raw(pid), Signal::SIGSTOP).expect("stop the replica");
    let mut stopped = Vec::new();
    loop {
        let new: Vec<i32> = descendants(pid)
            .into_iter()
            .filter(|p| !stopped.contains(p))
            .collect();
        if new.is_empty() {
            return stopped;
        }
        for p in new {
            // A process that ended meanwhile is no matter.
            let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
            stopped.push(p);
        }
    }
}

/// Whether a fence of orchestrator process `pid` is up: a file in its
/// fence directory holds a time still to come.
pub fn fence_up_of(pid: i32) -> bool {
    let prefix = format!("chorus-fence-orchestrator-{pid}-");
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|dir| std::fs::read_dir(dir.path()).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .filter_map(|text| text.trim().parse::<i64>().ok())
        .any(|until| until > now_ms())
}
