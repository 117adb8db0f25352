use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use chorus_catalog::outputs::{EntryKind, FileList};

use super::*;
use crate::config::Limits;
use crate::tools::test_support::{Workspace, write_file};

fn list_args(path: &str) -> args::FileList {
    args::FileList {
        path: path.to_owned(),
        pattern: None,
        recursive: false,
        include_ignored: false,
    }
}

fn recursive(path: &str) -> args::FileList {
    args::FileList {
        recursive: true,
        ..list_args(path)
    }
}

fn matching(path: &str, pattern: &str) -> args::FileList {
    args::FileList {
        pattern: Some(pattern.to_owned()),
        ..list_args(path)
    }
}

async fn list(ws: &Workspace, args: args::FileList) -> FileList {
    let outcome = run(&ws.ctx, args).await.expect("file.list succeeds");
    serde_json::from_value(outcome.output).expect("output is a FileList")
}

fn paths(listing: &FileList) -> Vec<&str> {
    listing.entries.iter().map(|e| e.path.as_str()).collect()
}

fn now_ms() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(now.as_millis()).expect("fits")
}

#[tokio::test]
async fn lists_direct_entries_with_kinds_sizes_and_times() {
    let ws = Workspace::new();
    ws.write("a.txt", "hello");
    ws.write("src/main.rs", "fn main() {}\n");
    ws.symlink("a.txt", "link");
    ws.write(".env", "X=1\n");
    ws.write(".git/HEAD", "ref: refs/heads/main\n");

    let listing = list(&ws, list_args(".")).await;

    assert_eq!(listing.path, ".");
    assert!(!listing.truncated);
    assert_eq!(paths(&listing), [".env", "a.txt", "link", "src"]);
    let kinds: Vec<_> = listing.entries.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::File,
            EntryKind::File,
            EntryKind::Symlink,
            EntryKind::Directory
        ]
    );
    let file = &listing.entries[1];
    assert_eq!(file.size, 5);
    // The link's own size: the length of its target's name.
    assert_eq!(listing.entries[2].size, "a.txt".len() as u64);
    for entry in &listing.entries {
        let age_ms = now_ms() - entry.modified_ms;
        assert!(
            (-60_000..3_600_000).contains(&age_ms),
            "{} has a real modification time, got {}",
            entry.path,
            entry.modified_ms
        );
    }
}

#[tokio::test]
async fn entries_of_a_subdirectory_carry_workspace_relative_paths() {
    let ws = Workspace::new();
    ws.write("src/lib.rs", "");
    ws.write("src/bin/tool.rs", "");
    let abs = ws.root().join("src");

    for path in ["src", "./src/", abs.to_str().expect("utf-8 temp path")] {
        let listing = list(&ws, list_args(path)).await;
        assert_eq!(listing.path, "src");
        assert_eq!(paths(&listing), ["src/bin", "src/lib.rs"], "{path}");
    }
}

#[tokio::test]
async fn recursive_lists_everything_below_in_path_order() {
    let ws = Workspace::new();
    ws.write("z.txt", "");
    ws.write("a.txt", "");
    ws.write("a/b.txt", "");
    ws.write("a/c/d.rs", "");
    ws.write(".github/ci.yml", "");

    let listing = list(&ws, recursive(".")).await;

    // Component by component: a directory's contents come right after it.
    assert_eq!(
        paths(&listing),
        [
            ".github",
            ".github/ci.yml",
            "a",
            "a/b.txt",
            "a/c",
            "a/c/d.rs",
            "a.txt",
            "z.txt"
        ]
    );
    assert_eq!(listing.entries[2].kind, EntryKind::Directory);
    assert_eq!(listing.entries[5].kind, EntryKind::File);
}

#[tokio::test]
async fn a_pattern_without_slash_matches_file_names_at_any_depth() {
    let ws = Workspace::new();
    ws.write("main.rs", "");
    ws.write("src/lib.rs", "");
    ws.write("src/deep/er/mod.rs", "");
    ws.write("src/notes.md", "");
    ws.mkdir("dir.rs");

    let listing = list(&ws, matching(".", "*.rs")).await;
    assert_eq!(
        paths(&listing),
        ["main.rs", "src/deep/er/mod.rs", "src/lib.rs"],
        "files only: the directory dir.rs is not listed"
    );

    let below_src = list(&ws, matching("src", "*.rs")).await;
    assert_eq!(paths(&below_src), ["src/deep/er/mod.rs", "src/lib.rs"]);
}

#[tokio::test]
async fn a_pattern_with_slash_matches_the_path_below_the_listed_directory() {
    let ws = Workspace::new();
    ws.write("src/lib.rs", "");
    ws.write("src/deep/mod.rs", "");
    ws.write("other/src/x.rs", "");

    let shallow = list(&ws, matching(".", "src/*.rs")).await;
    assert_eq!(paths(&shallow), ["src/lib.rs"], "* stays in one component");

    let deep = list(&ws, matching(".", "src/**/*.rs")).await;
    assert_eq!(paths(&deep), ["src/deep/mod.rs", "src/lib.rs"]);

    let relative_to_listed = list(&ws, matching("other", "src/*.rs")).await;
    assert_eq!(paths(&relative_to_listed), ["other/src/x.rs"]);
}

#[tokio::test]
async fn an_invalid_glob_is_an_invalid_argument() {
    let ws = Workspace::new();
    let err = run(&ws.ctx, matching(".", "src/[abc"))
        .await
        .expect_err("bad glob");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert!(err.to_string().contains("src/[abc"), "{err}");
}

#[tokio::test]
async fn gitignore_rules_apply_without_a_repository_and_include_ignored_lifts_them() {
    let ws = Workspace::new();
    ws.write(".gitignore", "target/\n*.log\n");
    ws.write("src/main.rs", "");
    ws.write("src/debug.log", "");
    ws.write("target/out.bin", "");

    let listing = list(&ws, recursive(".")).await;
    assert_eq!(paths(&listing), [".gitignore", "src", "src/main.rs"]);

    let all = list(
        &ws,
        args::FileList {
            include_ignored: true,
            ..recursive(".")
        },
    )
    .await;
    assert_eq!(
        paths(&all),
        [
            ".gitignore",
            "src",
            "src/debug.log",
            "src/main.rs",
            "target",
            "target/out.bin"
        ]
    );
}

#[tokio::test]
async fn rules_of_parent_directories_inside_the_workspace_apply_to_a_subdirectory() {
    let ws = Workspace::new();
    ws.write(".gitignore", "*.log\nbuild/\n");
    ws.write("pkg/a.rs", "");
    ws.write("pkg/a.log", "");
    ws.write("pkg/build/gen.rs", "");

    let listing = list(&ws, recursive("pkg")).await;
    assert_eq!(paths(&listing), ["pkg/a.rs"]);
}

#[tokio::test]
async fn ignore_files_above_the_workspace_root_do_not_hide_its_files() {
    let ws = Workspace::new();
    // A home directory kept in git often ignores everything.
    write_file(&ws.root().join("../.gitignore"), "*\n");
    ws.write("notes.md", "");

    let listing = list(&ws, recursive(".")).await;
    assert_eq!(paths(&listing), ["notes.md"]);
}

#[tokio::test]
async fn a_subdirectory_whitelist_beats_a_parent_rule_in_any_listing() {
    let ws = Workspace::new();
    ws.write(".gitignore", "*.log\n");
    ws.write("sub/.gitignore", "!keep.log\n");
    ws.write("sub/keep.log", "");
    ws.write("sub/drop.log", "");

    let from_root = list(&ws, matching(".", "*.log")).await;
    assert_eq!(paths(&from_root), ["sub/keep.log"]);
    let from_sub = list(&ws, matching("sub", "*.log")).await;
    assert_eq!(paths(&from_sub), ["sub/keep.log"]);
}

#[tokio::test]
async fn dot_ignore_beats_gitignore_and_git_info_exclude_applies() {
    let ws = Workspace::new();
    ws.write(".gitignore", "*.tmp\n");
    ws.write(".ignore", "!important.tmp\n");
    ws.write(".git/info/exclude", "local.env\n");
    ws.write("important.tmp", "");
    ws.write("scratch.tmp", "");
    ws.write("local.env", "");

    let listing = list(&ws, matching(".", "*.*")).await;
    assert_eq!(paths(&listing), [".gitignore", ".ignore", "important.tmp"]);
}

#[tokio::test]
async fn ignore_files_are_read_through_the_sandbox_only() {
    let ws = Workspace::new();
    // Rules linked from outside would hint at the outside file's lines: not read.
    write_file(&ws.outside().join("rules"), "guess-1\n");
    ws.symlink(ws.outside().join("rules"), ".gitignore");
    ws.write("guess-1", "");
    // A FIFO where an ignore file should be must not hang the walk.
    let made = std::process::Command::new("mkfifo")
        .arg(ws.root().join(".ignore"))
        .status()
        .expect("run mkfifo");
    assert!(made.success());

    let listing = list(&ws, matching(".", "guess-*")).await;
    assert_eq!(paths(&listing), ["guess-1"]);
}

#[tokio::test]
async fn the_git_directory_is_never_listed() {
    let ws = Workspace::new();
    ws.write(".git/config", "");
    ws.write("sub/.git", "gitdir: ../.git/modules/sub\n");
    ws.write("sub/x.rs", "");

    for args in [
        recursive("."),
        args::FileList {
            include_ignored: true,
            ..recursive(".")
        },
        matching(".", "*"),
    ] {
        let listing = list(&ws, args).await;
        assert!(
            paths(&listing).iter().all(|p| !p.contains(".git")),
            "{:?}",
            paths(&listing)
        );
        assert!(paths(&listing).contains(&"sub/x.rs"));
    }
}

#[tokio::test]
async fn symlinks_are_reported_but_never_followed() {
    let ws = Workspace::new();
    write_file(&ws.outside().join("secret/key.pem"), "PRIVATE");
    ws.symlink(ws.outside().join("secret"), "out-dir");
    ws.symlink(ws.outside().join("secret/key.pem"), "out-file");
    ws.write("in.txt", "x");

    for args in [list_args("."), recursive("."), matching(".", "*")] {
        let listing = list(&ws, args.clone()).await;
        for entry in &listing.entries {
            assert!(!entry.path.contains("key.pem"), "{args:?}: {}", entry.path);
            if entry.path.starts_with("out-") {
                assert_eq!(entry.kind, EntryKind::Symlink);
                // The link's own size, not the 7-byte file it points to.
                let target_len = std::fs::read_link(ws.root().join(&entry.path))
                    .expect("link")
                    .as_os_str()
                    .len();
                assert_eq!(entry.size, target_len as u64);
            }
        }
    }
    let with_pattern = list(&ws, matching(".", "*")).await;
    assert_eq!(
        paths(&with_pattern),
        ["in.txt"],
        "a pattern keeps files only"
    );
}

#[tokio::test]
async fn listing_outside_the_workspace_is_permission_denied() {
    let ws = Workspace::new();
    ws.symlink(ws.outside(), "escape");
    let outside = ws.outside();
    for path in [
        "..",
        "../outside",
        "escape",
        "escape/",
        outside.to_str().expect("utf-8"),
    ] {
        for args in [list_args(path), recursive(path)] {
            let err = run(&ws.ctx, args).await.expect_err(path);
            assert!(
                matches!(err, ToolError::OutsideWorkspace { .. }),
                "{path}: {err}"
            );
            assert_eq!(err.code(), tonic::Code::PermissionDenied);
        }
    }
}

#[tokio::test]
async fn listing_a_file_or_a_missing_path_fails_clearly() {
    let ws = Workspace::new();
    ws.write("a.txt", "");
    let err = run(&ws.ctx, list_args("a.txt")).await.expect_err("a file");
    assert!(matches!(err, ToolError::NotADirectory { .. }), "{err}");
    let err = run(&ws.ctx, recursive("missing"))
        .await
        .expect_err("missing");
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn listings_stop_at_the_entry_limit_keeping_the_first_entries() {
    let ws = Workspace::with_limits(Limits {
        max_list_entries: 3,
        ..Limits::default()
    });
    for name in ["e", "d", "c", "b", "a"] {
        ws.write(format!("{name}.txt"), "");
    }
    ws.write("b/inner.txt", "");

    let direct = list(&ws, list_args(".")).await;
    assert!(direct.truncated);
    assert_eq!(paths(&direct), ["a.txt", "b", "b.txt"]);

    let walked = list(&ws, recursive(".")).await;
    assert!(walked.truncated);
    assert_eq!(paths(&walked), ["a.txt", "b", "b/inner.txt"]);

    let exact = list(&ws, matching("b", "*")).await;
    assert!(!exact.truncated);
}

#[tokio::test]
async fn non_utf8_names_are_shown_lossily() {
    let ws = Workspace::new();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    ws.write(name, "");

    for args in [list_args("."), recursive(".")] {
        let listing = list(&ws, args).await;
        assert_eq!(paths(&listing), ["caf\u{fffd}.txt"]);
    }
}

#[tokio::test]
async fn a_directory_swapped_for_an_outside_symlink_mid_walk_leaks_nothing() {
    let ws = Workspace::new();
    ws.write("a/inner.txt", "");
    ws.write("b.txt", "");
    write_file(&ws.outside().join("secret.txt"), "");
    let sandbox = Arc::clone(&ws.ctx.sandbox);
    let root = ws.root();
    let outside = ws.outside();

    let walk = Walk::new(&sandbox, &WorkspacePath::root(), false);
    let mut builder = walk.builder();
    builder.sort_by_file_name(|a, b| a.cmp(b));
    let mut seen = Vec::new();
    // Once the walker has read the root (and taken "a" for a directory), and
    // before it reads "a", "a" becomes a symlink to a directory outside the root.
    let walked = builder.build().inspect(|result| {
        if let Ok(entry) = result {
            seen.push(entry.path().to_path_buf());
            if entry.depth() == 0 {
                std::fs::rename(root.join("a"), root.join("a-moved")).expect("move a");
                std::os::unix::fs::symlink(&outside, root.join("a")).expect("swap a");
            }
        }
    });
    let listing =
        collect_walked(&sandbox, &walk, walked, None, 100, &CallStop::idle()).expect("listing");

    assert!(
        seen.iter().any(|p| p.ends_with("a/secret.txt")),
        "the walker itself followed the swapped directory: {seen:?}"
    );
    let shown: Vec<_> = listing.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(shown, ["a", "b.txt"], "no outside name is reported");
}
