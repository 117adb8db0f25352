//! What a task's own worktree costs, beside its baselines in one run:
//!
//! 1. Making a task's worktree of a repository of 100,000 files, as the
//!    service makes it (Repository::add_worktree: git in the run sandbox,
//!    as the workspace's owner, with the allowed configuration), beside
//!    plain `git worktree add` and `cp -r` of the same files. The disk a
//!    task's worktree takes, and the repository's objects before and after
//!    (no copy of them).
//! 2. Landing a task's branch (one file changed): a fast-forward, a merge
//!    commit and a squash, beside plain `git merge --ff-only`.
//! 3. The tool call path in a worktree and at a workspace's root, the same
//!    calls interleaved: file.read, and git.status (which in a worktree
//!    reads its own git directory and the repository's).
//!
//! `cargo build --release -p chorus-sandbox && cargo bench -p chorus-tests --bench worktrees`
//! (CHORUS_BENCH_FILES: files
//! of the repository, default 100000; CHORUS_BENCH_MAKES: worktrees made
//! per way, default 3; CHORUS_BENCH_CALLS: tool calls per place, default
//! 300).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chorus_run_token::RunGrant;
use chorus_sandbox::testing::{built_launcher, give_to_test_user};
use chorus_sandbox::{Sandbox, SandboxConfig};
use chorus_tests::git::git;
use chorus_tests::stats::{Samples, env_number, ms};
use chorus_tool_exec::worktree::{LandMode, Repository};
use chorus_tool_exec::{Limits, ToolRunner};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Bytes a directory's files and directories take on disk (blocks).
fn disk(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut pending = vec![path.to_path_buf()];
    while let Some(p) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total += meta.blocks() * 512;
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&p)
        {
            pending.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

fn mib(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let m = bytes as f64 / (1024.0 * 1024.0);
    format!("{m:.1}")
}

/// A repository of `files` small files in 100-file directories, committed
/// and packed, owned by the test user.
fn repository(root: &Path, files: usize) {
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["config", "user.name", "Bench"]);
    git(root, &["config", "user.email", "bench@example.com"]);
    // No gc in the background while the repository is measured.
    git(root, &["config", "gc.auto", "0"]);
    for i in 0..files {
        let dir = root.join(format!("src/d{:05}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).expect("dir");
        }
        std::fs::write(
            dir.join(format!("f{:03}.txt", i % 100)),
            format!("file {i}\n"),
        )
        .expect("file");
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "many files"]);
    git(root, &["gc", "-q"]);
    give_to_test_user(root);
}

fn table(title: &str, rows: &[(&str, &Samples)]) {
    println!("## {title}\n");
    println!("| way | runs | p50 ms | min ms | max ms |");
    println!("|---|---|---|---|---|");
    for (name, s) in rows {
        println!(
            "| {name} | {} | {} | {} | {} |",
            s.len(),
            ms(s.median()),
            ms(s.percentile(0.0)),
            ms(s.percentile(100.0))
        );
    }
    println!();
}

fn timed(work: impl FnOnce()) -> Duration {
    let started = Instant::now();
    work();
    started.elapsed()
}

async fn making(repo: &Repository, root: &Path, scratch: &Path, makes: usize) {
    let objects_before = disk(&root.join(".git/objects"));
    let (mut chorus, mut plain, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    let mut per_task = 0;
    for i in 0..makes {
        // Chorus's way.
        let name = format!("bench-{i}");
        let started = Instant::now();
        let made = repo
            .add_worktree(
                &name,
                &format!("chorus/{name}"),
                "main",
                true,
                "refs/heads/main",
            )
            .await
            .expect("worktree");
        chorus.push(started.elapsed());
        per_task = disk(&made.path) + disk(&root.join(".git/worktrees").join(&name));
        repo.remove_worktree(&name, None).await.expect("removed");
        repo.delete_branch(&format!("chorus/{name}"))
            .await
            .expect("branch");
        // Plain git, the same place.
        let path = root.join(".git/chorus/worktrees/plain");
        plain.push(timed(|| {
            git(
                root,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "-b",
                    "plain",
                    &path.display().to_string(),
                    "main",
                ],
            );
        }));
        std::fs::remove_dir_all(&path).expect("rm");
        git(root, &["worktree", "prune"]);
        git(root, &["branch", "-q", "-D", "plain"]);
        // The files alone.
        let target = scratch.join("copy");
        copy.push(timed(|| {
            let ok = Command::new("cp")
                .args(["-r"])
                .arg(root.join("src"))
                .arg(&target)
                .status()
                .expect("cp");
            assert!(ok.success());
        }));
        std::fs::remove_dir_all(&target).expect("rm");
    }
    let objects_after = disk(&root.join(".git/objects"));
    let (chorus, plain, copy) = (
        Samples::new(chorus),
        Samples::new(plain),
        Samples::new(copy),
    );
    table(
        "Making a task's worktree of a repository of this many files",
        &[
            ("Chorus (Repository::add_worktree, sandboxed)", &chorus),
            ("plain `git worktree add`", &plain),
            ("`cp -r` of the files", &copy),
        ],
    );
    println!(
        "Disk of one task's worktree (files and its git directory): {} MiB; the workspace's files: {} MiB; the repository's objects: {} MiB before, {} MiB after (not copied).\n",
        mib(per_task),
        mib(disk(&root.join("src"))),
        mib(objects_before),
        mib(objects_after)
    );
}

/// A branch `chorus/<name>` of one commit on `main` changing `file`, made
/// with git's plumbing (no checkout of the repository's files).
fn branch_changing(root: &Path, scratch: &Path, name: &str, file: &str) {
    let index = scratch.join(format!("{name}.index"));
    let with_index = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(root)
            .args(["-c", "safe.directory=*"])
            .args(args)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let content = scratch.join(format!("{name}.txt"));
    std::fs::write(&content, format!("changed by {name}\n")).expect("content");
    let blob = git(root, &["hash-object", "-w", &content.display().to_string()]);
    with_index(&["read-tree", "main"]);
    with_index(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("100644,{blob},{file}"),
    ]);
    let tree = with_index(&["write-tree"]);
    let commit = git(
        root,
        &["commit-tree", &tree, "-p", "main", "-m", "a change"],
    );
    git(root, &["branch", &format!("chorus/{name}"), &commit]);
    let _ = std::fs::remove_file(&index);
}

async fn landing(repo: &Repository, root: &Path, scratch: &Path, rounds: usize) {
    let (mut ff, mut merge, mut squash, mut plain) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        for (mode, samples) in [
            (LandMode::FastForward, &mut ff),
            (LandMode::Merge, &mut merge),
            (LandMode::Squash, &mut squash),
        ] {
            let name = format!("land-{i}-{mode:?}").to_lowercase();
            branch_changing(
                root,
                scratch,
                &name,
                &format!("src/d00000/f{:03}.txt", 3 * i + mode as usize),
            );
            if mode != LandMode::FastForward {
                // The base moves first: a merge or squash has work to do.
                let other = format!("{name}-other");
                branch_changing(
                    root,
                    scratch,
                    &other,
                    &format!("src/d00001/f{:03}.txt", 3 * i + mode as usize),
                );
                repo.land(
                    &format!("chorus/{other}"),
                    "main",
                    LandMode::FastForward,
                    "x",
                    ("B", "b@b"),
                )
                .await
                .expect("the base moves");
            }
            give_to_test_user(&root.join(".git"));
            let started = Instant::now();
            repo.land(
                &format!("chorus/{name}"),
                "main",
                mode,
                "land",
                ("B", "b@b"),
            )
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e:?}"));
            samples.push(started.elapsed());
        }
        // Plain git fast-forwarding the checked-out base.
        let name = format!("plain-{i}");
        branch_changing(root, scratch, &name, &format!("src/d00002/f{:03}.txt", i));
        plain.push(timed(|| {
            git(
                root,
                &["merge", "-q", "--ff-only", &format!("chorus/{name}")],
            );
        }));
        give_to_test_user(&root.join(".git"));
        give_to_test_user(&root.join("src/d00002"));
    }
    let rows = [ff, merge, squash, plain].map(Samples::new);
    table(
        "Landing a task's branch (one file changed) into the checked-out base",
        &[
            ("Chorus fast-forward", &rows[0]),
            ("Chorus merge commit (base moved)", &rows[1]),
            ("Chorus squash (base moved)", &rows[2]),
            ("plain `git merge --ff-only`", &rows[3]),
        ],
    );
}

async fn tool_calls(processes: Sandbox, root: &Path, worktree: &Path, calls: usize) {
    let runner = ToolRunner::new(Limits::default(), processes, CancellationToken::new());
    let grant = |root: &Path| RunGrant {
        run_id: "bench-worktrees".into(),
        task_id: "bench".into(),
        agent: "bench".into(),
        tools: vec!["file.read".into(), "git.status".into()],
        root: root.to_path_buf(),
        egress: Vec::new(),
        epoch: 0,
    };
    let call = |place: &Path, tool: &'static str| {
        let (runner, grant) = (runner.clone(), grant(place));
        async move {
            let args = match tool {
                "file.read" => json!({"path": "src/d00000/f050.txt"}),
                _ => json!({}),
            };
            let started = Instant::now();
            runner.execute(grant, tool, args).await.expect(tool);
            started.elapsed()
        }
    };
    for tool in ["file.read", "git.status"] {
        let n = if tool == "git.status" {
            calls / 10
        } else {
            calls
        };
        let (mut at_root, mut in_worktree) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            call(root, tool).await;
            call(worktree, tool).await;
        }
        for _ in 0..n {
            at_root.push(call(root, tool).await);
            in_worktree.push(call(worktree, tool).await);
        }
        let (a, b) = (Samples::new(at_root), Samples::new(in_worktree));
        table(
            &format!("One {tool} call through tool-exec's runner ({n} per place, interleaved)"),
            &[
                ("at the workspace's root", &a),
                ("in a task's worktree", &b),
            ],
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let files = env_number("CHORUS_BENCH_FILES", 100_000);
    let makes = env_number("CHORUS_BENCH_MAKES", 3);
    let calls = env_number("CHORUS_BENCH_CALLS", 300);
    let dir = tempfile::tempdir().expect("dir");
    let root: PathBuf = dir.path().join("repo");
    std::fs::create_dir_all(&root).expect("root");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let built = timed(|| repository(&root, files));
    println!("# Task worktrees\n");
    println!(
        "A repository of {files} files (made and packed in {} s), git {}, the namespace tier.\n",
        built.as_secs(),
        git(&root, &["--version"])
    );
    let processes = Sandbox::start(SandboxConfig {
        launcher: Some(built_launcher()),
        ..SandboxConfig::default()
    })
    .await;
    let repo = Repository::new(
        &root,
        processes.clone(),
        Limits::default(),
        CancellationToken::new(),
    );
    making(&repo, &root, &scratch, makes).await;
    landing(&repo, &root, &scratch, makes).await;
    let kept = repo
        .add_worktree("calls", "chorus/calls", "main", true, "refs/heads/main")
        .await
        .expect("a worktree for the calls");
    tool_calls(processes, &root, &kept.path, calls).await;
}
