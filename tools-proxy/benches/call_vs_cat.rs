//! A whole chorus-tools call (process start → result printed) reading a small
//! file, against `cat` of the same file, over many calls.
//!
//! `cargo bench -p chorus-tools --bench call_vs_cat` (CHORUS_BENCH_CALLS sets the
//! number of calls, default 300). tool-exec runs in this process, on loopback.

use std::process::Command;
use std::time::Duration;

use chorus_tests::ToolExec;
use chorus_tests::stats::{ms, spawned};

fn main() {
    let calls: usize = std::env::var("CHORUS_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let service = runtime.block_on(ToolExec::start());
    let workspace = tempfile::tempdir().expect("workspace");
    let file = workspace.path().join("small.txt");
    std::fs::write(&file, "a small file\n".repeat(40)).expect("seed");
    let token = service.token(workspace.path(), &["file.read"]);
    let bin = env!("CARGO_BIN_EXE_chorus-tools");
    let addr = service.addr.to_string();

    let tools = spawned(
        || {
            let mut c = Command::new(bin);
            c.arg(r#"{"tool":"file.read","path":"small.txt"}"#)
                .env("CHORUS_RUN_TOKEN", &token)
                .env("CHORUS_TOOLS_ADDR", &addr);
            c
        },
        calls,
    );
    let version = spawned(
        || {
            let mut c = Command::new(bin);
            c.arg("--version");
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
    println!("| command | median ms | p90 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        ("chorus-tools file.read (small file)", &tools),
        ("chorus-tools --version (process start only)", &version),
        ("cat (same file)", &cat),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean())
        );
    }
    let ratio = tools.median().as_secs_f64() / cat.median().as_secs_f64().max(f64::EPSILON);
    println!(
        "median ratio chorus-tools / cat: {ratio:.2}x; target median <= 5 ms: {}",
        if tools.median() <= Duration::from_millis(5) {
            "met"
        } else {
            "NOT met"
        }
    );
    runtime.block_on(service.stop());
}
