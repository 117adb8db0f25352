//! Every ending is final for the tool calls in flight: a bash call whose run
//! ends — by FinishRun (a run its caller drives) or by CancelTask — stops, its
//! processes (a setsid child and a double-forked one included) die, and the
//! call is recorded as stopped by the run's end. Before, such a call ran on
//! until its own timeout (up to 600 s) and was never recorded. A call whose
//! driver lost the run to a takeover is recorded too, as interrupted.

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_sandbox::testing::{ESCAPEES, escapees, eventually, give_to_test_user, survivors};
use chorus_tests::agents::{
    add_agent, data, ends_run, history, planned_task, report, start, team, use_transport, wait_for,
    workspace,
};
use chorus_tests::credentials::Bearer;
use chorus_tests::db_proxy::DbProxy;
use chorus_tests::orchestrator::{Orchestrator, channel_to, run_file};
use chorus_tests::tool_exec_process::ToolExecProcess;
use chorus_tests::{ToolsEnv, chorus_tools};
use serde_json::json;
use tonic::Code;

#[derive(Debug, Clone, Copy)]
enum RunEnd {
    FinishRun,
    CancelTask,
}

/// An all-in-one orchestrator on SQLite, and a workspace root owned by the
/// test user (bash runs as the workspace's owner).
async fn an_orchestrator() -> (Orchestrator, tempfile::TempDir, tempfile::TempDir) {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    give_to_test_user(root.path());
    let orchestrator = Orchestrator::start(
        &data_dir.path().join("chorus.db").display().to_string(),
        data_dir.path(),
    )
    .await;
    (orchestrator, root, data_dir)
}

/// A bash agent's run opened with OpenRun (its caller drives it) on a
/// planned task of a workspace on `root`.
async fn opened_bash_run(
    client: &mut chorus_tests::agents::Client,
    root: &std::path::Path,
) -> (pb::Task, pb::OpenRunResponse) {
    let ws = workspace(client, "endings", root).await;
    add_agent(client, &ws, "builder", &["bash"], "").await;
    let task = planned_task(client, &ws, "build it").await;
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: "builder".into(),
            ttl_secs: 600,
        })
        .await
        .expect("run")
        .into_inner();
    (task, opened)
}

/// A bash call whose escapees carry `marker`, then `then`.
fn escapees_call(marker: &str, then: &str) -> String {
    let command = format!("{} {then}", escapees(marker));
    json!({"tool": "bash", "command": command, "timeout_secs": 600}).to_string()
}

/// chorus-tools as the run `opened` calls it, through the tool-exec at `tools`.
fn run_env(
    opened: &pb::OpenRunResponse,
    tools: std::net::SocketAddr,
    orchestrator: std::net::SocketAddr,
) -> ToolsEnv {
    ToolsEnv {
        token: Some(opened.token.clone()),
        tools_addr: Some(tools.to_string()),
        orchestrator_addr: Some(orchestrator.to_string()),
    }
}

async fn a_run_end_stops_its_bash_call(ending: RunEnd) {
    let (orchestrator, root, _data) = an_orchestrator().await;
    let mut client = orchestrator.client().await;
    let (task, opened) = opened_bash_run(&mut client, root.path()).await;
    let run_id = opened.run.clone().expect("run").id;

    let marker = format!("chorus-escapee-ending-{ending:?}-{}", std::process::id());
    let call = escapees_call(&marker, "while :; do sleep 1; done");
    let env = run_env(&opened, orchestrator.tool_exec_addr, orchestrator.addr);
    let running = tokio::spawn(async move { chorus_tools(&env, &[call.as_str()]).await });
    eventually("the call's processes run", || {
        survivors(&marker).len() == ESCAPEES
    })
    .await;

    match ending {
        RunEnd::FinishRun => {
            client
                .finish_run(pb::FinishRunRequest {
                    id: run_id.clone(),
                    reason: "done with it".into(),
                })
                .await
                .expect("finish");
        }
        RunEnd::CancelTask => {
            client
                .cancel_task(pb::CancelTaskRequest {
                    id: task.id.clone(),
                    reason: "changed my mind".into(),
                    ..Default::default()
                })
                .await
                .expect("cancel");
        }
    }
    // It returned once the call's processes were dead.
    assert_eq!(
        survivors(&marker),
        Vec::<i32>::new(),
        "{ending:?} returned while processes of the run's call lived"
    );
    // The call comes back stopped (not after its 600 s), every process gone.
    let ran = running.await.expect("chorus-tools ran");
    let answer = ran.json();
    assert_eq!(
        answer["error"]["code"], "aborted",
        "{ending:?}: the call was not stopped by the run's end: {answer}"
    );
    assert_eq!(
        survivors(&marker),
        Vec::<i32>::new(),
        "{ending:?}: processes of the call outlived its run"
    );
    // And it is in the history, as stopped by the run's end.
    let events = history(&mut client, &task.id).await;
    let recorded = events
        .iter()
        .filter(|e| e.kind == "tool_executed")
        .map(data)
        .find(|d| d["tool"] == "bash")
        .unwrap_or_else(|| panic!("{ending:?}: the stopped call was not recorded"));
    assert_eq!(recorded["status"], "aborted", "{recorded}");
    assert_eq!(recorded["run_id"], run_id.as_str());
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_run_stops_the_runs_bash_call_and_records_it() {
    a_run_end_stops_its_bash_call(RunEnd::FinishRun).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_stops_the_runs_bash_call_and_records_it() {
    a_run_end_stops_its_bash_call(RunEnd::CancelTask).await;
}

/// A run taken over by another driver — here the next process on the same
/// database, after a restart — no longer answers to the token its earlier
/// driver held; but a call that driver's tool-exec reports afterwards is
/// recorded, as interrupted, with the status and output it reported. After
/// the run's end, only a call that began before the end is.
/// The run token in the environment the fake CLI recorded in `file`.
fn recorded_token(runs: &std::path::Path, file: &str) -> String {
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_file(runs, file)).expect("record"))
            .expect("json");
    record["env"]["CHORUS_RUN_TOKEN"]
        .as_str()
        .unwrap_or_else(|| panic!("a run token in {file}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reported_by_a_driver_that_lost_the_run_is_recorded_as_interrupted() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let runs = data_dir.path().join("runs");
    let again = || {
        let runs = runs.clone();
        Orchestrator::with_fake_cli_on_sqlite(data_dir.path(), move |config| {
            config.runner.keep_run_dirs = true;
            config.runner.runs_dir = runs;
        })
    };
    let orchestrator = again().await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::ClaudeCode,
        "",
        "",
        "",
        &["file.read", "bash"],
        "You build.",
    )
    .await;
    let script = "fake: record first.json\nfake: wait gate\nfake-resume: record second.json\nfake-resume: wait resumed";
    let task = planned_task(&mut client, &team.workspace, script).await;
    let run = start(&mut client, &task, &team.agent, 0)
        .await
        .run
        .expect("run");
    wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "waiting on gate"
    })
    .await;
    let old_token = recorded_token(&runs, "first.json");
    orchestrator.stop().await;

    let orchestrator = again().await;
    let mut client = orchestrator.client().await;
    wait_for(&mut client, &task.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == "waiting on resumed"
    })
    .await;
    let token = recorded_token(&runs, "second.json");
    let service_key = client
        .create_api_key(pb::CreateApiKeyRequest {
            name: "tool-exec".into(),
            role: pb::Role::ToolExec.into(),
        })
        .await
        .expect("key")
        .into_inner()
        .secret;
    let mut tool_exec = AgentToolsClient::with_interceptor(
        channel_to(orchestrator.addr).await,
        Bearer::new(&service_key),
    );
    let record = |tool: &str, status: &str, duration_ms: u64| pb::RecordToolCallRequest {
        tool: tool.into(),
        status: status.into(),
        duration_ms,
        output_excerpt: format!("{tool} ran"),
        run_token: old_token.clone(),
        ..Default::default()
    };

    // The earlier driver's token starts nothing more...
    let refused = tool_exec
        .authorize_tool_call(pb::AuthorizeToolCallRequest {
            tool: "file.read".into(),
            run_token: old_token.clone(),
            ..Default::default()
        })
        .await
        .expect_err("a call by the driver that lost the run");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("taken over"), "{refused:?}");
    // ... but how a call it started ended is recorded, as interrupted.
    tool_exec
        .record_tool_call(record("bash", "ok", 40))
        .await
        .expect("the lost driver's call is recorded");
    let interrupted = |events: &[pb::TaskEvent], tool: &str| {
        events
            .iter()
            .filter(|e| e.kind == "tool_executed")
            .map(data)
            .filter(|d| d["tool"] == tool)
            .collect::<Vec<_>>()
    };
    let bash = interrupted(&history(&mut client, &task.id).await, "bash");
    assert_eq!(bash.len(), 1, "{bash:?}");
    assert_eq!(bash[0]["status"], "interrupted", "{}", bash[0]);
    assert_eq!(bash[0]["reported_status"], "ok", "{}", bash[0]);
    assert_eq!(bash[0]["output_excerpt"], "bash ran", "{}", bash[0]);
    assert_eq!(bash[0]["run_id"], run.id.as_str());

    // Once the run has ended, a call that began before its end is still
    // recorded; one that began after it never ran for the run.
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "enough".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let late = tool_exec
        .record_tool_call(record("file.read", "ok", 0))
        .await
        .expect_err("a call that began after the run's end");
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    tool_exec
        .record_tool_call(record("file.read", "aborted", 3_600_000))
        .await
        .expect("a call that began before the run's end");
    let read = interrupted(&history(&mut client, &task.id).await, "file.read");
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(
        (&read[0]["status"], &read[0]["reported_status"]),
        (&json!("interrupted"), &json!("aborted"))
    );
    // The run's own driver's calls that began before the end are recorded
    // whatever they ended with: its caller gone with the CLI that reported
    // and exited (cancelled), or done as the run ended (ok). The audit holds
    // every call.
    for status in ["cancelled", "ok"] {
        tool_exec
            .record_tool_call(pb::RecordToolCallRequest {
                run_token: token.clone(),
                ..record("file.read", status, 3_600_000)
            })
            .await
            .unwrap_or_else(|e| {
                panic!("the driver's call that began before the run's end, {status}: {e:?}")
            });
    }
    let late = tool_exec
        .record_tool_call(pb::RecordToolCallRequest {
            run_token: token.clone(),
            ..record("file.read", "ok", 0)
        })
        .await
        .expect_err("the driver's call that began after the run's end");
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    let statuses: Vec<_> = history(&mut client, &task.id)
        .await
        .iter()
        .filter(|e| e.kind == "tool_executed")
        .map(data)
        .filter(|d| d["tool"] == "file.read")
        .map(|d| d["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        [json!("interrupted"), json!("cancelled"), json!("ok")]
    );
    orchestrator.stop().await;
}

/// A tool-exec cut from its orchestrator (connections hung) while a bash call
/// of a run its caller drives is in flight: CancelTask cannot tell that
/// tool-exec to stop, but the call's fence — no answer extends it after the
/// run's end — falls two thirds of a lease later, its launcher kills every
/// process, and CancelTask returns only then. Once the orchestrator can be
/// reached again, the call is recorded as stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_returns_once_the_call_of_a_cut_off_tool_exec_is_fenced() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    give_to_test_user(root.path());
    let signer = chorus_run_token::load_or_create_signer(data_dir.path()).expect("key set");
    let orchestrator = Orchestrator::start_configured(
        &data_dir.path().join("chorus.db").display().to_string(),
        signer,
        false,
        |config| config.lease = std::time::Duration::from_secs(3),
    )
    .await;
    let mut client = orchestrator.client().await;
    let key = client
        .create_api_key(pb::CreateApiKeyRequest {
            name: "tool-exec".into(),
            role: pb::Role::ToolExec.into(),
        })
        .await
        .expect("key")
        .into_inner()
        .secret;
    let key_file = data_dir.path().join("tool-exec.key");
    std::fs::write(&key_file, key).expect("key file");
    let proxy = DbProxy::start(orchestrator.addr).await;
    let tool_exec = ToolExecProcess::spawn(proxy.addr, &key_file).await;
    chorus_tests::wait_serving(tool_exec.addr, "").await;

    let (task, opened) = opened_bash_run(&mut client, root.path()).await;
    let marker = format!("chorus-escapee-cut-off-{}", std::process::id());
    let call = escapees_call(&marker, "while :; do sleep 1; done");
    let env = run_env(&opened, tool_exec.addr, orchestrator.addr);
    let running = tokio::spawn(async move { chorus_tools(&env, &[call.as_str()]).await });
    eventually("the call's processes run", || {
        survivors(&marker).len() == ESCAPEES
    })
    .await;

    proxy.hang();
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "changed my mind".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let alive = survivors(&marker);
    proxy.open();
    assert_eq!(
        alive,
        Vec::<i32>::new(),
        "CancelTask returned while the cut-off tool-exec's call still had processes"
    );
    let message = running
        .await
        .expect("chorus-tools ran")
        .expect_failure(1, "aborted");
    assert!(message.contains("fenced"), "{message}");
    let events = wait_for(&mut client, &task.id, |e| {
        e.kind == "tool_executed" && data(e)["tool"] == "bash"
    })
    .await;
    let recorded = data(events.last().expect("the record"));
    assert_eq!(recorded["status"], "aborted", "{recorded}");
    tool_exec.stop().await;
    orchestrator.stop().await;
}

/// Calls racing a run's end: eight callers start short bash calls one after
/// the other (about thirty a second) while CancelTask ends the run. Whatever
/// was authorized before the end is waited for; whatever comes after is
/// refused — when CancelTask returns, no process of any of them lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_racing_the_end_outlives_cancel_task() {
    let (orchestrator, root, _data) = an_orchestrator().await;
    let mut client = orchestrator.client().await;
    let (task, opened) = opened_bash_run(&mut client, root.path()).await;
    let marker = format!("chorus-escapee-race-{}", std::process::id());
    // Short calls, so that new ones keep starting around the end.
    let call = escapees_call(&marker, "sleep 0.3");
    let env = run_env(&opened, orchestrator.tool_exec_addr, orchestrator.addr);
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (env, call) = (env.clone(), call.clone());
            tokio::spawn(async move {
                // Until the run's end refuses the next call.
                loop {
                    let ran = chorus_tools(&env, &[call.as_str()]).await;
                    if ran.stderr.contains("failed_precondition") {
                        return;
                    }
                }
            })
        })
        .collect();
    eventually("calls run", || !survivors(&marker).is_empty()).await;
    client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
            reason: "changed my mind".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let alive = survivors(&marker);
    for caller in callers {
        caller.await.expect("caller");
    }
    assert_eq!(
        alive,
        Vec::<i32>::new(),
        "CancelTask returned while calls racing the end had processes"
    );
    orchestrator.stop().await;
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}

/// A CLI that reports and exits while a bash call it started runs: the run
/// ends, the call is stopped with it (its caller gone), and the call is
/// recorded, once, for the run. With one orchestrator and its embedded
/// tool-exec the end waits for the call's record; a record that comes after
/// the end (another replica's tool-exec, a cut) is the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_when_its_cli_reports_and_exits_is_recorded() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    give_to_test_user(root.path());
    let orchestrator = Orchestrator::with_fake_cli_on_sqlite(data_dir.path(), |_| {}).await;
    let mut client = orchestrator.client().await;
    let team = team(
        &mut client,
        root.path(),
        pb::ProviderKind::ClaudeCode,
        "",
        "",
        "",
        &["bash", "file.read"],
        "You build.",
    )
    .await;
    use_transport(&mut client, &team, pb::ToolTransport::Shell).await;
    let started = format!("started-{}", std::process::id());
    let call = json!({"tool": "bash", "command": format!("touch {started}; sleep 600")});
    // The CLI waits until the call runs: it reads the file the call made
    // (the CLI itself sees no workspace).
    let read = json!({"tool": "file.read", "path": started});
    let script = format!(
        "fake: call-background {call}\n\
         fake: call-until {read}\n\
         {}",
        report("complete", "done while bash runs")
    );
    let task = planned_task(&mut client, &team.workspace, &script).await;
    let run = start(&mut client, &task, &team.agent, 0)
        .await
        .run
        .expect("run");
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(
        data(events.last().expect("end"))["reason"],
        "completed",
        "{events:#?}"
    );
    // The call's record: before the run's end or after it, it comes.
    wait_for(&mut client, &task.id, |e| {
        e.kind == "tool_executed" && data(e)["tool"] == "bash"
    })
    .await;
    let calls: Vec<_> = history(&mut client, &task.id)
        .await
        .iter()
        .filter(|e| e.kind == "tool_executed")
        .map(data)
        .filter(|d| d["tool"] == "bash")
        .collect();
    assert_eq!(calls.len(), 1, "the bash call, recorded once: {calls:?}");
    assert_eq!(calls[0]["run_id"], run.id.as_str(), "{}", calls[0]);
    assert_ne!(calls[0]["status"], "ok", "it was stopped: {}", calls[0]);
    orchestrator.stop().await;
}
