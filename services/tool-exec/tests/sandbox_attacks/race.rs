use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use chorus_catalog::outputs;
use chorus_tool_exec::Limits;
use serde_json::{Value, json};
use tonic::Code;

use crate::arena::*;
use crate::fifo_swap::FifoSwap;

// ---- a directory swapped for a symlink while tools run ---------------------------------

/// Lets other threads run `n` times: the swapper's way to dwell without sleeping.
fn yield_times(n: usize) {
    for _ in 0..n {
        std::thread::yield_now();
    }
}

/// Moves `from` to `to`; whatever a tool call created at `to` meanwhile is parked
/// in the stash first.
fn place(from: &Path, to: &Path, stash: &Path, parked: &AtomicUsize) {
    while std::fs::rename(from, to).is_err() {
        let n = parked.fetch_add(1, Ordering::Relaxed);
        // Ignore failure: the next rename attempt tells whether `to` is free now.
        let _ = std::fs::rename(to, stash.join(format!("parked-{n}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_an_outside_symlink_mid_call_never_lets_a_write_out() {
    const ROUNDS: usize = 100;
    let a = Arena::new();
    let swapdir = a.root.join("swapdir");
    std::fs::create_dir(&swapdir).expect("mkdir");
    std::fs::write(swapdir.join("f.txt"), "inside f\n").expect("write");
    let parked_real = a.stash.join("real");
    let parked_link = a.stash.join("link");
    symlink(a.outside.join("private"), &parked_link).expect("symlink");
    let before = a.outside_snapshot();

    let stop = Arc::new(AtomicBool::new(false));
    let (first_swap, swapped) = mpsc::channel();
    let swapper = {
        let stop = Arc::clone(&stop);
        let stash = a.stash.clone();
        std::thread::spawn(move || {
            let parked = AtomicUsize::new(0);
            let mut swaps = 0usize;
            while !stop.load(Ordering::Relaxed) {
                // Directory out, symlink in ...
                place(&swapdir, &parked_real, &stash, &parked);
                place(&parked_link, &swapdir, &stash, &parked);
                // ... stay a varying while, so that swaps land at every step of a call ...
                yield_times(swaps % 5);
                // ... and back.
                place(&swapdir, &parked_link, &stash, &parked);
                place(&parked_real, &swapdir, &stash, &parked);
                yield_times(swaps % 40);
                swaps += 1;
                if swaps == 1 {
                    let _ = first_swap.send(());
                }
            }
            swaps
        })
    };
    swapped.recv().expect("the swapper swapped once");

    let mut ok = 0usize;
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..ROUNDS {
        let calls = [
            (
                "file.create",
                json!({ "path": format!("swapdir/new-{i}.txt"), "content": format!("race {i}\n") }),
            ),
            (
                "file.write",
                json!({ "path": "swapdir/f.txt", "content": format!("written {i}\n") }),
            ),
            ("file.read", read("swapdir/f.txt")),
        ];
        for (tool, args) in calls {
            match a.call(tool, args.clone()).await {
                Ok(outcome) => {
                    ok += 1;
                    let shown = outcome.output.to_string();
                    assert!(
                        !shown.contains(SECRET),
                        "{tool} {args} read outside: {shown}"
                    );
                }
                Err(err) => {
                    *refused.entry(format!("{:?}", err.code())).or_default() += 1;
                    assert!(
                        matches!(
                            err.code(),
                            Code::PermissionDenied | Code::InvalidArgument | Code::NotFound
                        ),
                        "{tool} {args}: {err}"
                    );
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper thread");

    assert_eq!(before, a.outside_snapshot(), "the outside tree changed");
    assert_eq!(
        std::fs::read(a.outside.join("private/f.txt")).expect("read"),
        b"TOPSECRET private f\n"
    );
    assert_eq!(ok + refused.values().sum::<usize>(), ROUNDS * 3);
    eprintln!("race: {ok} calls succeeded, refused {refused:?}, {swaps} swaps");
}

// ---- a file swapped for a FIFO while tools read it -------------------------------------

const SWAPPED_CONTENT: &str = "hello from the regular file";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_swapped_for_a_fifo_mid_call_never_blocks_a_tool() {
    const ROUNDS: usize = 150;
    let limits = Limits {
        tool_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    // Past this a call is taken to be blocked; no call may even reach its deadline.
    let blocked_after = limits.tool_timeout * 3;
    let a = Arena::with_limits(limits);
    let dir = a.root.join("swap");
    std::fs::create_dir(&dir).expect("mkdir");
    let swap = FifoSwap::start(&dir, "f.txt", "pipe", &format!("{SWAPPED_CONTENT}\n"));

    let mut answered = 0usize;
    let mut refused = 0usize;
    for _ in 0..ROUNDS {
        let calls = [
            ("file.read", read("swap/f.txt")),
            (
                "file.patch",
                json!({ "path": "swap/f.txt", "patches": [{ "find": "hello", "replace": "hello" }] }),
            ),
            (
                "file.search",
                json!({ "path": "swap/f.txt", "pattern": "hello" }),
            ),
            ("file.search", json!({ "path": "swap", "pattern": "hello" })),
        ];
        for (tool, args) in calls {
            let result = tokio::time::timeout(blocked_after, a.call(tool, args.clone()))
                .await
                .unwrap_or_else(|_| panic!("{tool} {args} blocked"));
            match result {
                Ok(outcome) => {
                    answered += 1;
                    assert_correct(tool, &args, outcome.output);
                }
                Err(err) => {
                    refused += 1;
                    assert_eq!(err.code(), Code::InvalidArgument, "{tool} {args}: {err}");
                    assert!(
                        err.to_string()
                            .contains("'swap/f.txt' is a FIFO (named pipe), not a regular file"),
                        "{tool} {args}: {err}"
                    );
                }
            }
        }
    }
    let swaps = swap.stop();
    assert!(
        answered > 0 && refused > 0,
        "the race did not show both kinds: {answered} answered, {refused} refused"
    );
    eprintln!("fifo race: {answered} answered, {refused} refused, {swaps} swaps");
}

/// An answer given while the names swapped: the regular file's content, never
/// anything else.
fn assert_correct(tool: &str, args: &Value, output: Value) {
    match tool {
        "file.read" => {
            let read: outputs::FileRead = serde_json::from_value(output).expect("read output");
            assert_eq!(
                read.content,
                format!("     1\t{SWAPPED_CONTENT}\n"),
                "{args}"
            );
        }
        "file.patch" => {
            let patched: outputs::FilePatched =
                serde_json::from_value(output).expect("patch output");
            assert_eq!(patched.patches_applied, 1, "{args}");
            assert_eq!(patched.bytes_written, SWAPPED_CONTENT.len() as u64 + 1);
        }
        _ => {
            let found: outputs::FileSearch = serde_json::from_value(output).expect("search output");
            // A file named directly matches once; a walk may meet the regular
            // file under either name, both or neither.
            let expected = if args["path"] == "swap" { 0..=2 } else { 1..=1 };
            assert!(expected.contains(&found.matches.len()), "{args}: {found:?}");
            for m in &found.matches {
                assert_eq!(m.content, SWAPPED_CONTENT, "{args}: {found:?}");
            }
        }
    }
}
