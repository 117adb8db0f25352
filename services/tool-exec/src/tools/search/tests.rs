use chorus_catalog::outputs::{ContextLine, FileSearch};

use super::*;
use crate::config::Limits;
use crate::context::ToolOutcome;
use crate::tools::test_support::{Workspace, write_file};

fn search_args(pattern: &str) -> args::FileSearch {
    args::FileSearch {
        pattern: pattern.to_owned(),
        path: ".".to_owned(),
        glob: None,
        case_sensitive: None,
        context_lines: None,
        max_results: None,
        fixed_strings: false,
        include_ignored: false,
    }
}

async fn search_outcome(ws: &Workspace, args: args::FileSearch) -> (FileSearch, ToolOutcome) {
    let outcome = run(&ws.ctx, args).await.expect("file.search succeeds");
    let output = serde_json::from_value(outcome.output.clone()).expect("a FileSearch");
    (output, outcome)
}

async fn search(ws: &Workspace, args: args::FileSearch) -> FileSearch {
    search_outcome(ws, args).await.0
}

/// `path:line` of every match.
fn hits(found: &FileSearch) -> Vec<String> {
    found
        .matches
        .iter()
        .map(|m| format!("{}:{}", m.path, m.line))
        .collect()
}

fn context(lines: &[(u64, &str)]) -> Vec<ContextLine> {
    lines
        .iter()
        .map(|(line, content)| ContextLine {
            line: *line,
            content: (*content).to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn finds_regex_matches_with_relative_paths_and_line_numbers() {
    let ws = Workspace::new();
    ws.write(
        "src/a.rs",
        "fn main() {}\nfn parse_args() {}\nfn render_page() {}\n",
    );
    ws.write(
        "src/b/c.rs",
        "// fn parse_later\nfn parse_input(x: u8) {}\n",
    );
    ws.write("README.md", "no functions here\n");

    let found = search(&ws, search_args(r"fn (parse|render)_[a-z]+\(")).await;

    assert_eq!(hits(&found), ["src/a.rs:2", "src/a.rs:3", "src/b/c.rs:2"]);
    assert_eq!(found.matches[0].content, "fn parse_args() {}");
    assert!(!found.truncated);
    assert!(
        found
            .matches
            .iter()
            .all(|m| m.before.is_empty() && m.after.is_empty())
    );
}

#[tokio::test]
async fn an_absolute_search_path_still_gives_workspace_relative_paths() {
    let ws = Workspace::new();
    ws.write("src/a.rs", "needle\n");
    let root = ws.root();
    let sub = root.join("src");
    for path in [root.to_str().expect("utf-8"), sub.to_str().expect("utf-8")] {
        let found = search(
            &ws,
            args::FileSearch {
                path: path.to_owned(),
                ..search_args("needle")
            },
        )
        .await;
        assert_eq!(hits(&found), ["src/a.rs:1"], "{path}");
    }
}

#[tokio::test]
async fn fixed_strings_match_literally() {
    let ws = Workspace::new();
    ws.write("a.txt", "call a.b(c) here\naxbc\nabc\n");

    let literal = search(
        &ws,
        args::FileSearch {
            fixed_strings: true,
            ..search_args("a.b(c)")
        },
    )
    .await;
    assert_eq!(hits(&literal), ["a.txt:1"]);

    // As a regex the same text means something else.
    let regex = search(&ws, search_args("a.b(c)")).await;
    assert_eq!(hits(&regex), ["a.txt:2"]);
}

#[tokio::test]
async fn case_sensitivity_is_on_by_default_and_can_be_turned_off() {
    let ws = Workspace::new();
    ws.write("a.txt", "TODO: one\ntodo: two\nToDo three\n");

    let exact = search(&ws, search_args("todo")).await;
    assert_eq!(hits(&exact), ["a.txt:2"]);

    let any_case = search(
        &ws,
        args::FileSearch {
            case_sensitive: Some(false),
            ..search_args("todo")
        },
    )
    .await;
    assert_eq!(hits(&any_case), ["a.txt:1", "a.txt:2", "a.txt:3"]);
}

#[tokio::test]
async fn context_lines_belong_to_their_match() {
    let ws = Workspace::new();
    let text: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    let text = text
        .replace("line 5\n", "MATCH 5\n")
        .replace("line 7\n", "MATCH 7\n");
    ws.write("a.txt", text);

    let found = search(
        &ws,
        args::FileSearch {
            context_lines: Some(2),
            ..search_args("MATCH")
        },
    )
    .await;

    assert_eq!(hits(&found), ["a.txt:5", "a.txt:7"]);
    let (first, second) = (&found.matches[0], &found.matches[1]);
    assert_eq!(first.before, context(&[(3, "line 3"), (4, "line 4")]));
    // Line 6 is shown once, after the match it follows.
    assert_eq!(first.after, context(&[(6, "line 6")]));
    assert_eq!(second.before, []);
    assert_eq!(second.after, context(&[(8, "line 8"), (9, "line 9")]));
}

#[tokio::test]
async fn max_results_counts_matches_across_all_files() {
    let ws = Workspace::new();
    for name in ["a", "b", "c"] {
        ws.write(format!("{name}.txt"), "hit\nmiss\nhit\n");
    }

    let capped = search(
        &ws,
        args::FileSearch {
            max_results: Some(4),
            ..search_args("hit")
        },
    )
    .await;
    assert_eq!(capped.matches.len(), 4);
    assert!(capped.truncated);
    assert!(hits(&capped).is_sorted(), "{:?}", hits(&capped));

    let exact = search(
        &ws,
        args::FileSearch {
            max_results: Some(6),
            ..search_args("hit")
        },
    )
    .await;
    assert_eq!(
        hits(&exact),
        [
            "a.txt:1", "a.txt:3", "b.txt:1", "b.txt:3", "c.txt:1", "c.txt:3"
        ]
    );
    assert!(
        !exact.truncated,
        "exactly max_results matches is not truncated"
    );
}

#[tokio::test]
async fn the_default_is_100_matches_and_the_limit_caps_larger_requests() {
    let ws = Workspace::with_limits(Limits {
        max_search_results: 150,
        ..Limits::default()
    });
    ws.write("many.txt", "x\n".repeat(500));

    let default = search(&ws, search_args("x")).await;
    assert_eq!(default.matches.len(), 100);
    assert!(default.truncated);

    let capped = search(
        &ws,
        args::FileSearch {
            max_results: Some(10_000),
            ..search_args("x")
        },
    )
    .await;
    assert_eq!(capped.matches.len(), 150);
    assert!(capped.truncated);

    let err = run(
        &ws.ctx,
        args::FileSearch {
            max_results: Some(0),
            ..search_args("x")
        },
    )
    .await
    .expect_err("zero results");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
}

#[tokio::test]
async fn the_search_stops_early_once_enough_matches_are_found() {
    let ws = Workspace::new();
    for i in 0..300 {
        ws.write(format!("d{}/f{i}.txt", i % 7), "needle\n");
    }

    let (found, outcome) = search_outcome(
        &ws,
        args::FileSearch {
            max_results: Some(2),
            ..search_args("needle")
        },
    )
    .await;

    assert_eq!(found.matches.len(), 2);
    assert!(found.truncated);
    let searched = outcome.metadata["files_searched"]
        .as_u64()
        .expect("a count");
    assert!(searched < 100, "searched {searched} of 300 files");
}

#[tokio::test]
async fn the_output_stays_within_the_output_limit() {
    let ws = Workspace::with_limits(Limits {
        max_output_bytes: 4096,
        ..Limits::default()
    });
    let line = format!("needle {}\n", "x".repeat(200));
    ws.write("a.txt", line.repeat(100));

    let found = search(
        &ws,
        args::FileSearch {
            max_results: Some(100),
            ..search_args("needle")
        },
    )
    .await;
    assert!(found.truncated);
    assert!(!found.matches.is_empty());
    let size = serde_json::to_vec(&found).expect("json").len();
    assert!(size <= 4096, "{size} bytes");
}

#[tokio::test]
async fn very_long_lines_are_cut() {
    let ws = Workspace::new();
    ws.write("min.js", format!("needle{}\n", "é".repeat(5000)));

    let found = search(&ws, search_args("needle")).await;
    let content = &found.matches[0].content;
    assert!(
        content.len() <= MAX_LINE_BYTES + '…'.len_utf8(),
        "{}",
        content.len()
    );
    assert!(content.starts_with("needle") && content.ends_with('…'));
}

#[tokio::test]
async fn line_terminators_are_stripped_and_bad_utf8_shown_lossily() {
    let ws = Workspace::new();
    ws.write("crlf.txt", b"first needle\r\nsecond\r\n");
    ws.write("latin1.txt", b"caf\xe9 needle\n");

    let found = search(&ws, search_args("needle")).await;
    let contents: Vec<_> = found.matches.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["first needle", "caf\u{fffd} needle"]);
}

#[tokio::test]
async fn a_glob_filters_by_file_name_or_by_path() {
    let ws = Workspace::new();
    ws.write("README.md", "needle\n");
    ws.write("docs/guide.md", "needle\n");
    ws.write("docs/deep/more.md", "needle\n");
    ws.write("src/lib.rs", "needle\n");

    let by_name = search(
        &ws,
        args::FileSearch {
            glob: Some("*.md".to_owned()),
            ..search_args("needle")
        },
    )
    .await;
    assert_eq!(
        hits(&by_name),
        ["README.md:1", "docs/deep/more.md:1", "docs/guide.md:1"]
    );

    let by_path = search(
        &ws,
        args::FileSearch {
            glob: Some("docs/*.md".to_owned()),
            ..search_args("needle")
        },
    )
    .await;
    assert_eq!(hits(&by_path), ["docs/guide.md:1"]);

    let below_docs = search(
        &ws,
        args::FileSearch {
            path: "docs".to_owned(),
            glob: Some("deep/**".to_owned()),
            ..search_args("needle")
        },
    )
    .await;
    assert_eq!(hits(&below_docs), ["docs/deep/more.md:1"]);

    let err = run(
        &ws.ctx,
        args::FileSearch {
            glob: Some("{unclosed".to_owned()),
            ..search_args("needle")
        },
    )
    .await
    .expect_err("bad glob");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
}

#[tokio::test]
async fn ignored_files_are_skipped_unless_asked_for_and_git_never_searched() {
    let ws = Workspace::new();
    ws.write(".gitignore", "target/\n*.log\n");
    ws.write("src/main.rs", "needle\n");
    ws.write("src/run.log", "needle\n");
    ws.write("target/gen.rs", "needle\n");
    ws.write(".hidden/config", "needle\n");
    ws.write(".git/COMMIT_EDITMSG", "needle\n");

    let found = search(&ws, search_args("needle")).await;
    assert_eq!(hits(&found), [".hidden/config:1", "src/main.rs:1"]);

    let all = search(
        &ws,
        args::FileSearch {
            include_ignored: true,
            ..search_args("needle")
        },
    )
    .await;
    assert_eq!(
        hits(&all),
        [
            ".hidden/config:1",
            "src/main.rs:1",
            "src/run.log:1",
            "target/gen.rs:1"
        ]
    );
}

#[tokio::test]
async fn binary_files_are_skipped() {
    let ws = Workspace::new();
    ws.write("text.txt", "needle\n");
    ws.write("blob.bin", b"needle\x00\x01\x02 needle\n");

    let (found, outcome) = search_outcome(&ws, search_args("needle")).await;
    assert_eq!(hits(&found), ["text.txt:1"]);
    assert_eq!(outcome.metadata["binary_files_skipped"], 1);
}

#[tokio::test]
async fn files_over_the_size_limit_are_skipped() {
    let ws = Workspace::with_limits(Limits {
        max_file_bytes: 100,
        ..Limits::default()
    });
    ws.write("small.txt", "needle\n");
    ws.write("big.txt", format!("needle\n{}", "x".repeat(200)));

    let (found, outcome) = search_outcome(&ws, search_args("needle")).await;
    assert_eq!(hits(&found), ["small.txt:1"]);
    assert_eq!(outcome.metadata["large_files_skipped"], 1);
}

#[tokio::test]
async fn a_pattern_starting_with_a_dash_is_a_pattern() {
    let ws = Workspace::new();
    ws.write("a.txt", "x = -foo\n--help me\nplain\n");

    let found = search(&ws, search_args("-foo")).await;
    assert_eq!(hits(&found), ["a.txt:1"]);
    let found = search(&ws, search_args("--help")).await;
    assert_eq!(hits(&found), ["a.txt:2"]);
    let found = search(
        &ws,
        args::FileSearch {
            fixed_strings: true,
            ..search_args("-")
        },
    )
    .await;
    assert_eq!(hits(&found), ["a.txt:1", "a.txt:2"]);
}

#[tokio::test]
async fn paths_with_colons_come_out_whole() {
    let ws = Workspace::new();
    ws.write("c:d/e:12:f.txt", "a: needle: 3\n");

    let found = search(&ws, search_args("needle")).await;
    assert_eq!(found.matches.len(), 1);
    assert_eq!(found.matches[0].path, "c:d/e:12:f.txt");
    assert_eq!(found.matches[0].line, 1);
    assert_eq!(found.matches[0].content, "a: needle: 3");
}

#[tokio::test]
async fn a_single_file_can_be_searched_even_when_ignored() {
    let ws = Workspace::new();
    ws.write(".gitignore", "*.log\n");
    ws.write("run.log", "one needle\ntwo\nneedle three\n");
    ws.write("other.txt", "needle\n");

    let found = search(
        &ws,
        args::FileSearch {
            path: "run.log".to_owned(),
            ..search_args("needle")
        },
    )
    .await;
    assert_eq!(hits(&found), ["run.log:1", "run.log:3"]);
}

#[tokio::test]
async fn an_invalid_regex_is_an_invalid_argument_naming_the_problem() {
    let ws = Workspace::new();
    for pattern in ["fn (unclosed", "a{2,1}", "line\nbreak"] {
        let err = run(&ws.ctx, search_args(pattern)).await.expect_err(pattern);
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
        assert!(err.to_string().contains("invalid regex"), "{err}");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}

#[tokio::test]
async fn symlinks_to_outside_files_or_directories_are_not_searched() {
    let ws = Workspace::new();
    write_file(&ws.outside().join("secret.txt"), "needle outside\n");
    ws.symlink(ws.outside().join("secret.txt"), "leak.txt");
    ws.symlink(ws.outside(), "leak-dir");
    ws.write("inside.txt", "needle inside\n");

    for include_ignored in [false, true] {
        let found = search(
            &ws,
            args::FileSearch {
                include_ignored,
                ..search_args("needle")
            },
        )
        .await;
        assert_eq!(hits(&found), ["inside.txt:1"]);
    }
    for path in ["leak.txt", "leak-dir", "leak-dir/secret.txt", "../outside"] {
        let err = run(
            &ws.ctx,
            args::FileSearch {
                path: path.to_owned(),
                ..search_args("needle")
            },
        )
        .await
        .expect_err(path);
        assert!(
            matches!(err, ToolError::OutsideWorkspace { .. }),
            "{path}: {err}"
        );
    }
}

#[tokio::test]
async fn symlinks_inside_the_workspace_are_not_followed_by_the_walk() {
    let ws = Workspace::new();
    ws.write("real.txt", "needle\n");
    ws.symlink("real.txt", "alias.txt");

    let found = search(&ws, search_args("needle")).await;
    assert_eq!(
        hits(&found),
        ["real.txt:1"],
        "each file once, by its own name"
    );
}

#[tokio::test]
async fn a_walked_path_through_an_outside_symlink_is_refused_by_the_sandbox() {
    // What the walk relies on when a directory is swapped for a symlink mid-walk:
    // the walker may name "dir/secret.txt", but the sandbox will not open it.
    let ws = Workspace::new();
    write_file(&ws.outside().join("secret.txt"), "needle\n");
    ws.symlink(ws.outside(), "dir");
    let query = Query::new(&search_args("needle"), &ws.ctx.limits).expect("query");
    let shared = Shared::new(&query);

    let path = ws.ctx.sandbox.resolve("dir/secret.txt").expect("resolves");
    Worker::new(&ws.ctx.sandbox, &query, &shared, &ws.ctx.stop).search_walked(path);

    assert_eq!(shared.stats().files_searched, 0);
    assert!(shared.into_found().0.is_empty());
}

#[tokio::test]
async fn searching_a_missing_path_is_not_found() {
    let ws = Workspace::new();
    let err = run(
        &ws.ctx,
        args::FileSearch {
            path: "nope".to_owned(),
            ..search_args("x")
        },
    )
    .await
    .expect_err("missing");
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn the_runner_serves_search_and_list_with_default_arguments() {
    let ws = Workspace::new();
    ws.write("src/lib.rs", "pub fn needle() {}\n");
    let runner = crate::ToolRunner::new(
        ws.ctx.limits,
        ws.ctx.processes.clone(),
        tokio_util::sync::CancellationToken::new(),
    );
    let grant = (*ws.ctx.grant).clone();

    let searched = runner
        .execute(
            grant.clone(),
            "file.search",
            serde_json::json!({"pattern": "needle"}),
        )
        .await
        .expect("search runs");
    assert_eq!(
        searched.output,
        serde_json::json!({
            "matches": [{"path": "src/lib.rs", "line": 1, "content": "pub fn needle() {}"}],
            "truncated": false
        })
    );
    assert_eq!(searched.metadata["files_searched"], 1);

    let listed = runner
        .execute(grant, "file.list", serde_json::json!({}))
        .await
        .expect("list runs");
    assert_eq!(listed.output["path"], ".");
    assert_eq!(listed.output["entries"][0]["path"], "src");
    assert_eq!(listed.output["entries"][0]["kind"], "directory");
}

#[tokio::test]
async fn a_symlink_named_as_the_search_path_is_followed_inside_the_workspace() {
    let ws = Workspace::new();
    ws.write("src/a.rs", "needle\n");
    ws.symlink("src", "alias");

    let found = search(
        &ws,
        args::FileSearch {
            path: "alias".to_owned(),
            ..search_args("needle")
        },
    )
    .await;
    assert_eq!(
        hits(&found),
        ["alias/a.rs:1"],
        "paths as the caller named them"
    );
}

#[tokio::test]
async fn fifos_neither_block_nor_get_searched() {
    let ws = Workspace::new();
    ws.write("a.txt", "needle\n");
    let made = std::process::Command::new("mkfifo")
        .arg(ws.root().join("pipe"))
        .status()
        .expect("run mkfifo");
    assert!(made.success());

    let found = search(&ws, search_args("needle")).await;
    assert_eq!(hits(&found), ["a.txt:1"]);

    let err = run(
        &ws.ctx,
        args::FileSearch {
            path: "pipe".to_owned(),
            ..search_args("needle")
        },
    )
    .await
    .expect_err("a fifo is not a file");
    assert!(matches!(err, ToolError::NotAFile { .. }), "{err}");
}
