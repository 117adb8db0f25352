//! What the run sandbox costs, each measure in both tiers (namespaces,
//! landlock) side by side with the same work unconfined (`--sandbox off`) in
//! one run, the three interleaved:
//!
//! 1. One bash tool call (`true`), through tool-exec's runner in this process.
//!    One git.status call the same way (git reading the call's own common
//!    directory, whose configuration Chorus wrote), beside `git status` run
//!    as a plain process on the same repository.
//! 2. One agent start: StartTask to the run's recorded end, for a fake CLI
//!    that submits its report (one chorus-tools call) and exits.
//! 3. A restart after SIGKILL with 300 runs of the killed process (fake CLIs
//!    waiting at a gate): from starting the orchestrator binary to its
//!    serving, when it resumes them (their sessions kept), when it records
//!    them interrupted (their run directories removed), and with none.
//!
//! 200 concurrent sandboxed runs are measured by the agent_runs bench.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench sandbox`
//! (CHORUS_BENCH_CALLS: bash calls per mode, default 200; CHORUS_BENCH_STARTS:
//! agent starts per mode, default 50; CHORUS_BENCH_INTERRUPTED: runs to
//! recover, default 300).

use std::path::Path;
use std::time::{Duration, Instant};

use chorus_run_token::RunGrant;
use chorus_sandbox::testing::{built_launcher, give_to_test_user};
use chorus_sandbox::{Mode, Sandbox, SandboxConfig, Tier};
use chorus_tests::agents::{Client, data, ends_run, fake_cli_team, planned_task, report, wait_for};
use chorus_tests::orchestrator::{Orchestrator, OrchestratorProcess};
use chorus_tests::stats::{Samples, env_number, ms};
use chorus_tool_exec::{Limits, ToolRunner};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The three ways processes are run, as the rows of each table.
const SETTINGS: [(&str, Mode, Option<Tier>); 3] = [
    ("namespace tier", Mode::On, Some(Tier::Namespaces)),
    ("landlock tier", Mode::On, Some(Tier::Landlock)),
    ("unconfined (--sandbox off)", Mode::Off, None),
];

fn config(mode: Mode, tier: Option<Tier>) -> SandboxConfig {
    SandboxConfig {
        mode,
        tier,
        launcher: Some(built_launcher()),
        ..SandboxConfig::default()
    }
}

fn table(title: &str, rows: &[(&str, Samples)]) {
    println!("## {title}\n");
    println!("| path | p50 ms | p90 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in rows {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ms(s.mean())
        );
    }
    if let Some((baseline, unconfined)) = rows.last() {
        println!();
        for (name, with) in &rows[..rows.len() - 1] {
            #[allow(clippy::cast_precision_loss)]
            let ratio = with.median().as_secs_f64() / unconfined.median().as_secs_f64();
            println!(
                "median: {name} / {baseline} = {ratio:.2}; difference {} ms",
                ms(with.median().saturating_sub(unconfined.median()))
            );
        }
        println!();
    }
}

/// A tool runner per setting, and a grant of `tool` on `root`.
async fn runners_and_grant(root: &Path, tool: &str) -> (Vec<ToolRunner>, RunGrant) {
    let mut runners = Vec::new();
    for (_, mode, tier) in SETTINGS {
        runners.push(ToolRunner::new(
            Limits::default(),
            Sandbox::start(config(mode, tier)).await,
            CancellationToken::new(),
        ));
    }
    let grant = RunGrant {
        run_id: format!("bench-{tool}"),
        task_id: "bench".into(),
        agent: "bench".into(),
        tools: vec![tool.into()],
        root: root.to_path_buf(),
        egress: Vec::new(),
        epoch: 0,
    };
    (runners, grant)
}

async fn bash_calls(calls: usize) {
    let root = tempfile::tempdir().expect("root");
    give_to_test_user(root.path());
    let (runners, grant) = runners_and_grant(root.path(), "bash").await;
    let call = |runner: &ToolRunner| {
        let (runner, grant) = (runner.clone(), grant.clone());
        async move {
            let started = Instant::now();
            let outcome = runner
                .execute(grant, "bash", json!({"command": "true"}))
                .await
                .expect("bash");
            assert_eq!(outcome.metadata["exit_code"], 0, "{outcome:?}");
            started.elapsed()
        }
    };
    for _ in 0..20 {
        for runner in &runners {
            call(runner).await;
        }
    }
    let mut samples = vec![Vec::new(); runners.len()];
    for _ in 0..calls {
        for (runner, samples) in runners.iter().zip(&mut samples) {
            samples.push(call(runner).await);
        }
    }
    table(
        &format!("One bash tool call (`true`, {calls} per setting, interleaved)"),
        &rows(samples),
    );
}

async fn git_status_calls(calls: usize) {
    let root = tempfile::tempdir().expect("root");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(root.path())
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    for i in 0..50 {
        std::fs::write(root.path().join(format!("file{i}.txt")), format!("{i}\n")).expect("file");
    }
    git(&["add", "."]);
    git(&[
        "-c",
        "user.name=bench",
        "-c",
        "user.email=bench@example.com",
        "commit",
        "-qm",
        "files",
    ]);
    std::fs::write(root.path().join("file0.txt"), "changed\n").expect("change");
    give_to_test_user(root.path());
    let (runners, grant) = runners_and_grant(root.path(), "git.status").await;
    let call = |runner: &ToolRunner| {
        let (runner, grant) = (runner.clone(), grant.clone());
        async move {
            let started = Instant::now();
            let outcome = runner
                .execute(grant, "git.status", json!({}))
                .await
                .expect("git.status");
            assert!(
                outcome.output.to_string().contains("file0.txt"),
                "{outcome:?}"
            );
            started.elapsed()
        }
    };
    let plain = || {
        let started = Instant::now();
        let out = std::process::Command::new("git")
            // The repository is the workspace owner's, not this root
            // process's: git asks for it to be named safe.
            .args([
                "-c",
                "safe.directory=*",
                "status",
                "--porcelain=v2",
                "--branch",
            ])
            .current_dir(root.path())
            .output()
            .expect("git status");
        assert!(String::from_utf8_lossy(&out.stdout).contains("file0.txt"));
        started.elapsed()
    };
    for _ in 0..10 {
        for runner in &runners {
            call(runner).await;
        }
        plain();
    }
    let mut samples = vec![Vec::new(); runners.len() + 1];
    for _ in 0..calls {
        for (runner, samples) in runners.iter().zip(&mut samples) {
            samples.push(call(runner).await);
        }
        samples[runners.len()].push(plain());
    }
    let mut rows = Vec::new();
    for ((name, _, _), s) in SETTINGS.iter().zip(samples.iter()) {
        rows.push((*name, Samples::new(s.clone())));
    }
    rows.push((
        "`git status` as a plain process (no Chorus)",
        Samples::new(samples[runners.len()].clone()),
    ));
    table(
        &format!("One git.status call (50 files, one changed; {calls} per setting, interleaved)"),
        &rows,
    );
}

/// The table's rows: each setting's name with its samples.
fn rows(samples: Vec<Vec<Duration>>) -> Vec<(&'static str, Samples)> {
    SETTINGS
        .iter()
        .zip(samples)
        .map(|((name, _, _), s)| (*name, Samples::new(s)))
        .collect()
}

async fn orchestrator(data: &Path, mode: Mode, tier: Option<Tier>, runs: &Path) -> Orchestrator {
    Orchestrator::with_fake_cli_on_sqlite(data, |config| {
        config.sandbox = self::config(mode, tier);
        config.runner.runs_dir = runs.to_path_buf();
    })
    .await
}

/// An orchestrator and a workspace whose agent is the fake CLI.
struct Side {
    orchestrator: Orchestrator,
    client: Client,
    team: chorus_tests::agents::Team,
    _dirs: (tempfile::TempDir, tempfile::TempDir, tempfile::TempDir),
}

async fn side(mode: Mode, tier: Option<Tier>) -> Side {
    let data = tempfile::tempdir().expect("data");
    let root = tempfile::tempdir().expect("root");
    // The landlock tier shows a root service's run user the host's own
    // directories: the run directories are kept where that user can reach
    // them (docs/sandbox-tiers.md; a service that is not root, as in the
    // images, needs nothing).
    let runs = tempfile::tempdir().expect("runs");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(runs.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
    }
    let orchestrator = orchestrator(data.path(), mode, tier, runs.path()).await;
    let mut client = orchestrator.client().await;
    let team = fake_cli_team(&mut client, root.path(), &[], "i").await;
    Side {
        orchestrator,
        client,
        team,
        _dirs: (data, root, runs),
    }
}

/// StartTask → the run's end, for a CLI that reports at once.
async fn one_start(side: &mut Side) -> Duration {
    let task = planned_task(
        &mut side.client,
        &side.team.workspace,
        &report("complete", "ok"),
    )
    .await;
    let started = Instant::now();
    chorus_tests::agents::start(&mut side.client, &task, &side.team.agent, 0).await;
    let events = wait_for(&mut side.client, &task.id, ends_run).await;
    let elapsed = started.elapsed();
    assert_eq!(data(events.last().expect("end"))["reason"], "completed");
    elapsed
}

async fn agent_starts(starts: usize) {
    let mut sides = Vec::new();
    for (_, mode, tier) in SETTINGS {
        sides.push(side(mode, tier).await);
    }
    for _ in 0..5 {
        for side in &mut sides {
            one_start(side).await;
        }
    }
    let mut samples = vec![Vec::new(); sides.len()];
    for _ in 0..starts {
        for (side, samples) in sides.iter_mut().zip(&mut samples) {
            samples.push(one_start(side).await);
        }
    }
    table(
        &format!(
            "One agent start: StartTask → the run's end, a CLI that reports at once ({starts} per setting, interleaved)"
        ),
        &rows(samples),
    );
    for side in sides {
        side.orchestrator.stop().await;
    }
}

/// Starts `count` fake-CLI runs that wait at a gate, on the binary, then
/// kills it: `count` runs of a replica that is gone, for the next start to
/// take back.
async fn interrupted_runs(
    data: &Path,
    root: &Path,
    database: &str,
    args: &[&str],
    count: usize,
) -> Vec<String> {
    let orchestrator = OrchestratorProcess::spawn(data, database, args).await;
    let mut client = orchestrator.client().await;
    let team = chorus_tests::agents::fake_cli_team(&mut client, root, &[], "").await;
    let mut tasks = Vec::new();
    for _ in 0..count {
        let task = chorus_tests::agents::planned_task(
            &mut client,
            &team.workspace,
            "fake: wait gate.fifo\nfake-resume: wait resumed.fifo",
        )
        .await;
        chorus_tests::agents::start(&mut client, &task, &team.agent, 0).await;
        tasks.push(task);
    }
    for task in &tasks {
        chorus_tests::agents::wait_for(&mut client, &task.id, |e| {
            e.kind == "agent_progress"
                && chorus_tests::agents::data(e)["text"] == "waiting on gate.fifo"
        })
        .await;
    }
    drop(client);
    orchestrator.kill().await;
    tasks.into_iter().map(|t| t.id).collect()
}

async fn time_to_serve(data: &Path, database: &str, args: &[&str]) -> Duration {
    let started = Instant::now();
    let orchestrator = OrchestratorProcess::spawn(data, database, args).await;
    let elapsed = started.elapsed();
    let status = orchestrator.stop().await;
    assert!(status.success(), "{status:?}");
    elapsed
}

async fn recovery(count: usize) {
    let data = tempfile::tempdir().expect("data");
    let database = data.path().join("chorus.db").display().to_string();
    let fake = chorus_tests::agents::fake_cli().display().to_string();
    let args = ["--claude-bin", fake.as_str()];
    // The workspace outlives the killed process, as a real one does.
    let root = tempfile::tempdir().expect("root");
    let tasks = interrupted_runs(data.path(), root.path(), &database, &args, count).await;
    // Their sessions are in the runs directory: the restart resumes them.
    let started = Instant::now();
    let orchestrator = OrchestratorProcess::spawn(data.path(), &database, &args).await;
    let resumed = started.elapsed();
    let mut client = orchestrator.client().await;
    for task in &tasks {
        wait_for(&mut client, task, |e| {
            e.kind == "agent_progress"
                && chorus_tests::agents::data(e)["text"] == "waiting on resumed.fifo"
        })
        .await;
    }
    drop(client);
    orchestrator.kill().await;
    // Gone: the next restart can only record them interrupted.
    std::fs::remove_dir_all(data.path().join("runs")).expect("remove the run directories");
    let interrupted = time_to_serve(data.path(), &database, &args).await;
    let without = time_to_serve(data.path(), &database, &args).await;
    println!("## Restart: starting the orchestrator binary to serving\n");
    println!("| restart | time to serve |");
    println!("|---|---|");
    println!(
        "| with {count} runs of the killed process to resume | {} ms |",
        ms(resumed)
    );
    println!(
        "| with {count} runs to record interrupted (their sessions gone) | {} ms |",
        ms(interrupted)
    );
    println!("| with none | {} ms |\n", ms(without));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    bash_calls(env_number("CHORUS_BENCH_CALLS", 200)).await;
    git_status_calls(env_number("CHORUS_BENCH_CALLS", 200)).await;
    agent_starts(env_number("CHORUS_BENCH_STARTS", 50)).await;
    recovery(env_number("CHORUS_BENCH_INTERRUPTED", 300)).await;
}
