//! What the sandbox is, as an operator sees it: GetStatus says so; where the
//! host lacks a mechanism (here: no launcher) bash, git and CLI agents are
//! refused with a message that says what to do, and nothing runs unconfined;
//! with `--sandbox off` they run unconfined, as the operator asked.

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_sandbox::{Mode, SandboxConfig};
use chorus_tests::ToolsEnv;
use chorus_tests::agents::{
    Client, data, ends_run, fake_cli_team, planned_task, report, start, task_of, wait_for,
};
use chorus_tests::orchestrator::Orchestrator;
use serde_json::json;

async fn orchestrator(data_dir: &Path, sandbox: SandboxConfig) -> Orchestrator {
    Orchestrator::with_fake_cli_on_sqlite(data_dir, |config| config.sandbox = sandbox).await
}

async fn status(
    orchestrator: &Orchestrator,
    client: &mut Client,
) -> (
    pb::GetStatusResponse,
    chorus_proto::tools::v1::GetStatusResponse,
) {
    let own = client
        .get_status(pb::GetStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", orchestrator.tool_exec_addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
    // An operator's key works on tool-exec too (checked with the orchestrator).
    let tool_exec = ToolExecClient::with_interceptor(
        channel,
        chorus_tests::credentials::Bearer::new(&orchestrator.admin_key),
    )
    .get_status(chorus_proto::tools::v1::GetStatusRequest {})
    .await
    .expect("tool-exec status")
    .into_inner();
    (own, tool_exec)
}

/// A bash call of a run of `agent` on `task`, through chorus-tools.
async fn bash(
    orchestrator: &Orchestrator,
    client: &mut Client,
    task: &pb::Task,
    agent: &str,
    command: &str,
) -> chorus_tests::ToolsRun {
    let opened = client
        .open_run(pb::OpenRunRequest {
            task_id: task.id.clone(),
            agent: agent.into(),
            ttl_secs: 0,
        })
        .await
        .expect("open run")
        .into_inner();
    let env = ToolsEnv {
        token: Some(opened.token),
        tools_addr: Some(orchestrator.tool_exec_addr.to_string()),
        orchestrator_addr: Some(orchestrator.addr.to_string()),
    };
    chorus_tests::chorus_tools(
        &env,
        &[&json!({"tool": "bash", "command": command}).to_string()],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_an_enforced_sandbox() {
    let data_dir = tempfile::tempdir().expect("data");
    let orchestrator = orchestrator(
        data_dir.path(),
        SandboxConfig {
            launcher: Some(chorus_sandbox::testing::built_launcher()),
            ..SandboxConfig::default()
        },
    )
    .await;
    let mut client = orchestrator.client().await;
    let (own, tool_exec) = status(&orchestrator, &mut client).await;
    assert!(own.embedded_tool_exec);
    for sandbox in [
        own.sandbox.expect("sandbox"),
        tool_exec.sandbox.expect("sandbox"),
    ] {
        assert_eq!(sandbox.state, "enforced", "{sandbox:?}");
        assert!(sandbox.launcher.ends_with("chorus-sandbox"), "{sandbox:?}");
        assert!(sandbox.landlock.contains("Enforced"), "{sandbox:?}");
        assert!(sandbox.seccomp.starts_with("filter"), "{sandbox:?}");
        assert!(sandbox.problems.is_empty(), "{sandbox:?}");
    }
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_sandbox_refuses_cli_agents_and_bash_and_says_what_to_do() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("notes.txt"), "still readable\n").expect("seed");
    let orchestrator = orchestrator(
        data_dir.path(),
        SandboxConfig {
            launcher: Some("/nonexistent/chorus-sandbox".into()),
            ..SandboxConfig::default()
        },
    )
    .await;
    let mut client = orchestrator.client().await;
    let (own, tool_exec) = status(&orchestrator, &mut client).await;
    for sandbox in [
        own.sandbox.expect("sandbox"),
        tool_exec.sandbox.expect("sandbox"),
    ] {
        assert_eq!(sandbox.state, "unavailable", "{sandbox:?}");
        assert!(
            sandbox
                .problems
                .iter()
                .any(|p| p.contains("/nonexistent/chorus-sandbox")),
            "{sandbox:?}"
        );
    }
    let team = fake_cli_team(&mut client, root.path(), &["bash", "file.read"], "You try.").await;
    let task = planned_task(&mut client, &team.workspace, "fake: say hello").await;
    let refused = client
        .start_task(pb::StartTaskRequest {
            task_id: task.id.clone(),
            agent: team.agent.clone(),
            prompt: String::new(),
            timeout_secs: 0,
        })
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("sandbox, which is unavailable")
            && refused.message().contains("--sandbox off"),
        "{}",
        refused.message()
    );
    assert_eq!(
        task_of(&mut client, &task.id).await.status,
        "planned",
        "nothing changed"
    );

    // bash is refused the same way; file tools need no process and work.
    let ran = bash(&orchestrator, &mut client, &task, &team.agent, "touch ran").await;
    let message = ran.expect_failure(1, "failed_precondition");
    assert!(message.contains("--sandbox off"), "{message}");
    assert!(!root.path().join("ran").exists());
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_sandbox_off_agents_run_unconfined_as_the_operator_asked() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = orchestrator(
        data_dir.path(),
        SandboxConfig {
            mode: Mode::Off,
            ..SandboxConfig::default()
        },
    )
    .await;
    let mut client = orchestrator.client().await;
    let (own, _) = status(&orchestrator, &mut client).await;
    let sandbox = own.sandbox.expect("sandbox");
    assert_eq!(sandbox.state, "off");
    assert!(sandbox.problems[0].contains("--sandbox off"), "{sandbox:?}");
    let team = fake_cli_team(&mut client, root.path(), &["bash"], "You run.").await;
    let task = planned_task(
        &mut client,
        &team.workspace,
        &report("complete", "ran unconfined"),
    )
    .await;
    start(&mut client, &task, &team.agent, 0).await;
    let events = wait_for(&mut client, &task.id, ends_run).await;
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    // bash runs as the service's own user, seeing the host's processes.
    let task = planned_task(&mut client, &team.workspace, "run a command").await;
    let ran = bash(&orchestrator, &mut client, &task, &team.agent, "id -u").await;
    assert_eq!(
        ran.output()["stdout"],
        format!("{}\n", nix::unistd::geteuid())
    );
    drop(client);
    orchestrator.stop().await;
}

/// A root service with no `--sandbox-user` runs a workspace's processes as
/// the owner of its root, never as root: a root-owned root is said to be a
/// problem when the workspace is made (and read), with the fix, instead of
/// only when a task starts bash, git or a CLI agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_owned_workspace_is_flagged_when_it_is_made_with_the_fix() {
    if !chorus_sandbox::testing::root_for("a root-owned workspace") {
        return;
    }
    let data = tempfile::tempdir().expect("data");
    let orchestrator = orchestrator(data.path(), SandboxConfig::default()).await;
    let mut client = orchestrator.client().await;
    let owned_by_root = tempfile::tempdir().expect("root");
    let made = client
        .create_workspace(pb::CreateWorkspaceRequest {
            name: "roots".into(),
            root: owned_by_root.path().display().to_string(),
        })
        .await
        .expect("made, with a warning")
        .into_inner();
    assert_eq!(made.warnings.len(), 1, "{made:?}");
    let warning = &made.warnings[0];
    for fix in ["owned by root", "chown", "--sandbox-user"] {
        assert!(warning.contains(fix), "{fix} not in: {warning}");
    }
    let read = client
        .get_workspace(pb::GetWorkspaceRequest {
            id: made.id.clone(),
        })
        .await
        .expect("read")
        .into_inner();
    assert_eq!(read.warnings, made.warnings, "said on every read");

    let given = tempfile::tempdir().expect("root");
    let fine = chorus_tests::agents::workspace(&mut client, "given", given.path()).await;
    assert!(fine.warnings.is_empty(), "{:?}", fine.warnings);
    orchestrator.stop().await;
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
