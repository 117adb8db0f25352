//! No run fills the disk: every way past the written-bytes limit an attacker
//! tried — `fallocate`, a sparse or truncated file, children the kernel reaps
//! by itself (their counts go with them), a run's many calls, one after the
//! other or at once — in both tiers, with or without a cgroup (as root, and
//! again as a service that is not root, which has none), and the free space
//! every sandbox leaves on the file systems it writes to.

mod support;

use std::os::unix::fs::MetadataExt;

use chorus_sandbox::policy::EXIT_WROTE_TOO_MUCH;
use chorus_sandbox::{Limits, ProcessSpec, Sandbox, SandboxConfig, Tier};
use nix::libc;

use support::{Ran, bash, run, sandbox_with, workspace};

in_both_tiers!(
    fallocate_takes_no_space_and_posix_fallocate_is_counted,
    no_file_is_longer_than_the_runs_limit,
    children_the_kernel_reaps_are_counted,
    the_limit_is_the_runs_over_its_calls_one_after_the_other,
    calls_of_a_run_at_once_share_its_limit,
    a_sandbox_stops_when_its_file_system_is_nearly_full,
    a_runs_calls_at_once_cannot_hold_more_memory_than_its_limit,
);

const MIB: u64 = 1 << 20;

/// A sandbox of `tier` whose runs may write `limit` bytes.
async fn limited(tier: Tier, limit: u64) -> Sandbox {
    limited_with(
        tier,
        Limits {
            written_bytes: limit,
            ..Limits::default()
        },
    )
    .await
}

async fn limited_with(tier: Tier, limits: Limits) -> Sandbox {
    sandbox_with(SandboxConfig {
        tier: Some(tier),
        limits,
        ..SandboxConfig::default()
    })
    .await
}

/// `python3 -c <script>` as a bash command line.
fn python(script: &str) -> String {
    format!("python3 -c '{}'", script.replace('\'', r"'\''"))
}

/// A unique run id for this test.
fn run_id(name: &str) -> String {
    format!("run-{name}-{}-{}", std::process::id(), uuid_ish())
}

fn uuid_ish() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// `spec` as a sandbox of run `run`.
fn in_run(spec: ProcessSpec, run: &str) -> ProcessSpec {
    ProcessSpec {
        run: Some(run.to_owned()),
        ..spec
    }
}

fn stopped_over_limit(ran: &Ran, what: &str) {
    assert_eq!(
        ran.status.code(),
        Some(EXIT_WROTE_TOO_MUCH),
        "{what}: not stopped (stdout: {}; stderr: {})",
        ran.stdout,
        ran.stderr
    );
    assert!(
        ran.stderr.contains("wrote too much"),
        "{what}: {}",
        ran.stderr
    );
}

/// Bytes the files of `dir` take on disk (allocated blocks).
fn allocated(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read the workspace")
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.blocks() * 512)
        .sum()
}

async fn fallocate_takes_no_space_and_posix_fallocate_is_counted(tier: Tier) {
    const LIMIT: u64 = 64 * MIB;
    let sandbox = limited(tier, LIMIT).await;
    let ws = workspace();
    // fallocate(2) itself, as `fallocate -l` and a C program make it.
    let raw = python(&format!(
        "import ctypes, errno, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         fd = os.open(\"raw\", os.O_CREAT | os.O_WRONLY, 0o644)\n\
         os.write(fd, b\"x\" * 8192)\n\
         for name, mode in ((\"allocate\", 0), (\"keep_size\", 1), (\"zero_range\", 0x10), (\"punch_hole\", 3)):\n\
         \x20   r = libc.syscall(ctypes.c_long({nr}), fd, mode, ctypes.c_long(0), ctypes.c_long(300 << 20))\n\
         \x20   print(name + \"=\" + (\"ok\" if r == 0 else errno.errorcode[ctypes.get_errno()]), flush=True)\n",
        nr = libc::SYS_fallocate,
    ));
    let ran = run(
        &sandbox,
        &bash(
            &ws,
            &format!("{raw}; fallocate -l 300M util && echo util=ok"),
        ),
    )
    .await;
    let got = support::answers(&ran.stdout);
    for refused in ["allocate", "keep_size", "zero_range"] {
        // (Python names errno 95 ENOTSUP; EOPNOTSUPP is the same number.)
        assert!(
            matches!(
                support::answer(&got, refused),
                Some("EOPNOTSUPP" | "ENOTSUP")
            ),
            "fallocate {refused}: {} {}",
            ran.stdout,
            ran.stderr
        );
    }
    assert_eq!(
        support::answer(&got, "punch_hole"),
        Some("ok"),
        "{}",
        ran.stderr
    );
    assert_eq!(support::answer(&got, "util"), None, "{}", ran.stdout);
    assert!(
        allocated(&ws.root) < 8 * MIB,
        "fallocate took {} MiB",
        allocated(&ws.root) / MIB
    );

    // posix_fallocate falls back to writing a byte per block: counted (two
    // files, each under the longest file a process may make).
    let ran = run(
        &sandbox,
        &bash(
            &ws,
            &python(
                "import os\n\
                 for name in (\"posix1\", \"posix2\"):\n\
                 \x20   fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)\n\
                 \x20   os.posix_fallocate(fd, 0, 40 << 20)\n\
                 print(\"allocated\", flush=True)",
            ),
        ),
    )
    .await;
    stopped_over_limit(&ran, "posix_fallocate of 2 × 40 MiB");
    // One longer than the run may write is refused outright.
    let ran = run(
        &sandbox,
        &bash(
            &ws,
            &python(
                "import os\n\
                 fd = os.open(\"posix3\", os.O_CREAT | os.O_WRONLY, 0o644)\n\
                 os.posix_fallocate(fd, 0, 300 << 20)",
            ),
        ),
    )
    .await;
    assert!(ran.stderr.contains("File too large"), "{}", ran.stderr);
}

async fn no_file_is_longer_than_the_runs_limit(tier: Tier) {
    const LIMIT: u64 = 64 * MIB;
    let sandbox = limited(tier, LIMIT).await;
    let ws = workspace();
    let ran = run(
        &sandbox,
        &bash(
            &ws,
            "truncate -s 1G sparse || echo truncate=refused; \
             dd if=/dev/zero of=seeked bs=1 count=1 seek=1G 2>/dev/null || echo seek=refused; \
             truncate -s 32M small && echo small=ok",
        ),
    )
    .await;
    let got = support::answers(&ran.stdout);
    assert_eq!(
        support::answer(&got, "truncate"),
        Some("refused"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        support::answer(&got, "seek"),
        Some("refused"),
        "{}",
        ran.stderr
    );
    assert_eq!(support::answer(&got, "small"), Some("ok"), "{}", ran.stderr);
    for name in ["sparse", "seeked"] {
        let len = std::fs::metadata(ws.root.join(name)).map_or(0, |m| m.len());
        assert!(len <= LIMIT, "{name} is {len} bytes long");
    }
}

async fn children_the_kernel_reaps_are_counted(tier: Tier) {
    const LIMIT: u64 = 64 * MIB;
    let sandbox = limited(tier, LIMIT).await;
    let ws = workspace();
    // SIGCHLD ignored: each child is reaped by the kernel as it exits, and
    // what it wrote is in no process's counts. One at a time (never two
    // alive at once), 6 × 16 MiB, each seen while it writes.
    let script = python(
        "import os, signal, time\n\
         signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n\
         for i in range(6):\n\
         \x20   pid = os.fork()\n\
         \x20   if pid == 0:\n\
         \x20       with open(\"child%d\" % i, \"wb\") as f:\n\
         \x20           for _ in range(4):\n\
         \x20               f.write(b\"x\" * (4 << 20)); f.flush(); time.sleep(0.15)\n\
         \x20       os._exit(0)\n\
         \x20   while True:\n\
         \x20       try:\n\
         \x20           os.kill(pid, 0); time.sleep(0.02)\n\
         \x20       except ProcessLookupError:\n\
         \x20           break\n\
         print(\"all-written\", flush=True)",
    );
    let ran = run(&sandbox, &bash(&ws, &script)).await;
    stopped_over_limit(&ran, "6 × 16 MiB by children reaped by the kernel");
    assert!(!ran.stdout.contains("all-written"), "{}", ran.stdout);
    let written = allocated(&ws.root);
    assert!(written < 96 * MIB, "{} MiB written", written / MIB);
}

async fn the_limit_is_the_runs_over_its_calls_one_after_the_other(tier: Tier) {
    const LIMIT: u64 = 48 * MIB;
    let sandbox = limited(tier, LIMIT).await;
    let ws = workspace();
    let run_a = run_id("a");
    let write = |name: &str| format!("head -c 32M /dev/zero > {name} && echo wrote-{name}");
    let first = run(&sandbox, &in_run(bash(&ws, &write("one")), &run_a)).await;
    assert!(first.status.success(), "{}", first.stderr);
    let second = run(&sandbox, &in_run(bash(&ws, &write("two")), &run_a)).await;
    stopped_over_limit(&second, "a run's second call of 32 MiB past its 48");
    assert!(
        second.stderr.contains("other calls"),
        "the message says the run's other calls wrote: {}",
        second.stderr
    );
    // Once over, the run's next call is stopped at its first look.
    let third = run(
        &sandbox,
        &in_run(bash(&ws, "echo started; sleep 30; echo late"), &run_a),
    )
    .await;
    stopped_over_limit(&third, "a call of a run over its limit");
    assert!(!third.stdout.contains("late"));
    // Another run has its own.
    let other = run(&sandbox, &in_run(bash(&ws, &write("three")), &run_id("b"))).await;
    assert!(other.status.success(), "{}", other.stderr);
}

async fn calls_of_a_run_at_once_share_its_limit(tier: Tier) {
    const LIMIT: u64 = 48 * MIB;
    let sandbox = limited(tier, LIMIT).await;
    let ws = workspace();
    let run_c = run_id("c");
    // Two calls at once, each writing 32 MiB, 2 MiB at a time.
    let write = |name: &str| {
        format!(
            "for i in $(seq 1 16); do head -c 2M /dev/zero >> {name}; sleep 0.05; done; echo wrote-{name}"
        )
    };
    let (left, right) = (
        in_run(bash(&ws, &write("left")), &run_c),
        in_run(bash(&ws, &write("right")), &run_c),
    );
    let (a, b) = tokio::join!(run(&sandbox, &left), run(&sandbox, &right));
    let stopped = [&a, &b]
        .iter()
        .filter(|r| r.status.code() == Some(EXIT_WROTE_TOO_MUCH))
        .count();
    assert!(
        stopped >= 1,
        "two calls of one run wrote 64 MiB at once past its 48: {} / {}",
        a.stderr,
        b.stderr
    );
}

async fn a_sandbox_stops_when_its_file_system_is_nearly_full(tier: Tier) {
    let ws = workspace();
    let stat = nix::sys::statvfs::statvfs(&ws.root).expect("statvfs");
    let size = stat.blocks() * stat.fragment_size();
    // A reserve larger than the whole file system: it is "nearly full"
    // however much other programs free meanwhile.
    let sandbox = limited_with(
        tier,
        Limits {
            min_free_bytes: size + 1024 * MIB,
            ..Limits::default()
        },
    )
    .await;
    let ran = run(&sandbox, &bash(&ws, "echo started; sleep 30; echo late")).await;
    stopped_over_limit(&ran, "a sandbox on a nearly full file system");
    assert!(
        ran.stderr.contains("--sandbox-min-free-mib"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stdout.contains("late"));
}

async fn a_runs_calls_at_once_cannot_hold_more_memory_than_its_limit(tier: Tier) {
    const LIMIT: u64 = 256 * MIB;
    let sandbox = limited_with(
        tier,
        Limits {
            memory_bytes: LIMIT,
            ..Limits::default()
        },
    )
    .await;
    let ws = workspace();
    let run_m = run_id("m");
    // Each call holds 160 MiB (touched), then waits for the other to.
    let hold = python(
        "import os, time\n\
         held = bytearray(160 << 20)\n\
         for i in range(0, len(held), 4096): held[i] = 1\n\
         open(\"held-%d\" % os.getpid(), \"w\").close()\n\
         for _ in range(100):\n\
         \x20   if len([n for n in os.listdir(\".\") if n.startswith(\"held-\")]) > 1: break\n\
         \x20   time.sleep(0.05)\n\
         time.sleep(2)\n\
         print(\"held\", flush=True)",
    );
    let (one, two) = (
        in_run(bash(&ws, &hold), &run_m),
        in_run(bash(&ws, &hold), &run_m),
    );
    let (a, b) = tokio::join!(run(&sandbox, &one), run(&sandbox, &two));
    let held = [&a, &b]
        .iter()
        .filter(|r| r.stdout.contains("held"))
        .count();
    assert!(
        held < 2,
        "two calls of one run held 320 MiB at once past its 256: {} / {}",
        a.stderr,
        b.stderr
    );
    if !chorus_sandbox::testing::running_as_root() {
        // No cgroup: the launcher's count stopped it.
        let stopped = if a.stdout.contains("held") { &b } else { &a };
        assert_eq!(
            stopped.status.code(),
            Some(chorus_sandbox::policy::EXIT_OVER_MEMORY),
            "{}",
            stopped.stderr
        );
        assert!(
            stopped.stderr.contains("over the run's limit of 256 MiB"),
            "{}",
            stopped.stderr
        );
    }
}

/// The same tests, by a service that is not root: no cgroup, the sandbox
/// runs as the service's own user.
#[test]
fn the_limits_hold_for_a_service_that_is_not_root() {
    support::again_as_nobody("the_limits_hold_for");
}
