//! The web console in a real browser, as a person uses it: Debian's Chromium
//! driven by playwright-core (`tests/console/console.mjs`) against the
//! orchestrator's console and a fake model. It signs in (a wrong key first),
//! creates a workspace, a provider and two agents, creates a task, answers
//! the planner's question in the form, starts it and sees its tool calls, a
//! denial, the handoff tree and the report appear without a reload, cancels
//! another task, makes a viewer key and finds no write action as that viewer.
//! Screenshots are kept in `target/tmp/console-screenshots/`.
//!
//! Needs Chromium (`apt-get install chromium`; `CHORUS_TEST_CHROMIUM` names
//! another) and playwright-core in `CHORUS_TEST_NODE_MODULES` (`npm install
//! playwright-core@1.64.1`); skipped without them unless
//! `CHORUS_TEST_REQUIRE_BROWSER=1` (CI), where a missing one fails it.

use std::path::PathBuf;
use std::time::Duration;

use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::git::git;
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

/// The browser and playwright-core, or why the test cannot run.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = std::env::var_os("CHORUS_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let modules = std::env::var_os("CHORUS_TEST_NODE_MODULES").map(PathBuf::from);
    let missing = if !chromium.exists() {
        Some(format!(
            "no Chromium at {} (apt-get install chromium, or set CHORUS_TEST_CHROMIUM)",
            chromium.display()
        ))
    } else if !modules
        .as_ref()
        .is_some_and(|m| m.join("playwright-core/package.json").exists())
    {
        Some("no playwright-core in CHORUS_TEST_NODE_MODULES (npm install --prefix DIR playwright-core@1.64.1; CHORUS_TEST_NODE_MODULES=DIR/node_modules)".to_owned())
    } else {
        None
    };
    match missing {
        Some(why) if std::env::var_os("CHORUS_TEST_REQUIRE_BROWSER").is_some() => {
            panic!("CHORUS_TEST_REQUIRE_BROWSER is set but {why}")
        }
        Some(why) => {
            eprintln!("skipped: {why}");
            None
        }
        None => Some((chromium, modules.unwrap_or_default())),
    }
}

fn step(tool: &str, arguments: serde_json::Value) -> Step {
    Step::tool_call(tool, arguments)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_drives_a_task_from_the_console_and_a_viewer_can_only_look() {
    let Some((chromium, modules)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let root = tempfile::tempdir().expect("root");
    let console = std::net::TcpListener::bind("127.0.0.1:0").expect("console port");
    let console_url = format!("http://{}", console.local_addr().expect("addr"));
    let signer = chorus_run_token::load_or_create_signer(dir.path()).expect("key set");
    let orchestrator = Orchestrator::start_configured(
        &dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| {
            config.runner.api.backoff = Duration::from_millis(10);
            config.console = Some(console);
        },
    )
    .await;
    let model = FakeOpenAi::start(vec![
        step("planner-output", json!({"type": "questions", "questions": ["Which greeting?"]})),
        step("planner-output", json!({"type": "questions", "questions": ["Loud or quiet?"]})),
        step(
            "planner-output",
            json!({
                "type": "plan", "summary": "Write hello.txt", "requirements": ["a greeting"],
                "acceptanceCriteria": ["hello.txt exists"],
                "plan": ["create the file", "have it checked", "report"], "assignedAgent": "lead",
            }),
        ),
        step("file_create", json!({"path": "hello.txt", "content": "hello\n"})),
        step("bash", json!({"command": "rm -rf /"})),
        step("handoff", json!({"agent": "helper", "prompt": "check hello.txt"})),
        step("file_read", json!({"path": "hello.txt"})),
        step("completion-report", json!({"status": "complete", "summary": "hello.txt says hello", "output": "ok"})),
        step("completion-report", json!({"status": "complete", "summary": "Wrote and checked hello.txt", "output": "done"})),
    ])
    .await;
    // A repository: the task works on its own branch, which the person lands.
    chorus_tests::git::repository(root.path(), &[("README", "demo\n")]);
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("console/console.mjs");
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .env("CONSOLE_URL", &console_url)
        .env("ADMIN_KEY", &orchestrator.admin_key)
        .env("MODEL_URL", model.base_url())
        .env("ROOT", root.path())
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", &chromium)
        .env("CHORUS_TEST_NODE_MODULES", &modules)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run node (apt-get install nodejs)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success() && stdout.trim_end().ends_with("ok"),
        "the browser test failed ({}); screenshots in {}:\n{stdout}\n{stderr}",
        output.status,
        artifacts.display()
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("hello.txt")).expect("the agent's file, landed"),
        "hello\n"
    );
    assert_eq!(
        git(root.path(), &["log", "-1", "--format=%s", "main"]),
        "Greet the world in hello.txt",
        "squashed into one commit named after the task"
    );
    for shot in [
        "01-wrong-key",
        "03c-approval",
        "04-completed",
        "04b-change",
        "06-viewer",
    ] {
        assert!(
            artifacts.join(format!("{shot}.png")).exists(),
            "no screenshot {shot}"
        );
    }
    orchestrator.stop().await;
}

/// POSTs `body` to the console's `/api/<method>` with `key` as the bearer.
async fn call(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    method: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = http
        .post(format!("{base}/api/{method}"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("the console answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

/// With the services' certificate the console speaks HTTPS only, and its JSON
/// face is the API behind the same keys and roles: a wrong key is 401, a
/// viewer's write is 403 and changes nothing, bad JSON is 400 naming the
/// field, and a stream is JSON lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_speaks_tls_and_its_calls_meet_the_apis_keys_and_roles() {
    use chorus_auth::tls::ServerTls;
    let pki = chorus_tests::pki::Pki::new();
    let dir = tempfile::tempdir().expect("dir");
    let console = std::net::TcpListener::bind("127.0.0.1:0").expect("console port");
    let port = console.local_addr().expect("addr").port();
    let signer = chorus_run_token::load_or_create_signer(dir.path()).expect("key set");
    let orchestrator = Orchestrator::start_configured(
        &dir.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| {
            config.tls = Some(ServerTls {
                cert: pki.server_cert.clone(),
                key: pki.server_key.clone(),
                client_ca: None,
            });
            config.runner.tls_ca = Some(pki.ca.clone());
            config.console = Some(console);
        },
    )
    .await;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).expect("ca")).expect("ca pem");
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .expect("client");
    let base = format!("https://localhost:{port}");

    // Plain HTTP is not spoken.
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/")).await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    let page = https
        .get(format!("{base}/"))
        .send()
        .await
        .expect("the page");
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .expect("csp")
            .contains("default-src 'none'")
    );

    let admin = orchestrator.admin_key.clone();
    let (status, answer) = call(&https, &base, &admin, "GetStatus", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["caller"]["role"], "ROLE_ADMIN", "{answer}");

    let (status, answer) = call(&https, &base, "chorus_wrong_key", "ListTasks", json!({})).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error"]["code"], "UNAUTHENTICATED", "{answer}");

    let (status, viewer) = call(
        &https,
        &base,
        &admin,
        "CreateApiKey",
        json!({"name": "watcher", "role": "ROLE_VIEWER"}),
    )
    .await;
    assert_eq!(status, 200, "{viewer}");
    let viewer = viewer["secret"].as_str().expect("secret").to_owned();
    let root = tempfile::tempdir().expect("root");
    let (status, answer) = call(
        &https,
        &base,
        &viewer,
        "CreateWorkspace",
        json!({"name": "nope", "root": root.path()}),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("role admin"),
        "{answer}"
    );
    let (_, listed) = call(&https, &base, &viewer, "ListWorkspaces", json!({})).await;
    assert_eq!(
        listed["workspaces"],
        json!([]),
        "the refused write changed nothing"
    );

    let (status, answer) = call(&https, &base, &admin, "ListTasks", json!({"pageSise": 3})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("pageSise"),
        "{answer}"
    );
    let (status, _) = call(&https, &base, &admin, "NoSuchMethod", json!({})).await;
    assert_eq!(status, 404);

    // A stream: the feed from its start, as JSON lines, first the catch-up.
    let lines = https
        .post(format!("{base}/api/stream/WatchTasks"))
        .bearer_auth(&viewer)
        .json(&json!({}))
        .send()
        .await
        .expect("stream");
    assert_eq!(lines.status(), 200);
    assert_eq!(lines.headers()["content-type"], "application/x-ndjson");
    let mut body = lines.bytes_stream();
    use tokio_stream::StreamExt as _;
    let first = body.next().await.expect("a line").expect("bytes");
    let first: serde_json::Value =
        serde_json::from_slice(first.split(|b| *b == b'\n').next().expect("line")).expect("json");
    assert!(first.get("caughtUp").is_some(), "{first}");
    drop(body);
    orchestrator.stop().await;
}

/// The console across a restart of the orchestrator: a task page and the
/// task list, open in Chromium, show the break, reconnect by themselves
/// (backoff) and resume each stream from its cursor: the status and the
/// buttons follow a cancel made while they were away, and every event is
/// shown once. Prints the reconnect time for docs/benchmarks.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reconnects_after_a_restart_and_misses_nothing() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let Some((chromium, modules)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let root = tempfile::tempdir().expect("root");
    let db = dir.path().join("chorus.db").display().to_string();
    let console = std::net::TcpListener::bind("127.0.0.1:0").expect("console port");
    let console_addr = console.local_addr().expect("addr");
    let start = |console: std::net::TcpListener| {
        let signer = chorus_run_token::load_or_create_signer(dir.path()).expect("key set");
        Orchestrator::start_configured(&db, signer, true, |config| {
            config.console = Some(console);
        })
    };
    let first = start(console).await;
    let mut client = first.client().await;
    let ws = chorus_tests::agents::workspace(&mut client, "again", root.path()).await;
    let task = chorus_tests::agents::planned_task(&mut client, &ws, "Wait for a restart.").await;
    drop(client);

    // A repository: the task works on its own branch, which the person lands.
    git(root.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(root.path().join("README"), "demo\n").expect("seed");
    git(root.path(), &["add", "."]);
    git(
        root.path(),
        &[
            "-c",
            "user.name=Ana",
            "-c",
            "user.email=ana@example.com",
            "commit",
            "-q",
            "-m",
            "first",
        ],
    );
    chorus_sandbox::testing::give_to_test_user(root.path());
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("console/reconnect.mjs");
    let mut node = tokio::process::Command::new("node")
        .arg(&script)
        .env("CONSOLE_URL", format!("http://{console_addr}"))
        .env("ADMIN_KEY", &first.admin_key)
        .env("TASK_ID", &task.id)
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", &chromium)
        .env("CHORUS_TEST_NODE_MODULES", &modules)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node (apt-get install nodejs)");
    let mut said = BufReader::new(node.stdout.take().expect("stdout")).lines();
    let mut stdin = node.stdin.take().expect("stdin");
    let mut heard = Vec::new();
    let mut hear = async |expected: &str| {
        while let Some(line) = said.next_line().await.expect("node's output") {
            heard.push(line.clone());
            if line == expected {
                return;
            }
        }
        panic!("the browser script ended before saying {expected}: {heard:?}");
    };
    hear("ready").await;
    first.stop().await;
    hear("noticed").await;
    let second =
        start(std::net::TcpListener::bind(console_addr).expect("the same console port")).await;
    stdin
        .write_all(b"restarted\n")
        .await
        .expect("tell the script");
    let mut client = second.client().await;
    client
        .cancel_task(chorus_proto::orchestrator::v1::CancelTaskRequest {
            task_id: task.id.clone(),
            reason: "canceled while the pages were away".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    hear("ok").await;
    let output = node.wait_with_output().await.expect("node ends");
    let reconnect = heard
        .iter()
        .find_map(|l| l.strip_prefix("reconnect_ms="))
        .unwrap_or("?");
    println!("console reconnect after a restart: {reconnect} ms");
    assert!(
        output.status.success(),
        "the browser script failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    second.stop().await;
}
