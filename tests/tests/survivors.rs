//! Survivors after every ending of a run: none, ever. For each ending — the CLI
//! exits, the run times out, CancelTask, a handoff times out, SIGTERM, SIGKILL
//! (checked before and after the restart), CancelTask then SIGKILL, a crash
//! during start-up recovery — two runs leave children that try every way out
//! (plain, setsid, double-forked, setsid with a scrubbed environment): one
//! started by the CLI itself, one by a bash tool call the CLI made through
//! chorus-tools. After the ending, not one of them is running.
//!
//! Where the ending is an RPC that returns when the run is over (CancelTask,
//! the end event) the CLI's children are checked at once; a bash call's
//! children go when tool-exec sees its caller gone, and processes killed by
//! the kernel (SIGKILL of the orchestrator) go a moment later, so those are
//! awaited (bounded).

use std::path::Path;

use chorus_proto::orchestrator::v1 as pb;
use chorus_sandbox::testing::{ESCAPEES, await_escapees, escapees, eventually, survivors};
use chorus_tests::agents::{
    Client, add_agent, call, data, ends_run, fake_cli, planned_task, report, start, task_of,
    wait_for, workspace,
};
use chorus_tests::orchestrator::{Orchestrator, OrchestratorProcess};
use serde_json::json;

/// Who starts the children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Starter {
    /// The CLI itself.
    Cli,
    /// A bash tool call of the CLI, run by tool-exec.
    Bash,
}

const STARTERS: [Starter; 2] = [Starter::Cli, Starter::Bash];

/// Unique to this process too: the suite runs again beside itself in other
/// configurations.
fn marker(ending: &str, starter: Starter) -> String {
    format!("chorus-escapee-{ending}-{starter:?}-{}", std::process::id())
}

/// The script steps that leave the children of `marker` and then wait forever
/// (the CLI hangs, or its bash call never returns).
fn leave_children(starter: Starter, marker: &str) -> Vec<String> {
    match starter {
        Starter::Cli => vec![format!("fake: stubborn {marker}")],
        Starter::Bash => vec![call(&json!({
            "tool": "bash",
            "command": format!("{} {} exec sleep 1000", escapees(marker), await_escapees(marker)),
            "timeout_secs": 600,
        }))],
    }
}

/// A workspace with a Claude Code provider (the fake CLI) and agents `lead`
/// (handoff, bash) and `worker` (bash).
async fn team(client: &mut Client, root: &Path, name: &str) -> pb::Workspace {
    let ws = workspace(client, name, root).await;
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: ws.id.clone(),
            name: "cli".into(),
            kind: pb::ProviderKind::ClaudeCode.into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    add_agent(client, &ws, "lead", &["handoff", "bash"], "cli").await;
    add_agent(client, &ws, "worker", &["bash"], "cli").await;
    ws
}

/// Starts, for each starter, a task whose `lead` runs `script(marker)`, and
/// waits until all the children run; returns (task, marker) pairs.
async fn start_runs(
    client: &mut Client,
    ws: &pb::Workspace,
    ending: &str,
    timeout_secs: u32,
    script: impl Fn(Starter, &str) -> Vec<String>,
) -> Vec<(pb::Task, String)> {
    let mut runs = Vec::new();
    for starter in STARTERS {
        let marker = marker(ending, starter);
        let task = planned_task(client, ws, &script(starter, &marker).join("\n")).await;
        start(client, &task, "lead", timeout_secs).await;
        runs.push((task, marker));
    }
    for (_, marker) in &runs {
        eventually(&format!("the children of {marker} run"), || {
            survivors(marker).len() == ESCAPEES
        })
        .await;
    }
    runs
}

fn none_left(runs: &[(pb::Task, String)]) -> bool {
    runs.iter().all(|(_, marker)| survivors(marker).is_empty())
}

async fn all_gone(runs: &[(pb::Task, String)]) {
    eventually("every child of every run is gone", || none_left(runs)).await;
}

async fn in_process(data_dir: &Path) -> Orchestrator {
    Orchestrator::with_fake_cli_on_sqlite(data_dir, |_| {}).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_cli_exits_its_children_go_with_it_and_the_run_ends_at_once() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = in_process(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = team(&mut client, root.path(), "exit").await;
    let mut runs = Vec::new();
    for starter in STARTERS {
        let marker = marker("exit", starter);
        // The CLI's own children hold its stdout; the bash call's children its
        // output pipes. Then the CLI reports and exits.
        let leave = match starter {
            Starter::Cli => format!("fake: orphans {marker}"),
            Starter::Bash => call(&json!({
                "tool": "bash",
                "command": format!("{} {} echo started", escapees(&marker), await_escapees(&marker)),
            })),
        };
        let script = [leave, report("complete", "left children behind")].join("\n");
        let task = planned_task(&mut client, &ws, &script).await;
        // Far beyond the test's wait: reaching it would fail the run.
        start(&mut client, &task, "lead", 3600).await;
        runs.push((task, marker));
    }
    for (task, marker) in &runs {
        let events = wait_for(&mut client, &task.id, ends_run).await;
        assert_eq!(
            data(events.last().expect("end"))["reason"],
            "completed",
            "{marker}: the run ends when its CLI exits, whatever its children hold"
        );
        assert_eq!(survivors(marker), Vec::<i32>::new(), "{marker}");
    }
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_timeout_leaves_nothing() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = in_process(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = team(&mut client, root.path(), "timeout").await;
    let runs = start_runs(&mut client, &ws, "timeout", 3, leave_children).await;
    for (task, marker) in &runs {
        let events = wait_for(&mut client, &task.id, ends_run).await;
        let end = data(events.last().expect("end"));
        assert!(
            end["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with("timed out"),
            "{marker}: {end}"
        );
    }
    assert!(survivors(&runs[0].1).is_empty(), "the CLI's children");
    all_gone(&runs).await;
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_leaves_nothing() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = in_process(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = team(&mut client, root.path(), "cancel").await;
    let runs = start_runs(&mut client, &ws, "cancel", 0, leave_children).await;
    for (task, _) in &runs {
        client
            .cancel_task(pb::CancelTaskRequest {
                id: task.id.clone(),
                reason: "stop".into(),
                ..Default::default()
            })
            .await
            .expect("cancel");
    }
    // CancelTask returns once the CLI's processes are dead.
    assert_eq!(
        survivors(&runs[0].1),
        Vec::<i32>::new(),
        "the CLI's children"
    );
    all_gone(&runs).await;
    drop(client);
    orchestrator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_timeout_leaves_nothing_of_the_child() {
    let data_dir = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    let orchestrator = in_process(data_dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = team(&mut client, root.path(), "handoff").await;
    let runs = start_runs(&mut client, &ws, "handoff", 0, |starter, marker| {
        vec![
            call(&json!({
                "tool": "handoff",
                "agent": "worker",
                "timeout_secs": 3,
                "prompt": leave_children(starter, marker).join("\n"),
            })),
            report("blocked", "the worker timed out"),
        ]
    })
    .await;
    for (task, marker) in &runs {
        let events = wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_handoff_completed"
        })
        .await;
        assert_eq!(
            data(events.last().expect("end"))["failure"],
            "timed_out",
            "{marker}"
        );
        let ended = wait_for(&mut client, &task.id, |e| {
            ends_run(e) && data(e)["agent"] == "lead"
        })
        .await;
        assert_eq!(
            data(ended.last().expect("end"))["reason"],
            "completed",
            "{marker}: the parent goes on"
        );
    }
    all_gone(&runs).await;
    drop(client);
    orchestrator.stop().await;
}

/// Runs of `ending` leaving their children, on the orchestrator binary and an
/// SQLite file, to be ended by stopping or killing it.
struct OnBinary {
    data: tempfile::TempDir,
    root: tempfile::TempDir,
    database: String,
    args: Vec<String>,
    runs: Vec<(pb::Task, String)>,
}

impl OnBinary {
    /// The runs, the running binary and a client of it.
    async fn start(ending: &str) -> (Self, OrchestratorProcess, Client) {
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        let database = data.path().join("chorus.db").display().to_string();
        let fake = fake_cli().display().to_string();
        let mut on = Self {
            data,
            root,
            database,
            args: vec![
                "--claude-bin".into(),
                fake.clone(),
                "--opencode-bin".into(),
                fake,
            ],
            runs: Vec::new(),
        };
        let orchestrator = on.spawn().await;
        let mut client = orchestrator.client().await;
        let ws = team(&mut client, on.root.path(), ending).await;
        on.runs = start_runs(&mut client, &ws, ending, 0, leave_children).await;
        (on, orchestrator, client)
    }

    fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }

    async fn spawn(&self) -> OrchestratorProcess {
        OrchestratorProcess::spawn(self.data.path(), &self.database, &self.args()).await
    }

    /// Starts the binary again on the same data: nothing of the runs is left,
    /// and each task comes to one of `statuses` (a run the restart resumed
    /// plays no step of its script, so it ends without a report: the task
    /// waits).
    async fn restart_expecting(&self, statuses: &[&str]) {
        let again = self.spawn().await;
        let mut client = again.client().await;
        assert!(none_left(&self.runs), "after the restart");
        for (task, marker) in &self.runs {
            wait_for(&mut client, &task.id, |e| {
                e.kind == "status_changed"
                    && statuses.contains(&data(e)["to"].as_str().unwrap_or_default())
            })
            .await;
            let task = task_of(&mut client, &task.id).await;
            assert!(
                statuses.contains(&task.status.as_str()),
                "{marker}: {} ({})",
                task.status,
                task.status_reason
            );
        }
        assert!(none_left(&self.runs), "after the resumed runs ended");
        drop(client);
        let status = again.stop().await;
        assert!(status.success(), "{status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_nothing() {
    let (on, orchestrator, client) = OnBinary::start("sigterm").await;
    drop(client);
    let status = orchestrator.stop().await;
    assert!(status.success(), "{status:?}");
    // A graceful stop waits for every run's processes and every tool call.
    assert!(none_left(&on.runs), "children survived a graceful stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_leaves_nothing_even_before_a_restart() {
    let (on, orchestrator, client) = OnBinary::start("sigkill").await;
    drop(client);
    orchestrator.kill().await;
    all_gone(&on.runs).await;
    on.restart_expecting(&["waiting"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_then_sigkill_leaves_nothing() {
    let (on, orchestrator, client) = OnBinary::start("cancel-kill").await;
    // The cancels are sent, and the orchestrator dies before it can finish them.
    for (task, _) in &on.runs {
        let mut client = client.clone();
        let id = task.id.clone();
        tokio::spawn(async move {
            let _ = client
                .cancel_task(pb::CancelTaskRequest {
                    id,
                    reason: "stop".into(),
                    ..Default::default()
                })
                .await;
        });
    }
    orchestrator.kill().await;
    all_gone(&on.runs).await;
    on.restart_expecting(&["canceled", "waiting"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_start_up_recovery_leaves_nothing() {
    let (on, orchestrator, client) = OnBinary::start("recovery").await;
    drop(client);
    orchestrator.kill().await;
    all_gone(&on.runs).await;
    // The next one dies while starting up (its store is open, recovery under way).
    OrchestratorProcess::kill_when_it_logs(on.data.path(), &on.database, &on.args(), "store open")
        .await;
    assert!(none_left(&on.runs));
    on.restart_expecting(&["waiting"]).await;
}

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
