//! The orchestrator binary under load, as callers meet it:
//!
//! 1. API throughput and latency of GetTask, ListTasks and CreateTask at 1, 64
//!    and 256 concurrent callers, beside the bare gRPC health Check of the
//!    same process in the same run, on SQLite and (with
//!    `CHORUS_TEST_DATABASE_URL`) PostgreSQL — there also beside `pgbench`
//!    at the same concurrency: GetTask's SELECT of the task row, and an
//!    INSERT of a row of a task's size, the database's own limit on the
//!    machine;
//! 2. a legitimate caller's p99 — an admin's GetTask and an agent's file.read
//!    through tool-exec — idle, and during each attack of
//!    `tests/tests/attacks.rs` and `tests/tests/load.rs`;
//! 3. 1,000 runs each making 4 tool calls at once through chorus-tools: wall
//!    time, errors, the orchestrator's peak memory, the calls' p99.
//!
//! The load comes from this process (2 worker threads) over 4 connections, on
//! the same 2 cores as the orchestrator. The throughput rows use one admin key
//! with `--quota admin=1024/1024` (the default share of one key is 64 calls).
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench api_load`
//! (CHORUS_BENCH_API_CALLS: calls per row, default 4000; CHORUS_BENCH_ONLY=attacks
//! for the second part alone, =throughput for the first, CHORUS_BENCH_ORCHESTRATOR_ENV=NAME=VALUE,… for its
//! orchestrator's environment).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_tests::agents::{add_agent, opened_run, workspace};
use chorus_tests::attacker;
use chorus_tests::credentials::{AuthChannel, Bearer};
use chorus_tests::orchestrator::{OrchestratorProcess, channel_to};
use chorus_tests::stats::{Samples, env_number, ms};
use serde_json::json;
use tokio_stream::StreamExt as _;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[path = "api_load/confined.rs"]
mod confined;

const CALLERS: [usize; 3] = [1, 64, 256];
const CONNECTIONS: usize = 4;

type Admin = OrchestratorClient<AuthChannel>;

/// `total` calls spread over `callers` tasks; calls/s and latencies.
async fn drive<F, Fut>(total: usize, callers: usize, call: F) -> (f64, Samples)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let call = Arc::clone(&call);
        let share = total / callers + usize::from(caller < total % callers);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                call(caller).await;
                mine.push(t.elapsed());
            }
            mine
        }));
    }
    let mut all = Vec::with_capacity(total);
    for task in tasks {
        all.extend(task.await.expect("caller"));
    }
    (
        total as f64 / started.elapsed().as_secs_f64(),
        Samples::new(all),
    )
}

fn row(what: &str, callers: usize, rate: f64, samples: &Samples, base: Option<f64>) {
    row_beside(what, callers, rate, samples, base, None);
}

/// A row with the ratio to the health call and, on PostgreSQL, to pgbench.
fn row_beside(
    what: &str,
    callers: usize,
    rate: f64,
    samples: &Samples,
    base: Option<f64>,
    database: Option<f64>,
) {
    let ratio = |of: Option<f64>| of.map_or(String::new(), |b| format!("{:.2}×", rate / b));
    println!(
        "| {what} | {callers} | {rate:.0} | {} | {} | {} | {} |",
        ratio(base),
        ratio(database),
        ms(samples.median()),
        ms(samples.percentile(99.0))
    );
}

/// Most clients pgbench opens.
const PGBENCH_CLIENTS: usize = 64;

/// What pgbench does at the same concurrency as a row: the same work done
/// by the database's own client, its limit on this machine.
struct Pgbench {
    url: String,
    scripts: tempfile::TempDir,
}

impl Pgbench {
    /// For the database `url` (its schema on the search path); the table
    /// of the INSERT rows is made in that schema.
    fn new(url: &str) -> Self {
        let bench = Self {
            url: url.to_owned(),
            scripts: tempfile::tempdir().expect("a directory for pgbench's scripts"),
        };
        let made = std::process::Command::new("psql")
            .args([url, "-q", "-v", "ON_ERROR_STOP=1", "-c"])
            .arg("CREATE TABLE bench_inserts (id text PRIMARY KEY, description text NOT NULL, at_ms bigint NOT NULL)")
            .status()
            .expect("psql (postgresql-client) runs");
        assert!(made.success(), "psql made the table of pgbench's inserts");
        bench
    }

    /// Transactions per second of `script` run `total` times by `callers`
    /// clients (prepared statements, as the store's), with `vars`. Clients
    /// past [`PGBENCH_CLIENTS`] are not opened: the server's connections
    /// (max_connections, 100 by default) would run out.
    fn rate(
        &self,
        name: &str,
        script: &str,
        callers: usize,
        total: usize,
        vars: &[(&str, &str)],
    ) -> f64 {
        let callers = callers.min(PGBENCH_CLIENTS);
        let file = self.scripts.path().join(format!("{name}.sql"));
        std::fs::write(&file, script).expect("pgbench's script");
        let mut command = std::process::Command::new("pgbench");
        command.args(["-n", "-M", "prepared"]);
        command.arg(format!("-j{}", callers.min(2)));
        command.arg(format!("-c{callers}"));
        command.arg(format!("-t{}", (total / callers).max(1)));
        command.arg("-f").arg(&file);
        for (name, value) in vars {
            command.arg("-D").arg(format!("{name}={value}"));
        }
        let out = command
            .arg(&self.url)
            .output()
            .expect("pgbench (postgresql-client) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pgbench: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("pgbench's rate in: {text}"))
    }
}

/// Admin clients over [`CONNECTIONS`] connections.
async fn admins(o: &OrchestratorProcess) -> Vec<Admin> {
    let mut all = Vec::new();
    for _ in 0..CONNECTIONS {
        all.push(chorus_tests::orchestrator::client_at(o.addr, &o.admin_key).await);
    }
    all
}

async fn throughput(database: &str, url: &str, data: &Path, total: usize) {
    // One admin key makes every call: its share is sized as an operator
    // would for one busy service (the default share is 64 calls).
    let o = OrchestratorProcess::spawn(data, url, &["--quota", "admin=1024/1024"]).await;
    let clients = admins(&o).await;
    let root = tempfile::tempdir().expect("root");
    let mut admin = clients[0].clone();
    let ws = workspace(&mut admin, "load", root.path()).await;
    let mut task = None;
    for i in 0..100 {
        task = Some(
            admin
                .create_task(pb::CreateTaskRequest {
                    budget: None,
                    workspace_id: ws.id.clone(),
                    description: format!("task {i}: a description of ordinary length"),
                    source: None,
                    ..Default::default()
                })
                .await
                .expect("task")
                .into_inner(),
        );
    }
    let task_id = task.expect("a task").id;
    let health: Vec<HealthClient<Channel>> = {
        let mut all = Vec::new();
        for _ in 0..CONNECTIONS {
            all.push(HealthClient::new(channel_to(o.addr).await));
        }
        all
    };
    let pgbench = (database == "PostgreSQL").then(|| Pgbench::new(url));
    println!("\n#### {database}\n");
    println!("| call | callers | calls/s | × health | × pgbench | p50 | p99 |");
    println!("|---|---|---|---|---|---|---|");
    for callers in CALLERS {
        let h = health.clone();
        let (base, samples) = drive(total, callers, move |c| {
            let mut client = h[c % CONNECTIONS].clone();
            async move {
                client
                    .check(HealthCheckRequest::default())
                    .await
                    .expect("health");
            }
        })
        .await;
        row("health Check (bare tonic)", callers, base, &samples, None);
        let (a, id) = (clients.clone(), task_id.clone());
        let (rate, samples) = drive(total, callers, move |c| {
            let mut client = a[c % CONNECTIONS].clone();
            let id = id.clone();
            async move {
                client
                    .get_task(pb::GetTaskRequest {
                        id,
                        ..Default::default()
                    })
                    .await
                    .expect("GetTask");
            }
        })
        .await;
        let select = pgbench.as_ref().map(|p| {
            let rate = p.rate(
                "select",
                "SELECT * FROM tasks WHERE id = :id;\n",
                callers,
                total,
                &[("id", &task_id)],
            );
            println!(
                "| pgbench: the task row's SELECT | {} | {rate:.0} | | | | |",
                callers.min(PGBENCH_CLIENTS)
            );
            rate
        });
        row_beside("GetTask", callers, rate, &samples, Some(base), select);
        let (a, w) = (clients.clone(), ws.id.clone());
        let (rate, samples) = drive(total / 4, callers, move |c| {
            let mut client = a[c % CONNECTIONS].clone();
            let workspace_id = w.clone();
            async move {
                client
                    .list_tasks(pb::ListTasksRequest {
                        workspace_id,
                        page_size: 50,
                        ..Default::default()
                    })
                    .await
                    .expect("ListTasks");
            }
        })
        .await;
        row("ListTasks (50 tasks)", callers, rate, &samples, Some(base));
        let (a, w) = (clients.clone(), ws.id.clone());
        let (rate, samples) = drive(total / 4, callers, move |c| {
            let mut client = a[c % CONNECTIONS].clone();
            let workspace_id = w.clone();
            async move {
                client
                    .create_task(pb::CreateTaskRequest {
                        budget: None,
                        workspace_id,
                        description: "a new task".into(),
                        source: None,
                        ..Default::default()
                    })
                    .await
                    .expect("CreateTask");
            }
        })
        .await;
        let insert = pgbench.as_ref().map(|p| {
            let rate = p.rate(
                "insert",
                "INSERT INTO bench_inserts VALUES (gen_random_uuid()::text, 'a new task', 0);\n",
                callers,
                total / 4,
                &[],
            );
            println!(
                "| pgbench: an INSERT of a task-sized row | {} | {rate:.0} | | | | |",
                callers.min(PGBENCH_CLIENTS)
            );
            rate
        });
        row_beside("CreateTask", callers, rate, &samples, Some(base), insert);
    }
    let (now, peak) = attacker::memory_mib(o.pid());
    println!("\norchestrator resident memory: {now} MiB now, {peak} MiB at its peak");
    o.kill().await;
}

/// The legitimate callers of the attack section — an admin's GetTask and an
/// agent's file.read — on a thread and runtime of their own: in use they are
/// other processes, and their latency must not include waiting behind the
/// attack's tasks in this process's runtime.
struct Legit {
    task_id: String,
    asks: tokio::sync::mpsc::Sender<(usize, tokio::sync::oneshot::Sender<(Duration, Duration)>)>,
}

impl Legit {
    fn start(o: &OrchestratorProcess, run: &pb::OpenRunResponse) -> Self {
        let task_id = run.run.as_ref().expect("run").task_id.clone();
        let (addr, tool_exec_addr) = (o.addr, o.tool_exec_addr);
        let (admin_key, token, id) = (o.admin_key.clone(), run.token.clone(), task_id.clone());
        let (asks, mut requests) = tokio::sync::mpsc::channel::<(
            usize,
            tokio::sync::oneshot::Sender<(Duration, Duration)>,
        )>(1);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the legitimate callers' runtime");
            runtime.block_on(async move {
                let mut admin = chorus_tests::orchestrator::client_at(addr, &admin_key).await;
                let mut agent = ToolExecClient::with_interceptor(
                    channel_to(tool_exec_addr).await,
                    Bearer::new(&token),
                );
                while let Some((n, reply)) = requests.recv().await {
                    let _ = reply.send(p99s(&mut admin, &mut agent, &id, n).await);
                }
            });
        });
        Self { task_id, asks }
    }

    /// p99 of `n` sequential admin GetTask and agent file.read calls.
    async fn p99(&self, n: usize) -> (Duration, Duration) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.asks
            .send((n, reply))
            .await
            .expect("the legitimate callers");
        answer.await.expect("their p99")
    }
}

async fn p99s(
    admin: &mut Admin,
    agent: &mut ToolExecClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>,
    task_id: &str,
    n: usize,
) -> (Duration, Duration) {
    let mut gets = Vec::with_capacity(n);
    let mut reads = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        admin
            .get_task(pb::GetTaskRequest {
                id: task_id.to_owned(),
                ..Default::default()
            })
            .await
            .expect("an admin's GetTask");
        gets.push(t.elapsed());
        let t = Instant::now();
        agent
            .execute_tool(attacker::tool_call(
                "file.read",
                &json!({"path": "notes.txt"}),
            ))
            .await
            .expect("an agent's file.read");
        reads.push(t.elapsed());
    }
    (
        Samples::new(gets).percentile(99.0),
        Samples::new(reads).percentile(99.0),
    )
}

async fn attacks(data: &Path, n: usize) {
    let url = data.join("attacks.db").display().to_string();
    // CHORUS_BENCH_ORCHESTRATOR_ENV=NAME=VALUE,…: the orchestrator's
    // environment beside the defaults (e.g. the allocator's settings).
    let env = std::env::var("CHORUS_BENCH_ORCHESTRATOR_ENV").unwrap_or_default();
    let env: Vec<(&str, &str)> = env
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    let o = OrchestratorProcess::spawn_with_env(data, &url, &[], &env).await;
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "hello").expect("file");
    chorus_sandbox::testing::give_to_test_user(root.path());
    let mut admin = o.client().await;
    let ws = workspace(&mut admin, "attacked", root.path()).await;
    add_agent(&mut admin, &ws, "reader", &["file.read"], "").await;
    let run = opened_run(&mut admin, &ws, "reader", "read").await;
    let viewer = admin
        .create_api_key(pb::CreateApiKeyRequest {
            name: "dashboard".into(),
            role: pb::Role::Viewer.into(),
        })
        .await
        .expect("viewer")
        .into_inner()
        .secret;
    for i in 0..200 {
        admin
            .create_task(pb::CreateTaskRequest {
                budget: None,
                workspace_id: ws.id.clone(),
                description: format!("{i} {}", "x".repeat(60 * 1024)),
                source: None,
                ..Default::default()
            })
            .await
            .expect("large task");
    }
    let legit = Legit::start(&o, &run);
    println!("\n| during | admin GetTask p99 | agent file.read p99 |");
    println!("|---|---|---|");
    let (get, read) = legit.p99(n).await;
    println!("| nothing (idle) | {} | {} |", ms(get), ms(read));

    // 600 calls whose message never comes, on both ports.
    let mut held = Vec::new();
    let mut streams = Vec::new();
    for (addr, path) in [
        (o.addr, "/chorus.orchestrator.v1.Orchestrator/ListTasks"),
        (o.tool_exec_addr, "/chorus.tools.v1.ToolExec/GetStatus"),
    ] {
        for _ in 0..2 {
            let mut h2 = attacker::connect(addr, None).await;
            for _ in 0..150 {
                streams.push(attacker::bodiless(&mut h2, path, &viewer));
            }
            held.push(h2);
        }
    }
    let (get, read) = legit.p99(n).await;
    println!(
        "| a viewer's 600 calls without their message (both ports) | {} | {} |",
        ms(get),
        ms(read)
    );
    drop((held, streams));

    // 60 ListTasks answers never read.
    let list = prost::Message::encode_to_vec(&pb::ListTasksRequest {
        page_size: 500,
        ..Default::default()
    });
    let mut held = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let mut h2 = attacker::connect(o.addr, Some(0)).await;
        for _ in 0..15 {
            answers.push(attacker::unread(
                &mut h2,
                "/chorus.orchestrator.v1.Orchestrator/ListTasks",
                &viewer,
                &list,
            ));
        }
        held.push(h2);
    }
    let (get, read) = legit.p99(n).await;
    println!(
        "| a viewer's 60 ListTasks of 1 MiB never read | {} | {} |",
        ms(get),
        ms(read)
    );
    drop((held, answers));

    // 2,000 connections that never say a word.
    let mut silent = Vec::new();
    for _ in 0..2000 {
        silent.push(
            tokio::net::TcpStream::connect(o.addr)
                .await
                .expect("connect"),
        );
    }
    let (get, read) = legit.p99(n).await;
    println!("| 2,000 silent connections | {} | {} |", ms(get), ms(read));
    drop(silent);

    // 1,024 reflection streams without a credential, left open.
    let mut reflections = Vec::new();
    for i in 0..1024 {
        let channel = if i % 256 == 0 || reflections.is_empty() {
            channel_to(o.addr).await
        } else {
            reflections
                .last()
                .map(|(c, _, _): &(Channel, _, _)| c.clone())
                .expect("a channel")
        };
        let (sender, requests) = tokio::sync::mpsc::channel(1);
        let _ = sender
            .send(tonic_reflection::pb::v1::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(
                    tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                        String::new(),
                    ),
                ),
            })
            .await;
        let answer =
            tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
                channel.clone(),
            )
            .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(requests))
            .await;
        reflections.push((
            channel,
            sender,
            answer.ok().map(tonic::Response::into_inner),
        ));
    }
    let (get, read) = legit.p99(n).await;
    println!(
        "| 1,024 reflection streams without a credential | {} | {} |",
        ms(get),
        ms(read)
    );
    drop(reflections);

    // A viewer's 1,024 WatchTask streams, each from the task's last event (a
    // replay of its whole history, unread, would fill the connection's window).
    let last = admin
        .get_task(pb::GetTaskRequest {
            id: legit.task_id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner()
        .last_sequence;
    let mut watches = Vec::new();
    for i in 0..1024 {
        if i % 256 == 0 {
            watches.push((
                OrchestratorClient::with_interceptor(
                    channel_to(o.addr).await,
                    Bearer::new(&viewer),
                ),
                Vec::new(),
            ));
        }
        let (client, open) = watches.last_mut().expect("a client");
        let opened = tokio::time::timeout(
            Duration::from_secs(10),
            client.watch_task(pb::WatchTaskRequest {
                task_id: legit.task_id.clone(),
                after_sequence: last.saturating_sub(1),
                follow: true,
                until_needed: false,
            }),
        )
        .await;
        match opened {
            Ok(Ok(watch)) => {
                let mut watch = watch.into_inner();
                let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await;
                assert!(first.is_ok(), "watch {i}: no first event in 10 s");
                open.push(watch);
            }
            Ok(Err(_refused)) => {}
            Err(_) => panic!("watch {i}: not answered in 10 s"),
        }
    }
    let (get, read) = legit.p99(n).await;
    println!(
        "| a viewer's 1,024 WatchTask streams | {} | {} |",
        ms(get),
        ms(read)
    );
    drop(watches);

    // Tokens of an unknown signing key, 300 at a time, all along.
    let stranger = chorus_run_token::RunTokenSigner::generate().mint(
        &chorus_run_token::RunGrant {
            run_id: "made-up".into(),
            task_id: legit.task_id.clone(),
            agent: "reader".into(),
            tools: vec!["file.read".into()],
            root: "/".into(),
            egress: Vec::new(),
            epoch: 0,
        },
        Duration::from_secs(600),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let channel = channel_to(o.tool_exec_addr).await;
    let flood: Vec<_> = (0..300)
        .map(|_| {
            let mut client =
                ToolExecClient::with_interceptor(channel.clone(), Bearer::new(&stranger));
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    let _ = client
                        .execute_tool(ExecuteToolRequest {
                            tool: "file.read".into(),
                            arguments: None,
                        })
                        .await;
                }
            })
        })
        .collect();
    let (get, read) = legit.p99(n).await;
    println!(
        "| 300 callers with tokens of an unknown key, without pause | {} | {} |",
        ms(get),
        ms(read)
    );
    stop.cancel();
    for task in flood {
        let _ = task.await;
    }
    confined::attacks(&o, &legit, &stranger, n).await;
    let (now, peak) = attacker::memory_mib(o.pid());
    println!(
        "\norchestrator resident memory after the attacks: {now} MiB now, {peak} MiB at its peak"
    );
    o.kill().await;
}

async fn many_runs(data: &Path) {
    const RUNS: usize = 1000;
    const CALLS: usize = 4;
    let url = data.join("many.db").display().to_string();
    let o = OrchestratorProcess::spawn(data, &url, &[]).await;
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "hello").expect("file");
    chorus_sandbox::testing::give_to_test_user(root.path());
    let mut admin = o.client().await;
    let ws = workspace(&mut admin, "many", root.path()).await;
    add_agent(&mut admin, &ws, "reader", &["file.read"], "").await;
    let mut runs = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        runs.push(opened_run(&mut admin, &ws, "reader", &format!("read {i}")).await);
    }
    let (_, before) = attacker::memory_mib(o.pid());
    let started = Instant::now();
    let mut calls = Vec::with_capacity(RUNS * CALLS);
    for run in &runs {
        for _ in 0..CALLS {
            let child = attacker::agent_call(run, r#"{"tool":"file.read","path":"notes.txt"}"#);
            let t = Instant::now();
            calls.push(tokio::spawn(async move {
                let out = child.wait_with_output().await.expect("ran");
                (out.status.success(), t.elapsed())
            }));
        }
    }
    let mut failed = 0;
    let mut latencies = Vec::with_capacity(RUNS * CALLS);
    for call in calls {
        let (ok, took) = call.await.expect("task");
        failed += usize::from(!ok);
        latencies.push(took);
    }
    let wall = started.elapsed();
    let samples = Samples::new(latencies);
    let (now, peak) = attacker::memory_mib(o.pid());
    println!(
        "\n| runs × calls at once | wall | failed | call p50 | call p99 | orchestrator RSS before → after (peak) |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {RUNS} × {CALLS} | {:.1} s | {failed} | {} | {} | {before} → {now} MiB ({peak} MiB) |",
        wall.as_secs_f64(),
        ms(samples.median()),
        ms(samples.percentile(99.0))
    );
    o.kill().await;
}

fn main() {
    let total = env_number("CHORUS_BENCH_API_CALLS", 4000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let only = std::env::var("CHORUS_BENCH_ONLY").unwrap_or_default();
    runtime.block_on(async move {
        let data = tempfile::tempdir().expect("data");
        if only == "attacks" {
            attacks(data.path(), total / 10).await;
            return;
        }
        println!("### API throughput ({total} calls per row; ListTasks and CreateTask a quarter)");
        throughput(
            "SQLite",
            &data.path().join("load.db").display().to_string(),
            data.path(),
            total,
        )
        .await;
        let pg_dir = tempfile::tempdir().expect("pg data");
        let databases = chorus_tests::db::databases(pg_dir.path());
        if let Some(pg) = databases.iter().find(|d| d.backend == "postgres") {
            throughput("PostgreSQL", &pg.url, pg_dir.path(), total).await;
        }
        if only == "throughput" {
            return;
        }
        println!(
            "\n### A legitimate caller during attacks (p99 of {} calls each)",
            total / 10
        );
        attacks(data.path(), total / 10).await;
        println!("\n### 1,000 runs making 4 tool calls at once (chorus-tools processes)");
        many_runs(data.path()).await;
    });
}
