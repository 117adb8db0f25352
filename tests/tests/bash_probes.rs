//! An agent granted bash, through the real binaries (the orchestrator with its
//! embedded tool-exec, chorus-tools, the launcher), tries what an attacker
//! would: the run-token signing key, the database, /etc/shadow, the
//! orchestrator's and another workspace's running agent's environment, writing
//! outside its workspace, signalling the orchestrator, the network without the
//! grant, and with it a database on the host's loopback. Each is refused, the
//! orchestrator lives on, and no secret appears in any output or history
//! event.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_run_token::KEY_SET_FILE;
use chorus_sandbox::testing::{eventually, program_processes};
use chorus_tests::agents::{
    Client, add_agent, call, data, ends_run, fake_cli, history, planned_task, report, saved, start,
    wait_for, workspace,
};
use chorus_tests::orchestrator::{OrchestratorProcess, run_file};
use serde_json::{Value, json};

/// In the orchestrator's environment only.
const SERVICE_SECRET: &str = "service-secret-3f9a7c";
const PROBER_KEY: &str = "sk-prober-key-51c2";
const OTHER_KEY: &str = "sk-other-workspace-key-8e1d";

async fn provider(client: &mut Client, ws: &pb::Workspace, api_key: &str) {
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: "cli".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            api_key: api_key.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
}

/// What one bash probe printed (stdout and stderr together) and how it ended.
fn probe_result(runs: &Path, name: &str) -> (String, Value) {
    let saved = saved(&run_file(runs, &format!("{name}.json")));
    let answer: Value = serde_json::from_str(saved["stdout"].as_str().unwrap_or_default().trim())
        .unwrap_or_else(|e| panic!("{name}: chorus-tools answered {saved} ({e})"));
    let output = &answer["output"];
    let text = format!(
        "{}{}",
        output["stdout"].as_str().unwrap_or_default(),
        output["stderr"].as_str().unwrap_or_default()
    );
    (text, output.clone())
}

/// Whether a probe's output holds `expected`, the namespace tier's answer,
/// or the landlock tier's for the same refusal: there a file outside is not
/// missing but refused, and a process of the service there but not to be
/// signalled.
fn refused_as(text: &str, expected: &str) -> bool {
    let landlock: &[&str] = match expected {
        "No such file or directory" => &["Permission denied"],
        "No such process" => &["Operation not permitted"],
        _ => &[],
    };
    text.contains(expected)
        || (std::env::var("CHORUS_SANDBOX_TIER").as_deref() == Ok("landlock")
            && landlock.iter().any(|answer| text.contains(answer)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_reaches_nothing_but_its_own_workspace() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let other_root = tempfile::tempdir().expect("other root");
    let outside = tempfile::tempdir().expect("outside");
    let fake = fake_cli();
    let fake_path = fake.to_str().expect("utf-8 path");
    let database = data_dir.path().join("chorus.db");
    let orchestrator = OrchestratorProcess::spawn_with_env(
        data_dir.path(),
        database.to_str().expect("utf-8 path"),
        &[
            "--claude-bin",
            fake_path,
            "--opencode-bin",
            fake_path,
            "--keep-run-dirs",
        ],
        &[("CHORUS_PROBE_SECRET", SERVICE_SECRET)],
    )
    .await;
    let runs = data_dir.path().join("runs");
    let mut client = orchestrator.client().await;

    // Another workspace's agent, running, with its own key and run token; its
    // words are this process's own (the test runs again beside itself in
    // other configurations).
    let sleeps = format!(
        "the other workspace's agent sleeps ({})",
        std::process::id()
    );
    let other = workspace(&mut client, "other", other_root.path()).await;
    provider(&mut client, &other, OTHER_KEY).await;
    add_agent(&mut client, &other, "sleeper", &["file.read"], "cli").await;
    let sleeping = planned_task(
        &mut client,
        &other,
        &format!("fake: say {sleeps}\nfake: hang"),
    )
    .await;
    start(&mut client, &sleeping, "sleeper", 0).await;
    wait_for(&mut client, &sleeping.id, |e| {
        e.kind == "agent_progress" && data(e)["text"] == sleeps.as_str()
    })
    .await;
    // The CLI forks a shell to hang in; until that child has exec'd it looks
    // like the CLI too.
    let sleepers = || program_processes(&fake, &sleeps);
    eventually("one sleeping CLI of the other workspace", || {
        sleepers().len() == 1
    })
    .await;
    let sleeper = sleepers()[0];
    let sleeper_environ = std::fs::read(format!("/proc/{sleeper}/environ")).expect("environ");
    let sleeper_token = String::from_utf8_lossy(&sleeper_environ)
        .split('\0')
        .find_map(|v| v.strip_prefix("CHORUS_RUN_TOKEN="))
        .expect("the other run's token")
        .to_owned();

    let orchestrator_pid = orchestrator.pid();
    // Next to the workspace root, on the host.
    let beside = format!("pwned-beside-{}", std::process::id());
    let data_path = data_dir.path().display();
    let probes: Vec<(&str, String, &str)> = vec![
        (
            "signing-key",
            format!("cat {data_path}/{KEY_SET_FILE}"),
            "No such file or directory",
        ),
        (
            "database",
            format!("cat {}", database.display()),
            "No such file or directory",
        ),
        (
            "data-dir",
            format!("ls {data_path}"),
            "No such file or directory",
        ),
        ("shadow", "cat /etc/shadow".to_owned(), "Permission denied"),
        (
            "orchestrator-environ",
            format!("cat /proc/{orchestrator_pid}/environ"),
            "No such file or directory",
        ),
        (
            "other-run-environ",
            format!("cat /proc/{sleeper}/environ"),
            "No such file or directory",
        ),
        (
            "every-visible-environ",
            "cat /proc/[0-9]*/environ 2>&1 | tr '\\0' '\\n'; echo checked".to_owned(),
            "checked",
        ),
        (
            "write-outside",
            format!(
                "echo pwned > {}/pwned; echo pwned > ../{beside}",
                outside.path().display()
            ),
            "No such file or directory",
        ),
        (
            "write-system",
            "echo x >> /etc/passwd".to_owned(),
            "Permission denied",
        ),
        (
            "signal-orchestrator",
            format!("kill -TERM {orchestrator_pid}"),
            "No such process",
        ),
        (
            "network-orchestrator",
            format!("exec 3<>/dev/tcp/127.0.0.1/{}", orchestrator.addr.port()),
            "Connection refused",
        ),
        (
            "network-database",
            "exec 3<>/dev/tcp/127.0.0.1/5432".to_owned(),
            "Connection refused",
        ),
        ("root", "id -u".to_owned(), ""),
    ];
    let prober = workspace(&mut client, "probes", root.path()).await;
    provider(&mut client, &prober, PROBER_KEY).await;
    add_agent(&mut client, &prober, "prober", &["bash"], "cli").await;
    let mut script: Vec<String> = Vec::new();
    for (name, command, _) in &probes {
        script.push(call(&json!({"tool": "bash", "command": command})));
        script.push(format!("fake: save {name}.json"));
    }
    // Last: kill(-1) reaches its own processes and nothing else.
    script.push(call(
        &json!({"tool": "bash", "command": "sleep 100 & kill -KILL -1; wait $!; echo $?"}),
    ));
    script.push("fake: save kill-all.json".to_owned());
    script.push(report("complete", "probed"));
    let task = planned_task(&mut client, &prober, &script.join("\n")).await;
    start(&mut client, &task, "prober", 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(
        data(events.last().expect("end"))["reason"],
        "completed",
        "{events:#?}"
    );

    let secrets = [
        SERVICE_SECRET,
        OTHER_KEY,
        PROBER_KEY,
        sleeper_token.as_str(),
        "BEGIN PRIVATE KEY",
        "SQLite format",
        "root:",
    ];
    let mut wrong = Vec::new();
    for (name, _, expected) in &probes {
        let (text, output) = probe_result(&runs, name);
        if !refused_as(&text, expected) {
            wrong.push(format!("{name}: expected '{expected}' in {output}"));
        }
        for secret in secrets {
            assert!(!text.contains(secret), "{name} leaked '{secret}': {text}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let (uid, _) = probe_result(&runs, "root");
    assert_ne!(uid.trim(), "0", "bash ran as root");
    let (_, killed) = probe_result(&runs, "kill-all");
    assert_eq!(killed["stdout"], "137\n", "the sleep was killed: {killed}");
    // Nothing was written outside, and the orchestrator and the other run live on.
    let written: Vec<_> = std::fs::read_dir(outside.path())
        .expect("outside")
        .collect();
    assert!(written.is_empty(), "{written:?}");
    let parent = root.path().parent().expect("parent");
    assert!(
        !parent.join(&beside).exists(),
        "written beside the workspace"
    );
    assert!(std::path::Path::new(&format!("/proc/{sleeper}")).exists());
    // No secret in any history event of either task.
    for task_id in [&task.id, &sleeping.id] {
        let all = serde_json::to_string(
            &history(&mut client, task_id)
                .await
                .iter()
                .map(data)
                .collect::<Vec<_>>(),
        )
        .expect("json");
        for secret in secrets {
            assert!(!all.contains(secret), "the history holds '{secret}'");
        }
    }
    client
        .cancel_task(pb::CancelTaskRequest {
            id: sleeping.id.clone(),
            reason: String::new(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    drop(client);
    let status = orchestrator.stop().await;
    assert!(status.success(), "{status:?}");
}

/// A database on the host's loopback with trust authentication, as in dev
/// set-ups: an agent holding the `network` grant (and egress rules naming the
/// loopback, which change nothing) reaches it neither directly nor through
/// the egress proxy. Its CLI still reaches Chorus's services (the fake CLI's
/// calls go through the sandbox's forwards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_grant_never_reaches_a_database_on_the_hosts_loopback() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let fake = fake_cli();
    let fake_path = fake.to_str().expect("utf-8 path");
    let database = data_dir.path().join("chorus.db");
    let orchestrator = OrchestratorProcess::spawn_with_env(
        data_dir.path(),
        database.to_str().expect("utf-8 path"),
        &["--claude-bin", fake_path, "--keep-run-dirs"],
        &[],
    )
    .await;
    let runs = data_dir.path().join("runs");
    let mut client = orchestrator.client().await;

    let db = std::net::TcpListener::bind("127.0.0.1:0").expect("database");
    let port = db.local_addr().expect("addr").port();
    let ws = workspace(&mut client, "probes", root.path()).await;
    provider(&mut client, &ws, PROBER_KEY).await;
    add_agent(&mut client, &ws, "prober", &["bash", "network"], "cli").await;
    client
        .update_agent(pb::UpdateAgentRequest {
            workspace_id: ws.id.clone(),
            name: "prober".into(),
            set_egress: true,
            egress: vec![format!("127.0.0.1:{port}"), format!("localhost:{port}")],
            ..Default::default()
        })
        .await
        .expect("egress");
    let probes: Vec<(&str, String, &str)> = vec![
        (
            "database-direct",
            format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
            "Connection refused",
        ),
        (
            "postgres-port",
            "exec 3<>/dev/tcp/127.0.0.1/5432".to_owned(),
            "Connection refused",
        ),
        (
            "database-through-the-proxy",
            // Through the proxy even where NO_PROXY would go direct.
            format!(
                "curl -sS --noproxy '' -p http://127.0.0.1:{port}/ 2>&1; \
                 curl -sS --noproxy '' -o /dev/null -w '%{{http_code}}' http://localhost:{port}/ 2>&1"
            ),
            "403",
        ),
        (
            "metadata",
            "curl -sS -o /dev/null -w '%{http_code}' http://169.254.169.254/latest/meta-data/ 2>&1"
                .to_owned(),
            "403",
        ),
    ];
    let mut script: Vec<String> = Vec::new();
    for (name, command, _) in &probes {
        script.push(call(&json!({"tool": "bash", "command": command})));
        script.push(format!("fake: save {name}.json"));
    }
    script.push(report("complete", "probed"));
    let task = planned_task(&mut client, &ws, &script.join("\n")).await;
    start(&mut client, &task, "prober", 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(
        data(events.last().expect("end"))["reason"],
        "completed",
        "{events:#?}"
    );
    let wrong: Vec<String> = probes
        .iter()
        .filter_map(|(name, _, expected)| {
            let (text, output) = probe_result(&runs, name);
            (!refused_as(&text, expected))
                .then(|| format!("{name}: expected '{expected}' in {output}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    db.set_nonblocking(true).expect("nonblocking");
    assert!(db.accept().is_err(), "the database was reached");
    drop(client);
    let status = orchestrator.stop().await;
    assert!(status.success(), "{status:?}");
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
