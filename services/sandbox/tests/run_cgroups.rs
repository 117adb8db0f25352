//! One cgroup per run: the sandboxes of one run share its memory and process
//! limits, each run has its own, and the run's group goes with its last
//! sandbox. Needs a host where the service can make cgroups (root with a
//! writable hierarchy); elsewhere each test says it was skipped.

mod support;

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use chorus_sandbox::testing::{cgroups, give_to_test_user, run_cgroup_dirs};
use chorus_sandbox::{Cgroups, Limits, ProcessSpec, Sandbox, SandboxConfig, SandboxedChild};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use support::{Workspace, bash, run, sandbox_with, workspace};

const MIB: u64 = 1 << 20;
/// The run's memory limit in these tests, and what each sandbox tries to hold.
const RUN_MEMORY: u64 = 256 * MIB;
const HOLD: u64 = 200 * MIB;

/// The cgroup plan, or None (and a note) where the host gives none with
/// `what` in it.
fn plan_with(what: &str, has: impl Fn(&Cgroups) -> bool) -> Option<Cgroups> {
    let plan = cgroups().filter(|p| has(p));
    if plan.is_none() {
        assert!(
            std::env::var("CHORUS_TEST_REQUIRE_ROOT").as_deref() != Ok("1"),
            "CHORUS_TEST_REQUIRE_ROOT=1 but this host gives the service no {what} cgroup: run the tests as root on a host with a writable cgroup hierarchy (CI does)"
        );
        eprintln!("not run: this host gives the service no {what} cgroup");
    }
    plan
}

/// A run id unique to this test process and `name`.
fn run_id(name: &str) -> String {
    format!("test-{name}-{}", std::process::id())
}

async fn limited(processes: u64, memory_bytes: u64) -> Sandbox {
    sandbox_with(SandboxConfig {
        limits: Limits {
            processes,
            memory_bytes,
            ..Limits::default()
        },
        ..SandboxConfig::default()
    })
    .await
}

/// A FIFO `release` in the workspace, held open for writing by the test: a
/// sandboxed program that opened it for reading gets its end of file when the
/// returned handle is dropped.
fn release_fifo(ws: &Workspace) -> std::fs::File {
    let path = ws.root.join("release");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    give_to_test_user(&path);
    // Read-write: opening never waits for a reader.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_CLOEXEC)
        .open(&path)
        .expect("open the fifo")
}

fn in_run(spec: ProcessSpec, run: &str) -> ProcessSpec {
    ProcessSpec {
        run: Some(run.to_owned()),
        ..spec
    }
}

/// Python that opens the release FIFO, holds `HOLD` bytes (every page
/// written), says `held`, and waits for the release.
fn holder(ws: &Workspace) -> ProcessSpec {
    bash(
        ws,
        &format!(
            "exec python3 -c \"f = open('release'); x = b'x' * {HOLD}; print('held', flush=True); f.read()\""
        ),
    )
}

/// The first line `child` writes (empty when it ended without one).
async fn first_line(child: &mut SandboxedChild) -> String {
    let mut lines = BufReader::new(child.take_stdout().expect("stdout")).lines();
    lines.next_line().await.ok().flatten().unwrap_or_default()
}

/// Memory of one cgroup as its files say: the limit, the most it held, and
/// how often the limit was hit.
#[derive(Debug)]
struct Memory {
    limit: u64,
    peak: u64,
    hit: u64,
}

fn number(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap_or(u64::MAX)
}

fn memory_of(plan: &Cgroups, dir: &Path) -> Memory {
    match plan {
        Cgroups::V2 { .. } => {
            let events = std::fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
            let field = |name: &str| {
                events
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                    .unwrap_or(0)
            };
            Memory {
                limit: number(&dir.join("memory.max")),
                peak: number(&dir.join("memory.peak")),
                hit: field("max ") + field("oom_kill "),
            }
        }
        Cgroups::V1 { .. } => Memory {
            limit: number(&dir.join("memory.limit_in_bytes")),
            peak: number(&dir.join("memory.max_usage_in_bytes")),
            hit: number(&dir.join("memory.failcnt")),
        },
    }
}

/// The run's group in the memory (or pids) hierarchy.
fn run_dir(plan: &Cgroups, run: &str, controller: &str) -> PathBuf {
    let parent = match plan {
        Cgroups::V2 { parent } => Some(parent),
        Cgroups::V1 { memory, pids, .. } => match controller {
            "memory" => memory.as_ref(),
            _ => pids.as_ref(),
        },
    };
    parent
        .expect("the controller's hierarchy")
        .join(format!("chorus-run-{run}"))
}

fn assert_run_groups_gone(plan: &Cgroups, run: &str) {
    for dir in run_cgroup_dirs(plan, run) {
        assert!(
            !dir.exists(),
            "the run's cgroup {} outlived the run's last sandbox",
            dir.display()
        );
    }
}

#[tokio::test]
async fn the_sandboxes_of_one_run_share_its_memory() {
    let Some(plan) = plan_with("memory", Cgroups::limits_memory) else {
        return;
    };
    let sandbox = limited(512, RUN_MEMORY).await;
    let ws = workspace();
    let release = release_fifo(&ws);
    let run = run_id("memory");
    let mut children: Vec<SandboxedChild> = (0..3)
        .map(|_| sandbox.spawn(&in_run(holder(&ws), &run)).expect("spawned"))
        .collect();
    // Each says `held`, or ends without (killed at the limit). Once all three
    // answered, none is allocating any more.
    let answers = first_lines(&mut children).await;
    let memory = std::fs::metadata(run_dir(&plan, &run, "memory"))
        .is_ok()
        .then(|| memory_of(&plan, &run_dir(&plan, &run, "memory")));
    drop(release);
    let mut held_to_the_end = 0;
    for child in &mut children {
        let status = child.wait().await.expect("waited");
        if status.success() {
            held_to_the_end += 1;
        } else {
            assert_eq!(
                status.signal(),
                Some(9),
                "a holder ended otherwise than killed at the limit: {status:?}"
            );
        }
    }
    assert!(
        held_to_the_end <= 1,
        "{held_to_the_end} sandboxes of one run each held {} MiB at once against the run's {} MiB (answers: {answers:?})",
        HOLD / MIB,
        RUN_MEMORY / MIB
    );
    let memory = memory.expect("the run's memory cgroup existed while its sandboxes ran");
    assert_eq!(memory.limit, RUN_MEMORY, "{memory:?}");
    assert!(
        memory.peak <= RUN_MEMORY && memory.peak >= HOLD,
        "the run's group did not carry its sandboxes' memory: {memory:?}"
    );
    assert!(memory.hit > 0, "the run's limit was never hit: {memory:?}");
    assert_run_groups_gone(&plan, &run);
}

/// The first line of each of three children, read concurrently.
async fn first_lines(children: &mut [SandboxedChild]) -> Vec<String> {
    let [a, b, c] = children else {
        panic!("three children");
    };
    let (a, b, c) = tokio::join!(first_line(a), first_line(b), first_line(c));
    vec![a, b, c]
}

#[tokio::test]
async fn each_run_has_its_own_budget() {
    let Some(plan) = plan_with("memory", Cgroups::limits_memory) else {
        return;
    };
    let sandbox = limited(512, RUN_MEMORY).await;
    let ws = workspace();
    let release = release_fifo(&ws);
    let runs: Vec<String> = (0..3).map(|i| run_id(&format!("budget{i}"))).collect();
    let mut children: Vec<SandboxedChild> = runs
        .iter()
        .map(|run| sandbox.spawn(&in_run(holder(&ws), run)).expect("spawned"))
        .collect();
    let answers = first_lines(&mut children).await;
    assert_eq!(
        answers,
        ["held", "held", "held"],
        "three runs could not each hold {} MiB of their own {} MiB",
        HOLD / MIB,
        RUN_MEMORY / MIB
    );
    for run in &runs {
        let dir = run_dir(&plan, run, "memory");
        assert!(dir.is_dir(), "run {run} has no cgroup of its own");
        let memory = memory_of(&plan, &dir);
        assert!(
            memory.limit == RUN_MEMORY && memory.peak >= HOLD,
            "run {run}: {memory:?}"
        );
    }
    drop(release);
    for child in &mut children {
        let status = child.wait().await.expect("waited");
        assert!(status.success(), "{status:?}");
    }
    for run in &runs {
        assert_run_groups_gone(&plan, run);
    }
}

#[tokio::test]
async fn the_sandboxes_of_one_run_share_its_processes() {
    let Some(plan) = plan_with("pids", Cgroups::limits_processes) else {
        return;
    };
    const LIMIT: u64 = 40;
    const EACH: usize = 25;
    let sandbox = limited(LIMIT, Limits::default().memory_bytes).await;
    let ws = workspace();
    let release = release_fifo(&ws);
    let run = run_id("pids");
    // Starts up to EACH children that wait for the release, says how many.
    let forker = format!(
        "exec python3 -c \"\nimport os\nf = open('release')\nn = 0\nfor _ in range({EACH}):\n    try:\n        if os.fork() == 0:\n            f.read(); os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n, flush=True)\nf.read()\""
    );
    let spec = in_run(bash(&ws, &forker), &run);
    let mut first = sandbox.spawn(&spec).expect("spawned");
    let started_first: usize = first_line(&mut first).await.parse().expect("a count");
    let mut second = sandbox.spawn(&spec).expect("spawned");
    let started_second: usize = first_line(&mut second).await.parse().expect("a count");
    let pids = std::fs::read_to_string(run_dir(&plan, &run, "pids").join("pids.current"));
    drop(release);
    first.wait().await.expect("waited");
    second.wait().await.expect("waited");
    assert!(
        started_first + started_second < usize::try_from(LIMIT).expect("small"),
        "two sandboxes of one run started {started_first} + {started_second} processes against the run's limit of {LIMIT}"
    );
    let pids: u64 = pids
        .expect("the run's pids cgroup existed while its sandboxes ran")
        .trim()
        .parse()
        .expect("a number");
    assert!(
        pids <= LIMIT && pids > u64::try_from(EACH).expect("small"),
        "the run's group counted {pids} processes"
    );
    assert_run_groups_gone(&plan, &run);
}

#[tokio::test]
async fn the_run_group_goes_with_its_last_sandbox() {
    let Some(plan) = cgroups() else {
        eprintln!("skipped: this host gives the service no cgroup");
        return;
    };
    let sandbox = limited(512, Limits::default().memory_bytes).await;
    let ws = workspace();
    let release = release_fifo(&ws);
    let run = run_id("last");
    let mut long = sandbox
        .spawn(&in_run(
            bash(
                &ws,
                "exec python3 -c \"f = open('release'); print('up', flush=True); f.read()\"",
            ),
            &run,
        ))
        .expect("spawned");
    let mut out = long.take_stdout().expect("stdout");
    let mut up = [0u8; 3];
    out.read_exact(&mut up).await.expect("up");
    let dirs = run_cgroup_dirs(&plan, &run);
    for dir in &dirs {
        let sandboxes = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("the run's cgroup {}: {e}", dir.display()))
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("chorus-sandbox-")
            })
            .count();
        assert_eq!(
            sandboxes,
            1,
            "{}: one sandbox, in its own child",
            dir.display()
        );
    }
    let short = support::run(&sandbox, &in_run(bash(&ws, "true"), &run)).await;
    assert!(short.status.success(), "{}", short.stderr);
    for dir in &dirs {
        assert!(
            dir.is_dir(),
            "the run's cgroup {} went while a sandbox of the run still ran",
            dir.display()
        );
    }
    drop(release);
    assert!(long.wait().await.expect("waited").success());
    assert_run_groups_gone(&plan, &run);
}

#[tokio::test]
async fn a_run_id_that_is_not_one_safe_name_is_refused() {
    let sandbox = limited(512, Limits::default().memory_bytes).await;
    let ws = workspace();
    for bad in ["../escape", "a/b", "", "."] {
        let ran = support::run(&sandbox, &in_run(bash(&ws, "echo ran"), bad)).await;
        assert_eq!(
            ran.status.code(),
            Some(125),
            "the run id {bad:?} was accepted: {}",
            ran.stdout
        );
        assert!(ran.stderr.contains("the run id"), "{}", ran.stderr);
    }
}

#[tokio::test]
async fn groups_of_launchers_that_are_gone_are_removed_at_start() {
    let Some(plan) = cgroups() else {
        eprintln!("skipped: this host gives the service no cgroup");
        return;
    };
    // A pid that is gone: a child this test started and reaped.
    let gone = std::process::Command::new("true")
        .spawn()
        .and_then(|mut c| c.wait().map(|_| c.id()))
        .expect("true runs");
    let me = std::process::id();
    let run = |name: &str| format!("chorus-run-{}", run_id(name));
    let mut left = Vec::new();
    let mut kept = Vec::new();
    for parent in plan.parents() {
        let empty = parent.join(run("leftover-empty"));
        let dead = parent.join(run("leftover-dead"));
        let live = parent.join(run("live"));
        std::fs::create_dir(&empty).expect("mkdir");
        std::fs::create_dir_all(dead.join(format!("chorus-sandbox-{gone}"))).expect("mkdir");
        std::fs::create_dir_all(live.join(format!("chorus-sandbox-{me}"))).expect("mkdir");
        left.extend([empty, dead]);
        kept.push(live);
    }
    let _sandbox = limited(512, Limits::default().memory_bytes).await;
    for dir in &left {
        assert!(
            !dir.exists(),
            "{} was left by a launcher that is gone, and is still there",
            dir.display()
        );
    }
    for dir in &kept {
        assert!(
            dir.is_dir(),
            "{} belongs to a live launcher, and was removed",
            dir.display()
        );
        let _ = std::fs::remove_dir(dir.join(format!("chorus-sandbox-{me}")));
        let _ = std::fs::remove_dir(dir);
    }
}

/// What the processes of one sandbox write together is limited: children
/// that each write a file under the file size limit and exit are stopped —
/// every process killed, exit 123 with the reason — soon after the sum passes
/// the limit; a sandbox that writes less runs to its end.
#[tokio::test]
async fn what_the_processes_of_a_sandbox_write_together_is_limited() {
    const LIMIT: u64 = 32 * MIB;
    if plan_with("", |_| true).is_none() {
        return;
    }
    let sandbox = sandbox_with(SandboxConfig {
        limits: Limits {
            written_bytes: LIMIT,
            ..Limits::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let ws = workspace();
    let under = run(
        &sandbox,
        &bash(
            &ws,
            "for i in 1 2 3 4 5 6 7 8; do (head -c 2M /dev/zero > small$i); done; echo done",
        ),
    )
    .await;
    assert!(under.status.success(), "{}", under.stderr);
    assert_eq!(under.stdout.trim(), "done");

    // 64 files of 4 MiB, each by a child that exits, paced so that the
    // limit is passed well before the end.
    let over = run(
        &sandbox,
        &bash(
            &ws,
            "for i in $(seq 1 64); do (head -c 4M /dev/zero > big$i); sleep 0.05; done; echo finished",
        ),
    )
    .await;
    assert_eq!(
        over.status.code(),
        Some(chorus_sandbox::policy::EXIT_WROTE_TOO_MUCH),
        "{}",
        over.stderr
    );
    assert!(over.stderr.contains("wrote too much"), "{}", over.stderr);
    assert!(!over.stdout.contains("finished"), "{}", over.stdout);
    let written: u64 = std::fs::read_dir(&ws.root)
        .expect("workspace")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("big"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum();
    eprintln!(
        "the over-limit sandbox wrote {} MiB of the 256 it tried before it was stopped",
        written / MIB
    );
    assert!(
        written < 256 * MIB,
        "the sandbox wrote all it tried ({} MiB) past its {} MiB limit",
        written / MIB,
        LIMIT / MIB
    );
}
