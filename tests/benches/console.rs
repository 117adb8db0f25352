//! The web console's numbers, in Debian's Chromium driven by playwright-core
//! (`tests/console/bench.mjs`) against the release orchestrator:
//!
//! - delivery: 200 tool calls (an agent's `task.comment`, 20 ms apart)
//!   committed while the task's page is open; each timed from the event's
//!   commit stamp (`atMs`) to its row appearing in the page, beside the same
//!   events received by a plain WatchTask gRPC client (the baseline);
//! - page weight: every byte the console's pages load;
//! - a task with 10,000 events (5,000 `task.comment` calls): from opening its
//!   page to every row shown, the long tasks meanwhile, the next frame after,
//!   and a click to another page.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench console`
//! (needs Chromium and playwright-core, as the console test does).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_tests::agents::{Client, add_agent, planned_task};
use chorus_tests::credentials::Bearer;
use chorus_tests::orchestrator::{OrchestratorProcess, channel_to};
use chorus_tests::stats::{Samples, env_number};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_stream::StreamExt;

const LIVE_CALLS: usize = 200;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
}

/// A run of `agent` on a new planned task, and its agent-tools client.
async fn run_of(
    client: &mut Client,
    ws: &pb::Workspace,
    addr: std::net::SocketAddr,
    description: &str,
) -> (
    pb::Task,
    AgentToolsClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
    >,
) {
    let task = planned_task(client, ws, description).await;
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "commenter".into(),
            ttl_secs: 3600,
        })
        .await
        .expect("open run")
        .into_inner();
    let agent =
        AgentToolsClient::with_interceptor(channel_to(addr).await, Bearer::new(&opened.token));
    (task, agent)
}

async fn comment(
    agent: &mut AgentToolsClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
    >,
    n: usize,
) {
    let arguments = chorus_proto::json::to_struct(
        json!({ "text": format!("note {n}") })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    agent
        .call_tool(pb::CallToolRequest {
            tool: "task.comment".into(),
            arguments: Some(arguments),
        })
        .await
        .expect("task.comment");
}

async fn run() {
    let big_calls = env_number("CHORUS_BENCH_CALLS", 5_000);
    let modules = std::env::var("CHORUS_TEST_NODE_MODULES")
        .expect("CHORUS_TEST_NODE_MODULES names playwright-core's node_modules");
    let chromium =
        std::env::var("CHORUS_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let dir = tempfile::tempdir().expect("dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let database = dir.path().join("chorus.db").display().to_string();
    let orchestrator =
        OrchestratorProcess::spawn(dir.path(), &database, &["--console-listen", &listen]).await;
    let mut client = orchestrator.client().await;
    let root = tempfile::tempdir().expect("root");
    let ws = chorus_tests::agents::workspace(&mut client, "bench", root.path()).await;
    add_agent(&mut client, &ws, "commenter", &["task.comment"], "").await;

    // The big task first: its events are in the store before the page opens.
    let (big, mut agent) = run_of(&mut client, &ws, orchestrator.addr, "many events").await;
    for n in 0..big_calls {
        comment(&mut agent, n).await;
    }
    let big_events = client
        .get_task(pb::GetTaskRequest {
            task_id: big.id.clone(),
            ..Default::default()
        })
        .await
        .expect("task")
        .into_inner()
        .last_sequence;
    let (live, mut live_agent) = run_of(&mut client, &ws, orchestrator.addr, "live events").await;

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("console/bench.mjs");
    let mut node = tokio::process::Command::new("node")
        .arg(&script)
        .env("CONSOLE_URL", format!("http://{listen}"))
        .env("ADMIN_KEY", &orchestrator.admin_key)
        .env("TASK_A", &live.id)
        .env("TASK_B", &big.id)
        .env("EVENTS_A", LIVE_CALLS.to_string())
        // Rows shown: every comment and every tool call (run_opened and the
        // status changes are a handful more).
        .env("EVENTS_B", (2 * big_calls).to_string())
        .env("CHROMIUM", &chromium)
        .env("CHORUS_TEST_NODE_MODULES", &modules)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let mut out = BufReader::new(node.stdout.take().expect("stdout")).lines();
    let mut input = node.stdin.take().expect("stdin");
    assert_eq!(
        out.next_line().await.expect("read").as_deref(),
        Some("ready")
    );

    // The baseline: the same events to a plain gRPC follower.
    let mut watch = client
        .watch_task(pb::WatchTaskRequest {
            task_id: live.id.clone(),
            after_sequence: 0,
            follow: true,
            until_needed: false,
        })
        .await
        .expect("watch")
        .into_inner();
    let baseline = tokio::spawn(async move {
        let mut latencies = Vec::with_capacity(LIVE_CALLS);
        while latencies.len() < LIVE_CALLS {
            let event = watch.next().await.expect("open").expect("event");
            if event.kind == "tool_executed" {
                latencies.push(now_ms() - event.at_ms);
            }
        }
        latencies
    });
    let mut pace = tokio::time::interval(Duration::from_millis(20));
    for n in 0..LIVE_CALLS {
        pace.tick().await;
        comment(&mut live_agent, n).await;
    }
    input.write_all(b"done\n").await.expect("tell node");
    let results: Value =
        serde_json::from_str(&out.next_line().await.expect("read").expect("results"))
            .expect("JSON results");
    let _ = node.wait().await;
    let baseline = baseline.await.expect("baseline");

    let millis = |v: &[i64]| {
        Samples::new(
            v.iter()
                .map(|ms| Duration::from_millis(u64::try_from(*ms).unwrap_or(0)))
                .collect(),
        )
    };
    let browser: Vec<i64> = results["latencies"]
        .as_array()
        .expect("latencies")
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    println!("| what | p50 | p99 | n |");
    println!("|---|---|---|---|");
    for (what, v) in [
        ("commit → row in the open page (console)", &browser),
        (
            "commit → event at a WatchTask gRPC client (baseline)",
            &baseline,
        ),
    ] {
        let s = millis(v);
        println!(
            "| {what} | {} ms | {} ms | {} |",
            s.percentile(50.0).as_millis(),
            s.percentile(99.0).as_millis(),
            s.len()
        );
    }
    let weight = results["weight"].as_array().expect("weight");
    let body: u64 = weight.iter().filter_map(|e| e["body"].as_u64()).sum();
    let transfer: u64 = weight.iter().filter_map(|e| e["transfer"].as_u64()).sum();
    println!();
    println!(
        "page weight: {} files, {body} bytes ({transfer} bytes over the wire, uncompressed)",
        weight.len()
    );
    let load = &results["load"];
    let long: Vec<f64> = load["longTasks"]
        .as_array()
        .expect("long tasks")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    println!(
        "task page with {big_events} events ({} rows): every row shown after {:.0} ms; long tasks meanwhile: {} (longest {:.0} ms, total {:.0} ms); next frame after {:.1} ms; a click to another page answered in {} ms",
        load["items"],
        load["shown"].as_f64().unwrap_or_default(),
        long.len(),
        long.iter().copied().fold(0.0, f64::max),
        long.iter().sum::<f64>(),
        load["frame"].as_f64().unwrap_or_default(),
        load["navigateAway"]
    );
    orchestrator.stop().await;
}
