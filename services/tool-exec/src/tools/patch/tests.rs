use chorus_catalog::{args, outputs};

use super::*;
use crate::config::Limits;
use crate::stop::CallStop;
use crate::tools::test_support::{Workspace, output};

fn edit(find: &str, replace: &str) -> args::Patch {
    args::Patch {
        find: find.to_owned(),
        replace: replace.to_owned(),
        start_line: None,
    }
}

fn edit_from(line: u64, find: &str, replace: &str) -> args::Patch {
    args::Patch {
        start_line: Some(line),
        ..edit(find, replace)
    }
}

async fn patch(
    ws: &Workspace,
    path: &str,
    patches: Vec<args::Patch>,
) -> Result<outputs::FilePatched, ToolError> {
    let args = args::FilePatch {
        path: path.to_owned(),
        patches,
    };
    run(&ws.ctx, args).await.map(output)
}

/// Runs a patch that must fail, checks nothing was written, and returns
/// (index, total, reason).
async fn failing(
    ws: &Workspace,
    content: &str,
    patches: Vec<args::Patch>,
) -> (usize, usize, String) {
    ws.write("f.txt", content);
    let err = patch(ws, "f.txt", patches).await.expect_err("fails");
    assert_eq!(ws.text("f.txt"), content, "no change was written");
    assert_eq!(ws.names("."), ["f.txt"], "no temporary file left");
    match err {
        ToolError::PatchFailed {
            index,
            total,
            reason,
        } => (index, total, reason),
        other => panic!("expected PatchFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn applies_a_literal_replacement() {
    let ws = Workspace::new();
    ws.write("src/lib.rs", "fn main() {\n    println!(\"hi (x)\");\n}\n");
    let out = patch(&ws, "src/lib.rs", vec![edit("hi (x)", "hello [y]")])
        .await
        .expect("patches");
    let expected = "fn main() {\n    println!(\"hello [y]\");\n}\n";
    assert_eq!(ws.text("src/lib.rs"), expected);
    assert_eq!(
        out,
        outputs::FilePatched {
            path: "src/lib.rs".to_owned(),
            patches_applied: 1,
            bytes_written: expected.len() as u64,
        }
    );
}

#[tokio::test]
async fn each_patch_sees_the_text_the_previous_ones_left() {
    let ws = Workspace::new();
    ws.write("f.txt", "one\ntwo\n");
    let out = patch(
        &ws,
        "f.txt",
        vec![
            edit("one", "uno"),
            edit("uno\ntwo", "uno\ndos"),
            edit("dos\n", ""),
        ],
    )
    .await
    .expect("patches");
    assert_eq!(ws.text("f.txt"), "uno\n");
    assert_eq!(out.patches_applied, 3);
    assert_eq!(out.bytes_written, 4);
}

#[tokio::test]
async fn start_line_limits_the_search_to_that_line_onward() {
    let ws = Workspace::new();
    ws.write("f.txt", "x = 1\ny = 2\nx = 1\n");
    patch(&ws, "f.txt", vec![edit_from(2, "x = 1", "x = 3")])
        .await
        .expect("patches");
    assert_eq!(ws.text("f.txt"), "x = 1\ny = 2\nx = 3\n");
    // The last line is a valid start; text on it is found.
    patch(&ws, "f.txt", vec![edit_from(3, "x = 3", "x = 4")])
        .await
        .expect("patches the last line");
    assert_eq!(ws.text("f.txt"), "x = 1\ny = 2\nx = 4\n");
}

#[tokio::test]
async fn start_line_zero_or_past_the_end_fails_with_a_reason() {
    let ws = Workspace::new();
    let (index, total, reason) =
        failing(&ws, "a\nb\n", vec![edit("a", "A"), edit_from(0, "b", "B")]).await;
    assert_eq!((index, total), (2, 2));
    assert!(reason.contains("start_line must be 1 or more"), "{reason}");

    let (index, _, reason) = failing(&ws, "a\nb\n", vec![edit_from(3, "b", "B")]).await;
    assert_eq!(index, 1);
    assert!(
        reason.contains("start_line 3 is past the end of the file, which has 2 lines"),
        "{reason}"
    );
}

#[tokio::test]
async fn missing_find_text_is_quoted_shortened() {
    let ws = Workspace::new();
    let long = format!("{}\nmore", "z".repeat(100));
    let (index, total, reason) = failing(&ws, "abc\n", vec![edit(&long, "")]).await;
    assert_eq!((index, total), (1, 1));
    assert!(reason.starts_with("find text \"zzz"), "{reason}");
    assert!(reason.contains("... (105 bytes) not found"), "{reason}");
    assert!(
        !reason.contains("more"),
        "quoted text is shortened: {reason}"
    );
}

#[tokio::test]
async fn missing_find_text_gets_a_hint_when_the_cause_is_likely() {
    let ws = Workspace::new();
    let (_, _, reason) = failing(&ws, "let  X = 1;\n", vec![edit("let x = 1;", "")]).await;
    assert!(
        reason.contains("differing only in whitespace or letter case"),
        "{reason}"
    );

    let (_, _, reason) = failing(&ws, "alpha\n", vec![edit("     1\talpha", "")]).await;
    assert!(reason.contains("line-number prefixes"), "{reason}");

    let (_, _, reason) = failing(&ws, "a\r\nb\r\n", vec![edit("a\nb", "")]).await;
    assert!(reason.contains("CRLF"), "{reason}");

    let (index, _, reason) =
        failing(&ws, "old\n", vec![edit("old", "new"), edit("old", "x")]).await;
    assert_eq!(index, 2);
    assert!(reason.contains("earlier patch of this call"), "{reason}");

    let (_, _, reason) = failing(&ws, "a\nb\n", vec![edit_from(2, "a", "A")]).await;
    assert!(reason.contains("not found from line 2 on"), "{reason}");
    assert!(reason.contains("occurs before start_line"), "{reason}");

    let (_, _, reason) = failing(&ws, "abc\n", vec![edit("xyz", "")]).await;
    assert_eq!(reason, "find text \"xyz\" not found");
}

#[tokio::test]
async fn find_text_that_occurs_more_than_once_fails_and_says_where() {
    let ws = Workspace::new();
    let (_, _, reason) = failing(&ws, "x\ny\nx\nx\n", vec![edit("x", "z")]).await;
    assert!(
        reason.contains("occurs 3 times (at lines 1, 3, 4)"),
        "{reason}"
    );
    assert!(
        reason.contains("add surrounding lines to make it unique or give start_line"),
        "{reason}"
    );
    let (_, _, reason) = failing(&ws, "x\ny\nx\nx\n", vec![edit_from(2, "x", "z")]).await;
    assert!(
        reason.contains("occurs 2 times from line 2 on (at lines 3, 4)"),
        "{reason}"
    );
}

#[tokio::test]
async fn overlapping_occurrences_are_ambiguous_too() {
    let ws = Workspace::new();
    let (_, _, reason) = failing(&ws, "aaa\n", vec![edit("aa", "b")]).await;
    assert!(
        reason.contains("more than once (the occurrences overlap"),
        "{reason}"
    );
}

#[tokio::test]
async fn an_empty_find_fails() {
    let ws = Workspace::new();
    let (_, _, reason) = failing(&ws, "abc\n", vec![edit("", "x")]).await;
    assert!(reason.starts_with("find must not be empty"), "{reason}");
}

#[tokio::test]
async fn an_empty_patch_list_is_an_invalid_argument() {
    let ws = Workspace::new();
    ws.write("f.txt", "a");
    let err = patch(&ws, "f.txt", vec![]).await.expect_err("empty");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
}

#[tokio::test]
async fn nothing_is_written_unless_every_patch_applies() {
    let ws = Workspace::new();
    let (index, total, _) = failing(
        &ws,
        "one\ntwo\n",
        vec![edit("one", "1"), edit("two", "2"), edit("three", "3")],
    )
    .await;
    assert_eq!((index, total), (3, 3));
}

#[tokio::test]
async fn the_message_says_which_patch_failed_and_that_nothing_changed() {
    let err =
        apply_all("a\n", &[edit("a", "b"), edit("zz", "")], &CallStop::idle()).expect_err("fails");
    assert_eq!(
        err.to_string(),
        "patch 2 of 2 failed: find text \"zz\" not found; no change was written"
    );
}

#[tokio::test]
async fn refuses_files_that_are_not_editable_text() {
    let ws = Workspace::with_limits(Limits {
        max_file_bytes: 16,
        ..Limits::default()
    });
    ws.write("bin", b"ab\0cd");
    ws.write("latin1.txt", b"caf\xe9");
    ws.write("big.txt", "x".repeat(17));
    ws.write("dir/inner.txt", "x");
    type Expected = fn(&ToolError) -> bool;
    let cases: [(&str, Expected); 5] = [
        ("bin", |e| matches!(e, ToolError::Binary { .. })),
        ("latin1.txt", |e| {
            matches!(e, ToolError::NotUtf8 { offset: 3, .. })
        }),
        ("big.txt", |e| matches!(e, ToolError::TooLarge { .. })),
        ("dir", |e| matches!(e, ToolError::IsDirectory { .. })),
        ("missing.txt", |e| matches!(e, ToolError::NotFound { .. })),
    ];
    for (path, expected) in cases {
        let err = patch(&ws, path, vec![edit("a", "b")])
            .await
            .expect_err(path);
        assert!(expected(&err), "{path}: {err:?}");
    }
    assert_eq!(ws.get("bin"), b"ab\0cd");
}

#[tokio::test]
async fn a_result_over_the_write_limit_is_refused() {
    let ws = Workspace::with_limits(Limits {
        max_write_bytes: 8,
        ..Limits::default()
    });
    ws.write("f.txt", "abc");
    let err = patch(&ws, "f.txt", vec![edit("b", "bbbbbbbbbb")])
        .await
        .expect_err("too big");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert!(
        err.to_string().contains("the patched file is 12 bytes"),
        "{err}"
    );
    assert_eq!(ws.text("f.txt"), "abc");
}

#[tokio::test]
async fn refuses_the_git_directory_even_through_a_symlink() {
    let ws = Workspace::new();
    ws.write(".git/config", "[core]\n");
    ws.symlink(".git", "g");
    for path in [".git/config", "g/config"] {
        let err = patch(&ws, path, vec![edit("core", "x")])
            .await
            .expect_err(path);
        assert!(
            matches!(err, ToolError::ProtectedPath { .. }),
            "{path}: {err}"
        );
    }
    assert_eq!(ws.text(".git/config"), "[core]\n");
}

#[tokio::test]
async fn patches_through_a_symlink_inside_the_root() {
    let ws = Workspace::new();
    ws.write("real.txt", "héllo wörld\n");
    ws.symlink("real.txt", "link.txt");
    patch(&ws, "link.txt", vec![edit("wörld", "wørld")])
        .await
        .expect("patches");
    assert_eq!(ws.text("real.txt"), "héllo wørld\n");
    assert!(
        ws.path("link.txt")
            .symlink_metadata()
            .expect("meta")
            .file_type()
            .is_symlink()
    );
}

#[test]
fn line_start_finds_each_line() {
    let text = "a\nbb\n\nccc";
    assert_eq!(line_start(text, 1), Some(0));
    assert_eq!(line_start(text, 2), Some(2));
    assert_eq!(line_start(text, 3), Some(5));
    assert_eq!(line_start(text, 4), Some(6));
    assert_eq!(line_start(text, 5), None);
    assert_eq!(line_start("", 1), None);
    assert_eq!(line_start("a\n", 2), None, "a final newline starts no line");
}
