//! The `chorus-tool-exec` binary as an operator runs it: dev key and token
//! commands, configuration from the environment, serving, and SIGTERM shutdown,
//! also while tools are running.

#[path = "support/fifo_swap.rs"]
mod fifo_swap;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use chorus_proto::json;
use chorus_proto::tools::v1 as pb;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_run_token::{KEY_SET_FILE, PUBLIC_KEY_FILE, load_verifier};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fifo_swap::FifoSwap;

const BIN: &str = env!("CARGO_BIN_EXE_chorus-tool-exec");

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CHORUS_DATA_DIR")
        .output()
        .expect("run chorus-tool-exec")
}

#[test]
fn keygen_and_mint_token_give_a_token_the_public_key_verifies() {
    let data = tempfile::tempdir().expect("data dir");
    let workspace = tempfile::tempdir().expect("workspace");
    let data_dir = data.path().to_str().expect("utf8");

    let keygen = run(&["dev", "keygen", "--data-dir", data_dir]);
    assert!(
        keygen.status.success(),
        "{}",
        String::from_utf8_lossy(&keygen.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&keygen.stdout).trim(),
        data.path().join(PUBLIC_KEY_FILE).display().to_string()
    );
    let mode = std::fs::metadata(data.path().join(KEY_SET_FILE))
        .expect("private keys")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the private key is readable only by its owner"
    );

    let mint = run(&[
        "dev",
        "mint-token",
        "--data-dir",
        data_dir,
        "--root",
        workspace.path().to_str().expect("utf8"),
        "--tools",
        "@researcher,task.update_stage",
        "--agent",
        "reviewer-1",
    ]);
    assert!(
        mint.status.success(),
        "{}",
        String::from_utf8_lossy(&mint.stderr)
    );
    let token = String::from_utf8_lossy(&mint.stdout).trim().to_owned();
    let grant = load_verifier(&data.path().join(PUBLIC_KEY_FILE))
        .expect("verifier")
        .verify(&token)
        .expect("verifies");
    assert_eq!(grant.agent, "reviewer-1");
    assert_eq!(grant.root, workspace.path());
    assert!(
        grant.allows("file.read")
            && grant.allows("task.update_stage")
            && grant.allows("completion-report")
    );
    assert!(!grant.allows("file.write"));
}

#[test]
fn mint_token_refuses_unknown_tools_and_missing_roots() {
    let data = tempfile::tempdir().expect("data dir");
    let data_dir = data.path().to_str().expect("utf8");
    let unknown = run(&[
        "dev",
        "mint-token",
        "--data-dir",
        data_dir,
        "--root",
        data_dir,
        "--tools",
        "Read",
    ]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown tool 'Read'"));
    let missing = run(&[
        "dev",
        "mint-token",
        "--data-dir",
        data_dir,
        "--root",
        "/no/such/dir",
    ]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("is not a directory"));
}

#[test]
fn a_missing_public_key_file_is_a_clear_startup_error() {
    let out = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--standalone",
            "--public-key",
            "/no/such/key.pub",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read run-token key /no/such/key.pub")
    );
}

#[test]
fn without_an_orchestrator_it_refuses_to_start_unless_told_it_runs_standalone() {
    let out = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("CHORUS_ORCHESTRATOR_ADDR")
        .env_remove("CHORUS_STANDALONE")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--orchestrator-addr and --orchestrator-key-file (or --standalone"),
        "{stderr}"
    );
    let out = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--orchestrator-addr",
            "127.0.0.1:1",
        ])
        .env_remove("CHORUS_ORCHESTRATOR_KEY_FILE")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs --orchestrator-key-file"), "{stderr}");
}

/// Reads the JSON log on stderr until `message` appears; returns that line.
fn wait_for_log(
    child: &mut Child,
    lines: &mut impl Iterator<Item = String>,
    message: &str,
) -> serde_json::Value {
    for line in lines.by_ref() {
        if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line)
            && entry["fields"]["message"] == message
        {
            return entry;
        }
    }
    let _ = child.kill();
    panic!("the service exited before logging '{message}'");
}

// Multi-threaded: this thread blocks reading the child's stderr while the gRPC
// connection task must keep running to see the server's GOAWAY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_from_env_config_and_stops_cleanly_on_sigterm() {
    let data = tempfile::tempdir().expect("data dir");
    let mut child = Command::new(BIN)
        .env("CHORUS_TOOL_EXEC_LISTEN", "127.0.0.1:0")
        .env("CHORUS_DATA_DIR", data.path())
        .env("CHORUS_STANDALONE", "true")
        .env("CHORUS_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);

    let serving = wait_for_log(&mut child, &mut lines, "tool-exec serving");
    let addr = serving["fields"]["addr"].as_str().expect("addr").to_owned();
    assert!(
        data.path().join(PUBLIC_KEY_FILE).exists(),
        "a development key pair was created"
    );

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let status = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "chorus.tools.v1.ToolExec".into(),
        })
        .await
        .expect("health")
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("sigterm");
    wait_for_log(&mut child, &mut lines, "tool-exec stopped");
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "exit status after SIGTERM: {exit}");
}

/// How long the binary's shutdown waits for calls in flight (its default).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Past this after SIGTERM the binary is taken to be stuck (the grace, the
/// runtime's last second, and room for a slow machine).
const EXITS_WITHIN: Duration = Duration::from_secs(25);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_binary_within_its_grace_period_while_tools_run() {
    let data = tempfile::tempdir().expect("data dir");
    let workspace = tempfile::tempdir().expect("workspace");
    let root = workspace.path().canonicalize().expect("canonical root");
    let mint = run(&[
        "dev",
        "mint-token",
        "--data-dir",
        data.path().to_str().expect("utf8"),
        "--root",
        root.to_str().expect("utf8"),
    ]);
    assert!(
        mint.status.success(),
        "{}",
        String::from_utf8_lossy(&mint.stderr)
    );
    let token = String::from_utf8_lossy(&mint.stdout).trim().to_owned();
    let big: String = (0..100_000)
        .map(|i| format!("line {i:06} {}\n", "x".repeat(67)))
        .collect();
    std::fs::write(root.join("big.txt"), &big).expect("write big.txt");
    std::fs::create_dir(root.join("swap")).expect("mkdir");
    let swap = FifoSwap::start(&root.join("swap"), "f.txt", "pipe", "hello\n");

    let mut binary = Binary(
        Command::new(BIN)
            .env("CHORUS_TOOL_EXEC_LISTEN", "127.0.0.1:0")
            .env("CHORUS_DATA_DIR", data.path())
            .env("CHORUS_STANDALONE", "true")
            .env("CHORUS_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(binary.0.id()).expect("pid"));
    let mut logs = log_messages(&mut binary.0);
    let addr = loop {
        let (message, fields) = next_log(&mut logs).await;
        if message == "tool-exec serving" {
            break fields["addr"].as_str().expect("addr").to_owned();
        }
    };
    // Told when the binary exits; it is reaped below, so its pid stays its own.
    let exited = {
        let (exited, exit) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            let _ = exited.send(waitid(Id::Pid(pid), flags));
        });
        exit
    };

    // Calls on the swapping names, two loops per tool, and a 10,000-patch call.
    let answers = Arc::new(AtomicUsize::new(0));
    let stop_calling = Arc::new(AtomicBool::new(false));
    let calls = [
        ("file.read", json!({ "path": "swap/f.txt" })),
        (
            "file.patch",
            json!({ "path": "swap/f.txt", "patches": [{ "find": "hello", "replace": "hello" }] }),
        ),
        (
            "file.search",
            json!({ "path": "swap/f.txt", "pattern": "hello" }),
        ),
    ];
    for (tool, arguments) in calls.iter().chain(&calls).cloned() {
        let (addr, token) = (addr.clone(), token.clone());
        let (answers, stop_calling) = (Arc::clone(&answers), Arc::clone(&stop_calling));
        tokio::spawn(async move {
            while !stop_calling.load(Ordering::Relaxed) {
                // Content or a refusal ("is a FIFO") is an answer; a shutdown
                // or a connection gone ends the loop.
                match call(addr.clone(), token.clone(), tool, arguments.clone()).await {
                    Err(status)
                        if matches!(
                            status.code(),
                            tonic::Code::Unavailable | tonic::Code::Unknown
                        ) =>
                    {
                        break;
                    }
                    _ => answers.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
    let patches: Vec<Value> = (0..10_000)
        .map(|i| json!({ "find": format!("line {i:06} "), "replace": format!("LINE {i:06} ") }))
        .collect();
    let long_patch = tokio::spawn(call(
        addr.clone(),
        token.clone(),
        "file.patch",
        json!({ "path": "big.txt", "patches": patches }),
    ));
    chorus_sandbox::testing::eventually("the calls are answered", || {
        answers.load(Ordering::Relaxed) >= 50
    })
    .await;

    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("sigterm");
    let exit = match tokio::time::timeout(EXITS_WITHIN, exited).await {
        Ok(exit) => {
            exit.expect("the waiting thread").expect("waitid");
            binary.0.wait().expect("wait")
        }
        Err(_) => {
            panic!(
                "still running {EXITS_WITHIN:?} after SIGTERM (grace {SHUTDOWN_GRACE:?}): a tool thread keeps it alive"
            );
        }
    };
    stop_calling.store(true, Ordering::Relaxed);
    assert!(exit.success(), "exit status after SIGTERM: {exit}");
    let mut messages = Vec::new();
    while let Ok(Some((message, _))) = tokio::time::timeout(EXITS_WITHIN, logs.recv()).await {
        messages.push(message);
    }
    assert!(
        messages.iter().any(|m| m == "tool-exec stopped"),
        "{messages:?}"
    );
    assert!(
        !messages
            .iter()
            .any(|m| m.starts_with("calls still running")),
        "calls outlived the grace period: {messages:?}"
    );
    let long_patch = long_patch.await.expect("the long patch's client task");
    assert!(
        long_patch.is_err(),
        "the long patch ran to the end: {long_patch:?}"
    );
    assert!(
        std::fs::read(root.join("big.txt")).expect("read big.txt") == big.as_bytes(),
        "the stopped patch changed the file"
    );
    swap.stop();
}

/// The running binary; killed when the test ends before it exited.
struct Binary(Child);

impl Drop for Binary {
    fn drop(&mut self) {
        // A no-op once the binary was reaped.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary's JSON log on stderr, read on a thread of its own (so the binary
/// never blocks on a full pipe): each entry's message and fields.
fn log_messages(child: &mut Child) -> mpsc::UnboundedReceiver<(String, Value)> {
    let stderr = child.stderr.take().expect("stderr");
    let (lines, logs) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str::<Value>(&line) {
                let fields = entry["fields"].clone();
                let message = fields["message"].as_str().unwrap_or_default().to_owned();
                if lines.send((message, fields)).is_err() {
                    break;
                }
            }
        }
    });
    logs
}

async fn next_log(logs: &mut mpsc::UnboundedReceiver<(String, Value)>) -> (String, Value) {
    tokio::time::timeout(EXITS_WITHIN, logs.recv())
        .await
        .expect("the binary logs in time")
        .expect("the binary is running")
}

/// One ExecuteTool call on a connection of its own.
async fn call(
    addr: String,
    token: String,
    tool: &'static str,
    arguments: Value,
) -> Result<pb::ExecuteToolResponse, tonic::Status> {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    let mut client = ToolExecClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new(pb::ExecuteToolRequest {
        tool: tool.to_owned(),
        arguments: Some(json::to_struct(arguments)),
    });
    let bearer = format!("Bearer {token}").parse().expect("metadata");
    request.metadata_mut().insert("authorization", bearer);
    client
        .execute_tool(request)
        .await
        .map(tonic::Response::into_inner)
}
