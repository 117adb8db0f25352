//! `file.read` of a small file four ways, side by side: a call on an open
//! MCP session over stdio (`chorus-tools mcp`, started once, driven by the
//! official Rust SDK's client as an agent CLI drives it), a call on an open
//! MCP session over Streamable HTTP (tool-exec's endpoint, a keep-alive
//! HTTP/1.1 client), a one-shot `chorus-tools` process per call (the shell
//! form), and `cat` of the same file. Also the resident MCP server's memory
//! after the calls.
//!
//! `cargo bench -p chorus-tools --bench mcp_vs_shell` (CHORUS_BENCH_CALLS sets
//! the calls per row, default 500). tool-exec runs in this process, on
//! loopback.

use std::process::Command;
use std::time::Instant;

use chorus_tests::ToolExec;
use chorus_tests::stats::{Samples, ms, spawned};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;

/// Resident and peak resident memory (KiB) of `pid`.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let calls: usize = std::env::var("CHORUS_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let endpoint = chorus_tests::mcp::endpoint();
    let mcp_url = endpoint.url(false).expect("the endpoint's address");
    let service = runtime.block_on(ToolExec::start_configured(
        |config| config.mcp = Some(endpoint),
        chorus_run_token::RunTokenSigner::generate(),
    ));
    let workspace = tempfile::tempdir().expect("workspace");
    let file = workspace.path().join("small.txt");
    std::fs::write(&file, "a small file\n".repeat(40)).expect("seed");
    let token = service.token(workspace.path(), &["file.read"]);
    let bin = env!("CARGO_BIN_EXE_chorus-tools");
    let addr = service.addr.to_string();

    // One MCP session for every call of its row.
    let (session, server_pid, started_in) = runtime.block_on(async {
        let mut server = tokio::process::Command::new(bin);
        server
            .arg("mcp")
            .env("CHORUS_RUN_TOKEN", &token)
            .env("CHORUS_TOOLS_ADDR", &addr);
        let started = Instant::now();
        let transport = rmcp::transport::TokioChildProcess::new(server).expect("start the server");
        let pid = transport.id().expect("pid");
        let session = ().serve(transport).await.expect("MCP session");
        let tools = session.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|t| t.name == "file_read"), "{tools:?}");
        (session, pid, started.elapsed())
    });
    let arguments = serde_json::json!({"path": "small.txt"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let call = || {
        let request = CallToolRequestParams::new("file_read").with_arguments(arguments.clone());
        let started = Instant::now();
        let result = runtime
            .block_on(session.call_tool(request))
            .expect("tools/call");
        let elapsed = started.elapsed();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        elapsed
    };
    for _ in 0..calls / 10 {
        call();
    }
    let mcp = Samples::new((0..calls).map(|_| call()).collect());
    let (rss, peak) = memory_kib(server_pid);

    let http = runtime.block_on(async {
        let mut session = chorus_tests::mcp_http::Session::open(&mcp_url, &token).await;
        let mut call = async || {
            let started = Instant::now();
            let answer = session
                .call("file_read", serde_json::json!({"path": "small.txt"}))
                .await;
            let elapsed = started.elapsed();
            assert!(
                answer["result"]["isError"] != true && answer["result"].is_object(),
                "{answer}"
            );
            elapsed
        };
        for _ in 0..calls / 10 {
            call().await;
        }
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            samples.push(call().await);
        }
        Samples::new(samples)
    });

    let shell = spawned(
        || {
            let mut c = Command::new(bin);
            c.arg(r#"{"tool":"file.read","path":"small.txt"}"#)
                .env("CHORUS_RUN_TOKEN", &token)
                .env("CHORUS_TOOLS_ADDR", &addr);
            c
        },
        calls,
    );
    let cat = spawned(
        || {
            let mut c = Command::new("cat");
            c.arg(&file);
            c
        },
        calls,
    );

    println!(
        "calls per row: {calls} (after {} warm-up calls)",
        calls / 10
    );
    println!("| file.read of a 520-byte file | p50 ms | p90 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        (
            "a call on an open MCP session, stdio (chorus-tools mcp)",
            &mcp,
        ),
        (
            "a call on an open MCP session, Streamable HTTP (tool-exec /mcp)",
            &http,
        ),
        ("a one-shot chorus-tools process (shell form)", &shell),
        ("cat (process start to exit)", &cat),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean())
        );
    }
    println!(
        "MCP session start (spawn, initialize, tools/list): {} ms",
        ms(started_in)
    );
    println!(
        "resident MCP server after {} calls: {} KiB resident, {} KiB peak",
        calls + calls / 10,
        rss,
        peak
    );
    let faster = mcp.median() < cat.median();
    println!(
        "goal, a call on an open session faster than starting cat: {} (p50 {} vs {} ms)",
        if faster { "met" } else { "NOT met" },
        ms(mcp.median()),
        ms(cat.median())
    );
    runtime.block_on(async {
        let _ = session.cancel().await;
        service.stop().await;
    });
}
