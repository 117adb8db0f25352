//! The `chorus-tool-exec` binary as an operator runs it: dev key and token
//! commands, configuration from the environment, serving, and SIGTERM shutdown.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use chorus_run_token::{PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, load_verifier};

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
    let mode = std::fs::metadata(data.path().join(PRIVATE_KEY_FILE))
        .expect("private key")
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
