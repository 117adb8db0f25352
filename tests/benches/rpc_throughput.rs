//! ExecuteTool throughput with concurrent clients, against a bare tonic unary
//! RPC (gRPC health Check on a server with nothing else) as the baseline for
//! RPC overhead, all served in this process on loopback. Every ExecuteTool
//! passes the authentication layer (the run token's key, signature and
//! expiry); the live-run rows also pass the gate of the all-in-one
//! orchestrator (every claim checked against the stored run, the call recorded
//! in the task's history).
//!
//! `cargo bench -p chorus-tests --bench rpc_throughput`
//! (CHORUS_BENCH_RPC_CALLS sets calls per row, default 20000).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use chorus_proto::json;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_tests::ToolExec;
use chorus_tests::stats::{Samples, ms};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const CONCURRENCY: [usize; 4] = [1, 8, 32, 128];

async fn channel(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}

/// Runs `total` calls spread over `concurrency` tasks; returns calls/s and latencies.
async fn drive<F, Fut>(total: usize, concurrency: usize, call: F) -> (f64, Samples)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let call = Arc::clone(&call);
        let latencies = Arc::clone(&latencies);
        let share = total / concurrency + usize::from(worker < total % concurrency);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                call(worker).await;
                mine.push(t.elapsed());
            }
            latencies.lock().await.extend(mine);
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    let elapsed = started.elapsed();
    let samples = Samples::new(std::mem::take(&mut *latencies.lock().await));
    (total as f64 / elapsed.as_secs_f64(), samples)
}

fn main() {
    let total: usize = std::env::var("CHORUS_BENCH_RPC_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let service = ToolExec::start().await;
        let workspace = tempfile::tempdir().expect("workspace");
        std::fs::write(
            workspace.path().join("small.txt"),
            "a small file\n".repeat(40),
        )
        .expect("seed");
        let token = format!("Bearer {}", service.token(workspace.path(), &["file.read"]));

        // A live run of the all-in-one orchestrator (SQLite): authorize and record.
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        std::fs::write(root.path().join("small.txt"), "a small file\n".repeat(40)).expect("seed");
        // One run makes every call here: its per-credential limit (64 unary
        // calls at once by default) would refuse the 128-caller row, which
        // measures throughput, not that limit.
        let signer = chorus_run_token::load_or_create_signer(data.path()).expect("key pair");
        let orchestrator = chorus_tests::orchestrator::Orchestrator::start_configured(
            &data.path().join("chorus.db").display().to_string(),
            signer,
            true,
            |config| {
                config.serve.capacity.credential_unary = 4 * CONCURRENCY[CONCURRENCY.len() - 1]
            },
        )
        .await;
        let mut admin = orchestrator.client().await;
        let ws = chorus_tests::agents::workspace(&mut admin, "bench", root.path()).await;
        chorus_tests::agents::add_agent(&mut admin, &ws, "reader", &["file.read"], "").await;
        let task = chorus_tests::agents::planned_task(&mut admin, &ws, "read").await;
        let run_token = admin
            .open_run(chorus_proto::orchestrator::v1::OpenRunRequest {
                task_id: task.id,
                agent: "reader".into(),
                ttl_secs: 0,
            })
            .await
            .expect("open run")
            .into_inner()
            .token;
        let live = (
            orchestrator.tool_exec_addr.to_string(),
            format!("Bearer {run_token}"),
        );

        // The baseline: a tonic server with only the health service.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let bare_addr = listener.local_addr().expect("addr").to_string();
        let (_reporter, health) = tonic_health::server::health_reporter();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                ),
        );

        println!(
            "calls per row: {total}; server and clients share this process's 2 worker threads"
        );
        println!("| rpc | concurrency | calls/s | p50 ms | p99 ms |");
        println!("|---|---|---|---|---|");
        for concurrency in CONCURRENCY {
            // One HTTP/2 connection per 8 concurrent callers.
            let channels = concurrency.div_ceil(8);

            let mut bare = Vec::new();
            for _ in 0..channels {
                bare.push(HealthClient::new(channel(&bare_addr).await));
            }
            let bare = Arc::new(bare);
            let (rate, lat) = drive(total, concurrency, move |w| {
                let mut client = bare[w % bare.len()].clone();
                async move {
                    client
                        .check(HealthCheckRequest {
                            service: String::new(),
                        })
                        .await
                        .expect("check");
                }
            })
            .await;
            println!(
                "| bare tonic (health Check) | {concurrency} | {rate:.0} | {} | {} |",
                ms(lat.median()),
                ms(lat.percentile(99.0))
            );

            let bare_tool_exec = (service.addr.to_string(), token.clone());
            for (label, tool, args, (addr, token)) in [
                (
                    "ExecuteTool help",
                    "help",
                    json!({"tool": "file.read"}),
                    bare_tool_exec.clone(),
                ),
                (
                    "ExecuteTool file.read",
                    "file.read",
                    json!({"path": "small.txt"}),
                    bare_tool_exec.clone(),
                ),
                (
                    "ExecuteTool file.read, live run (gate: authorize + record)",
                    "file.read",
                    json!({"path": "small.txt"}),
                    live.clone(),
                ),
            ] {
                let mut clients = Vec::new();
                for _ in 0..channels {
                    clients.push(ToolExecClient::new(channel(&addr).await));
                }
                let clients = Arc::new(clients);
                let arguments = json::to_struct(args.as_object().cloned().unwrap_or_default());
                let (rate, lat) = drive(total, concurrency, move |w| {
                    let mut client = clients[w % clients.len()].clone();
                    let mut request = tonic::Request::new(ExecuteToolRequest {
                        tool: tool.to_owned(),
                        arguments: Some(arguments.clone()),
                    });
                    request
                        .metadata_mut()
                        .insert("authorization", token.parse().expect("ascii token"));
                    async move {
                        client.execute_tool(request).await.expect("execute");
                    }
                })
                .await;
                println!(
                    "| {label} | {concurrency} | {rate:.0} | {} | {} |",
                    ms(lat.median()),
                    ms(lat.percentile(99.0))
                );
            }
        }
        service.stop().await;
        orchestrator.stop().await;
    });
}
