//! The MCP face with a client no one here wrote (the official TypeScript
//! SDK), over both transports — stdio (`chorus-tools mcp`) and Streamable
//! HTTP (tool-exec's endpoint, the run token as bearer): it lists exactly the
//! run's granted tools with their schemas, calls each kind (tool-exec's, the
//! orchestrator's), gets `isError` for what the run may not do (a path
//! outside, a tool not granted), nothing works with a finished run's token,
//! another run's, or none, and cancel, a run's end and the client's cancel
//! reach a call in flight. Each test runs once per transport (`stdio::`,
//! `http::`).

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::{
    add_agent, call, history, opened_run, report, summary, wait_for, workspace,
};
use chorus_tests::db::databases;
use chorus_tests::flows::{Setup, setup_configured, stubborn, wait_stubborn};
use chorus_tests::mcp::{Transport, is_error, run_client, sdk_or_skip, text};
use chorus_tests::orchestrator::OrchestratorProcess;
use serde_json::{Value, json};

/// Each test, once over stdio and once over Streamable HTTP.
macro_rules! over_both_transports {
    ($($(#[$attr:meta])* $name:ident;)*) => {
        mod stdio {
            $($(#[$attr])* async fn $name() {
                super::$name(chorus_tests::mcp::Transport::Stdio).await;
            })*
        }
        mod http {
            $($(#[$attr])* async fn $name() {
                super::$name(chorus_tests::mcp::Transport::Http).await;
            })*
        }
    };
}

over_both_transports! {
    #[tokio::test]
    an_sdk_client_lists_exactly_the_granted_tools_and_calls_each_kind;
    #[tokio::test]
    nothing_works_with_a_finished_run_another_runs_token_or_none;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_handoff_streams_the_childs_progress_and_returns_its_report;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_run_ended_during_a_long_call_ends_the_call_and_leaves_nothing_running;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_call_its_client_cancels_is_stopped_and_recorded;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    canceling_the_task_during_a_handoff_ends_the_call_and_everything_the_child_started;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_call_waiting_for_approval_keeps_the_clients_timeout_from_firing;
}

async fn orchestrator(data: &std::path::Path, transport: Transport) -> OrchestratorProcess {
    let db = data.join("chorus.db").display().to_string();
    OrchestratorProcess::spawn(data, &db, transport.flags()).await
}

async fn an_sdk_client_lists_exactly_the_granted_tools_and_calls_each_kind(transport: Transport) {
    let Some(modules) = sdk_or_skip() else { return };
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "hello over mcp").expect("a file");
    let orchestrator = orchestrator(data.path(), transport).await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "mcp", root.path()).await;
    add_agent(
        &mut admin,
        &ws,
        "mcp-writer",
        &["file.read", "file.create", "task.get"],
        "",
    )
    .await;
    let run = opened_run(&mut admin, &ws, "mcp-writer", "write over mcp").await;

    let plan = json!({
        "transport": transport.to(&run),
        "steps": [
            {"list": true},
            {"call": "file_read", "arguments": {"path": "notes.txt"}},
            {"call": "file_create", "arguments": {"path": "made.txt", "content": "made over mcp"}},
            {"call": "file_read", "arguments": {"path": "../outside.txt"}},
            {"call": "file_delete", "arguments": {"path": "notes.txt"}},
            {"call": "task_get", "arguments": {}},
            {"call": "completion-report", "arguments": {
                "status": "complete", "summary": "wrote made.txt", "output": "made.txt"}},
        ],
    });
    let got = run_client(&modules, &plan).await;
    let results = got["results"].as_array().unwrap_or_else(|| panic!("{got}"));

    let mut names: Vec<&str> = results[0]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools listed: {}", results[0]))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "completion-report",
            "file_create",
            "file_read",
            "help",
            "task_get"
        ],
        "exactly the granted tools, and those every run has"
    );
    let file_read = results[0]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "file_read"))
        .expect("file_read listed");
    assert_eq!(
        file_read["inputSchema"]["required"],
        json!(["path"]),
        "the catalog's schema: {file_read}"
    );
    assert!(
        file_read["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );

    let read = &results[1];
    assert!(
        !is_error(read) && text(read).contains("hello over mcp"),
        "{read}"
    );
    assert!(
        read["result"]["structuredContent"].is_object(),
        "the output as structured content: {read}"
    );
    assert!(!is_error(&results[2]), "{}", results[2]);
    assert_eq!(
        std::fs::read_to_string(root.path().join("made.txt")).expect("created"),
        "made over mcp"
    );
    let outside = &results[3];
    assert!(is_error(outside), "a path outside the workspace: {outside}");
    let denied = &results[4];
    assert!(
        is_error(denied) && text(denied).contains("permission_denied"),
        "a tool not granted: {denied}"
    );
    assert!(
        root.path().join("notes.txt").exists(),
        "nothing was deleted"
    );
    let task = &results[5];
    assert!(
        !is_error(task) && text(task).contains("write over mcp"),
        "the orchestrator's tool: {task}"
    );
    assert!(!is_error(&results[6]), "{}", results[6]);

    // Recorded as any call of the run is.
    let events = summary(&history(&mut admin, &run.run.as_ref().expect("run").task_id).await);
    for expected in [
        "tool_executed file.read",
        "tool_executed file.create",
        "tool_denied file.delete",
    ] {
        assert!(
            events.iter().any(|e| e.starts_with(expected)),
            "{expected} not in {events:?}"
        );
    }
    // Listing the tools is not a call: the history holds only what the agent
    // called (the client listed once, and the SDK may list again).
    assert!(
        !events.iter().any(|e| e.starts_with("tool_executed help")),
        "listing the tools recorded a help call: {events:?}"
    );
    orchestrator.kill().await;
}

async fn nothing_works_with_a_finished_run_another_runs_token_or_none(transport: Transport) {
    let Some(modules) = sdk_or_skip() else { return };
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let mine = tempfile::tempdir().expect("another root");
    std::fs::write(mine.path().join("secret.txt"), "not yours").expect("a file");
    let orchestrator = orchestrator(data.path(), transport).await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "theirs", root.path()).await;
    add_agent(&mut admin, &ws, "mcp-reader", &["file.read"], "").await;

    // A finished run: listing fails, nothing is called.
    let run = opened_run(&mut admin, &ws, "mcp-reader", "finished").await;
    admin
        .finish_run(pb::FinishRunRequest {
            id: run.run.as_ref().expect("run").id.clone(),
            ..Default::default()
        })
        .await
        .expect("finish");
    let plan = json!({"transport": transport.to(&run), "steps": [
        {"list": true},
        {"call": "file_read", "arguments": {"path": "notes.txt"}},
    ]});
    let got = run_client(&modules, &plan).await;
    let results = got["results"].as_array().expect("results");
    assert!(
        results[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("has ended")),
        "a finished run lists nothing: {}",
        results[0]
    );
    assert!(
        is_error(&results[1]) && text(&results[1]).contains("has ended"),
        "a finished run calls nothing: {}",
        results[1]
    );

    // Another run's token: its session acts in its own workspace only; a
    // path into this workspace is outside it.
    let theirs = opened_run(&mut admin, &ws, "mcp-reader", "another run").await;
    let secret = format!("{}/secret.txt", mine.path().display());
    let plan = json!({"transport": transport.to(&theirs), "steps": [
        {"call": "file_read", "arguments": {"path": secret}},
    ]});
    let got = run_client(&modules, &plan).await;
    let crossed = &got["results"][0];
    assert!(
        is_error(crossed) && !text(crossed).contains("not yours"),
        "another workspace's file with another run's token: {crossed}"
    );

    // No token: the server says so before any session begins (stdio: the
    // process exits; HTTP: 401).
    let none = transport.without_token(&run);
    let got = run_client(
        &modules,
        &json!({"transport": none, "steps": [{"list": true}]}),
    )
    .await;
    assert!(
        got.get("connect_error").is_some(),
        "no token, no session: {got}"
    );
    orchestrator.kill().await;
}

async fn a_handoff_streams_the_childs_progress_and_returns_its_report(transport: Transport) {
    let Some(modules) = sdk_or_skip() else { return };
    let data_dir = tempfile::tempdir().expect("data");
    let db = &databases(data_dir.path())[0];
    let Setup {
        orchestrator,
        mut client,
        ws,
        root,
    } = setup_configured(data_dir.path(), db, |config| transport.serve(config)).await;
    // The seeded workflow agent may hand off; the writer is a fake CLI.
    let run = opened_run(&mut client, &ws, "writer-workflow", "hand off over mcp").await;
    let writer = [
        "Write the draft.".to_owned(),
        call(&json!({"tool": "file.create", "path": "draft.md", "content": "Once.\n"})),
        report("complete", "draft written"),
        "fake: say Draft done.".to_owned(),
    ];
    let plan = json!({"transport": transport.to(&run), "steps": [
        {"call": "handoff", "progress": true,
         "arguments": {"agent": "writer", "prompt": writer.join("\n")}},
    ]});
    let got = run_client(&modules, &plan).await;
    let handed = &got["results"][0];
    assert!(
        !is_error(handed) && text(handed).contains("draft written"),
        "the child's report comes back: {handed}"
    );
    let progress: Vec<&str> = handed["progress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        progress.iter().any(|p| p.contains("file.create")),
        "the child's tool call was told as progress while it ran: {progress:?}"
    );
    assert!(root.path().join("draft.md").exists(), "the child wrote");
    drop(orchestrator);
}

/// A run of an agent granted bash, and a bash command that writes
/// started.txt, sleeps 300 s in a process carrying `marker`, then writes
/// survived.txt.
struct LongCall {
    orchestrator: OrchestratorProcess,
    admin: chorus_tests::agents::Client,
    _data: tempfile::TempDir,
    root: tempfile::TempDir,
    run: pb::OpenRunResponse,
    marker: String,
    command: String,
}

async fn long_call(name: &str, transport: Transport) -> LongCall {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data.path(), transport).await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, name, root.path()).await;
    add_agent(&mut admin, &ws, "mcp-sleeper", &["bash"], "").await;
    let run = opened_run(&mut admin, &ws, "mcp-sleeper", name).await;
    let marker = format!("mcp-{name}-{transport:?}-{}", std::process::id());
    let command = format!(
        "echo started > started.txt; sh -c 'sleep 300' {marker}; echo survived > survived.txt"
    );
    LongCall {
        orchestrator,
        admin,
        _data: data,
        root,
        run,
        marker,
        command,
    }
}

async fn a_run_ended_during_a_long_call_ends_the_call_and_leaves_nothing_running(
    transport: Transport,
) {
    let Some(modules) = sdk_or_skip() else { return };
    let LongCall {
        orchestrator,
        mut admin,
        _data,
        root,
        run,
        marker,
        command,
    } = long_call("ended", transport).await;
    let plan = json!({"transport": transport.to(&run), "steps": [
        {"call": "bash", "arguments": {"command": command, "timeout_secs": 600}},
    ]});
    let client = tokio::spawn(async move { run_client(&modules, &plan).await });
    // The call runs once its first line has.
    let started = root.path().join("started.txt");
    let mut polls = 0;
    while !started.exists() {
        assert!(polls < 3000, "the bash call never started");
        polls += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let run_id = run.run.as_ref().expect("run").id.clone();
    admin
        .finish_run(pb::FinishRunRequest {
            id: run_id.clone(),
            ..Default::default()
        })
        .await
        .expect("finish the run");
    // FinishRun returns once no call of the run has a process left.
    assert_eq!(
        chorus_sandbox::testing::processes_with_arg_containing(&marker),
        Vec::<i32>::new(),
        "a process of the ended run survived"
    );
    let got = client.await.expect("client");
    let ended = &got["results"][0];
    assert!(
        ended.get("error").is_some() || is_error(ended),
        "the call ended with the run: {ended}"
    );
    assert!(!root.path().join("survived.txt").exists());
    let events = summary(&history(&mut admin, &run.run.as_ref().expect("run").task_id).await);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("tool_") && e.contains("bash")),
        "the stopped call is recorded: {events:?}"
    );
    orchestrator.kill().await;
}

async fn a_call_its_client_cancels_is_stopped_and_recorded(transport: Transport) {
    let Some(modules) = sdk_or_skip() else { return };
    let LongCall {
        orchestrator,
        mut admin,
        _data,
        root,
        run,
        marker,
        command,
    } = long_call("cancelled", transport).await;
    let task = run.run.as_ref().expect("run").task_id.clone();
    let plan = json!({"transport": transport.to(&run), "steps": [
        {"call": "bash", "arguments": {"command": command, "timeout_secs": 600},
         "abort_when_exists": root.path().join("started.txt")},
    ]});
    let got = run_client(&modules, &plan).await;
    let cancelled = &got["results"][0];
    assert!(
        cancelled["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cancelled")),
        "the client's cancel ends its call: {cancelled}"
    );
    // The call's record is written when its process has ended.
    let events = wait_for(&mut admin, &task, |e| {
        e.kind.starts_with("tool_") && chorus_tests::agents::data(e)["tool"] == "bash"
    })
    .await;
    assert_eq!(
        chorus_sandbox::testing::processes_with_arg_containing(&marker),
        Vec::<i32>::new(),
        "the cancelled call's process survived"
    );
    assert!(!root.path().join("survived.txt").exists());
    let recorded = summary(&events);
    assert!(
        recorded.contains(&"tool_executed bash cancelled".to_owned()),
        "the stopped call is recorded as cancelled: {recorded:?}"
    );
    orchestrator.kill().await;
}

async fn canceling_the_task_during_a_handoff_ends_the_call_and_everything_the_child_started(
    transport: Transport,
) {
    let Some(modules) = sdk_or_skip() else { return };
    let data_dir = tempfile::tempdir().expect("data");
    let db = &databases(data_dir.path())[0];
    let Setup {
        orchestrator,
        mut client,
        ws,
        root: _root,
    } = setup_configured(data_dir.path(), db, |config| transport.serve(config)).await;
    let run = opened_run(&mut client, &ws, "writer-workflow", "hand off, then cancel").await;
    let task = run.run.as_ref().expect("run").task_id.clone();
    let chain = format!("mcp-chain-{}", std::process::id());
    let marker = format!("mcp-escapee-{}", std::process::id());
    let child = [format!("fake: say child of {chain}"), stubborn(&marker)].join("\n");
    let plan = json!({"transport": transport.to(&run), "steps": [
        {"call": "handoff", "progress": true, "arguments": {"agent": "writer", "prompt": child}},
    ]});
    let mcp = tokio::spawn(async move { run_client(&modules, &plan).await });
    wait_stubborn(&mut client, &task, "writer").await;
    let canceled = client
        .cancel_task(pb::CancelTaskRequest {
            id: task.clone(),
            reason: "changed my mind".into(),
            ..Default::default()
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(canceled.status, "canceled");
    // Every process the child started is dead when CancelTask returns.
    assert_eq!(
        chorus_sandbox::testing::survivors(&marker),
        Vec::<i32>::new()
    );
    assert_eq!(
        chorus_sandbox::testing::processes_with_arg_containing(&chain),
        Vec::<i32>::new(),
        "the child's CLI survived the cancel"
    );
    let got = mcp.await.expect("client");
    let ended = &got["results"][0];
    assert!(
        (is_error(ended) && text(ended).contains("canceled")) || ended.get("error").is_some(),
        "the handoff call ends with the cancel: {ended}"
    );
    let progress = ended["progress"].as_array().cloned().unwrap_or_default();
    assert!(
        progress
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains(&chain))),
        "the child's progress came while it ran: {progress:?}"
    );
    drop(orchestrator);
}

/// With certificates, the MCP endpoint speaks HTTPS with the services'
/// certificate: OpenRun names an `https://` URL, a client trusting the CA
/// lists and calls, and plaintext is not answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_certificates_the_http_endpoint_speaks_tls_only() {
    let Some(modules) = sdk_or_skip() else { return };
    let pki = chorus_tests::pki::Pki::new();
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "over tls").expect("a file");
    let signer = chorus_run_token::load_or_create_signer(data.path()).expect("key set");
    let orchestrator = chorus_tests::orchestrator::Orchestrator::start_configured(
        &data.path().join("chorus.db").display().to_string(),
        signer,
        true,
        |config| {
            config.tls = Some(chorus_auth::tls::ServerTls {
                cert: pki.server_cert.clone(),
                key: pki.server_key.clone(),
                client_ca: None,
            });
            config.runner.tls_ca = Some(pki.ca.clone());
            Transport::Http.serve(config);
        },
    )
    .await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "mcp-tls", root.path()).await;
    add_agent(&mut admin, &ws, "mcp-reader", &["file.read"], "").await;
    let run = opened_run(&mut admin, &ws, "mcp-reader", "read over tls").await;
    assert!(run.mcp_url.starts_with("https://"), "{}", run.mcp_url);

    let plan = json!({"transport": Transport::Http.to(&run), "steps": [
        {"call": "file_read", "arguments": {"path": "notes.txt"}},
    ]});
    let ca = [("NODE_EXTRA_CA_CERTS", pki.ca.as_os_str())];
    let got = chorus_tests::mcp::run_client_with_env(&modules, &plan, &ca).await;
    let read = &got["results"][0];
    assert!(!is_error(read) && text(read).contains("over tls"), "{got}");

    let mut plain = Transport::Http.to(&run);
    plain["http"]["url"] = json!(run.mcp_url.replacen("https://", "http://", 1));
    let got = run_client(
        &modules,
        &json!({"transport": plain, "steps": [{"list": true}]}),
    )
    .await;
    assert!(
        got.get("connect_error").is_some(),
        "plaintext answered: {got}"
    );
}

/// A call that waits for a person's approval longer than the client's own
/// timeout (12 s, reset on progress) is kept alive by the server's progress
/// notifications; once approved it runs and its answer arrives.
async fn a_call_waiting_for_approval_keeps_the_clients_timeout_from_firing(transport: Transport) {
    let Some(modules) = sdk_or_skip() else { return };
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(data.path(), transport).await;
    let mut admin = orchestrator.client().await;
    let ws = workspace(&mut admin, "mcp-asks", root.path()).await;
    add_agent(&mut admin, &ws, "asker", &["file.create"], "").await;
    let ask = chorus_tests::approvals::rule("file.create", "ask", "", 0);
    chorus_tests::approvals::set_rules(&mut admin, &ws.id, "asker", vec![ask]).await;
    let run = opened_run(&mut admin, &ws, "asker", "ask over mcp").await;
    let task = run.run.clone().expect("run").task_id;
    let heard = data.path().join("progress.txt");
    let plan = json!({"transport": transport.to(&run), "steps": [
        {"call": "file_create", "progress": true, "timeout_ms": 12000,
         "progress_file": heard.display().to_string(),
         "arguments": {"path": "asked.txt", "content": "approved"}},
    ]});
    let client = tokio::spawn(async move { run_client(&modules, &plan).await });
    let approval = chorus_tests::approvals::approval_id(
        &chorus_tests::approvals::asked(&mut admin, &task, 1).await,
    );
    // Two heartbeats heard: the client has waited past its own timeout.
    chorus_sandbox::testing::eventually("two progress notifications at the client", || {
        std::fs::read_to_string(&heard).is_ok_and(|t| t.lines().count() >= 2)
    })
    .await;
    chorus_tests::approvals::answer(&mut admin, &task, &approval, true, false, "")
        .await
        .expect("approve");
    let got = client.await.expect("the client");
    let answered = &got["results"][0];
    assert!(
        !is_error(answered) && answered.get("result").is_some(),
        "{got}"
    );
    let progress = answered["progress"].to_string();
    assert!(progress.contains("still runs"), "{progress}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("asked.txt")).expect("written"),
        "approved"
    );
    orchestrator.kill().await;
}
