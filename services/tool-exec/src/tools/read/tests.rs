use chorus_catalog::{args, outputs};

use super::*;
use crate::config::Limits;
use crate::tools::test_support::{Workspace, output};

fn read_args(path: &str, offset: Option<u64>, limit: Option<u64>) -> args::FileRead {
    args::FileRead {
        path: path.to_owned(),
        offset,
        limit,
    }
}

async fn read(ws: &Workspace, path: &str) -> Result<outputs::FileRead, ToolError> {
    read_page(ws, path, None, None).await
}

async fn read_page(
    ws: &Workspace,
    path: &str,
    offset: Option<u64>,
    limit: Option<u64>,
) -> Result<outputs::FileRead, ToolError> {
    run(&ws.ctx, read_args(path, offset, limit))
        .await
        .map(output)
}

#[tokio::test]
async fn lines_are_numbered_to_six_columns_and_a_trailing_newline_adds_no_line() {
    let ws = Workspace::new();
    ws.write("a.txt", "alpha\nbeta\n");
    let out = read(&ws, "a.txt").await.expect("reads");
    assert_eq!(
        out,
        outputs::FileRead {
            path: "a.txt".to_owned(),
            content: "     1\talpha\n     2\tbeta\n".to_owned(),
            total_lines: 2,
            lines_returned: 2,
            truncated: false,
            next_offset: None,
        }
    );
}

#[tokio::test]
async fn a_last_line_without_newline_counts_and_blank_lines_are_kept() {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n\nthree");
    let out = read(&ws, "a.txt").await.expect("reads");
    assert_eq!(out.content, "     1\tone\n     2\t\n     3\tthree\n");
    assert_eq!(out.total_lines, 3);
}

#[tokio::test]
async fn carriage_returns_before_newlines_are_not_part_of_lines() {
    let ws = Workspace::new();
    ws.write("dos.txt", "one\r\ntwo\r\nthree\r");
    let out = read(&ws, "dos.txt").await.expect("reads");
    assert_eq!(out.content, "     1\tone\n     2\ttwo\n     3\tthree\n");
    assert_eq!(out.total_lines, 3);
}

#[tokio::test]
async fn an_empty_file_has_no_lines() {
    let ws = Workspace::new();
    ws.write("empty.txt", "");
    let out = read(&ws, "empty.txt").await.expect("reads");
    assert_eq!(out.content, "");
    assert_eq!(out.total_lines, 0);
    assert_eq!(out.lines_returned, 0);
    assert!(!out.truncated);
    assert_eq!(out.next_offset, None);
}

#[tokio::test]
async fn a_file_of_one_newline_has_one_empty_line() {
    let ws = Workspace::new();
    ws.write("nl.txt", "\n");
    let out = read(&ws, "nl.txt").await.expect("reads");
    assert_eq!(out.content, "     1\t\n");
    assert_eq!(out.total_lines, 1);
}

#[tokio::test]
async fn offset_and_limit_page_through_the_file() {
    let ws = Workspace::new();
    ws.write("five.txt", "1\n2\n3\n4\n5\n");
    let first = read_page(&ws, "five.txt", Some(1), Some(2))
        .await
        .expect("reads");
    assert_eq!(first.content, "     2\t2\n     3\t3\n");
    assert_eq!(first.total_lines, 5);
    assert_eq!(first.lines_returned, 2);
    assert!(first.truncated);
    assert_eq!(first.next_offset, Some(3));

    let rest = read_page(&ws, "five.txt", first.next_offset, Some(2))
        .await
        .expect("reads");
    assert_eq!(rest.content, "     4\t4\n     5\t5\n");
    assert!(!rest.truncated, "nothing remains after line 5");
    assert_eq!(rest.next_offset, None);
}

#[tokio::test]
async fn a_limit_that_reaches_the_end_is_not_truncated() {
    let ws = Workspace::new();
    ws.write("three.txt", "a\nb\nc\n");
    let out = read_page(&ws, "three.txt", Some(0), Some(3))
        .await
        .expect("reads");
    assert_eq!(out.lines_returned, 3);
    assert!(!out.truncated);
    assert_eq!(out.next_offset, None);
}

#[tokio::test]
async fn an_offset_at_or_past_the_end_returns_no_lines() {
    let ws = Workspace::new();
    ws.write("two.txt", "a\nb\n");
    for offset in [2, 3, u64::MAX] {
        let out = read_page(&ws, "two.txt", Some(offset), None)
            .await
            .expect("reads");
        assert_eq!(out.content, "", "offset {offset}");
        assert_eq!(out.lines_returned, 0);
        assert_eq!(out.total_lines, 2);
        assert!(!out.truncated);
        assert_eq!(out.next_offset, None);
    }
}

#[tokio::test]
async fn a_zero_limit_is_refused() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let err = read_page(&ws, "a.txt", None, Some(0))
        .await
        .expect_err("limit 0");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert!(
        err.to_string().contains("limit must be at least 1"),
        "{err}"
    );
}

#[tokio::test]
async fn the_output_limit_stops_at_a_line_boundary_and_says_where_to_go_on() {
    // Each line "xxxxxxxxx" renders as 6 + 1 + 9 + 1 = 17 bytes.
    let ws = Workspace::with_limits(Limits {
        max_output_bytes: 40,
        ..Limits::default()
    });
    ws.write("lines.txt", "xxxxxxxxx\n".repeat(5));
    let out = read(&ws, "lines.txt").await.expect("reads");
    assert_eq!(out.lines_returned, 2);
    assert_eq!(out.content.len(), 34);
    assert!(out.content.ends_with('\n'));
    assert!(out.truncated);
    assert_eq!(out.next_offset, Some(2));

    let next = read_page(&ws, "lines.txt", out.next_offset, None)
        .await
        .expect("reads on");
    assert!(next.content.starts_with("     3\t"), "{}", next.content);
    assert_eq!(next.next_offset, Some(4));
}

#[tokio::test]
async fn a_single_line_over_the_output_limit_is_cut_at_a_char_boundary() {
    let ws = Workspace::with_limits(Limits {
        max_output_bytes: 200,
        ..Limits::default()
    });
    // 300 three-byte chars on line 1, then a short line 2.
    ws.write("wide.txt", format!("{}\nshort\n", "€".repeat(300)));
    let outcome = run(&ws.ctx, read_args("wide.txt", None, None))
        .await
        .expect("reads");
    assert_eq!(outcome.metadata.get("cut_line"), Some(&1.into()));
    let out: outputs::FileRead = output(outcome);
    assert!(out.content.len() <= 200, "{} bytes", out.content.len());
    assert!(out.content.starts_with("     1\t€"), "{}", out.content);
    assert!(out.content.contains("[line 1 cut"), "{}", out.content);
    assert!(out.content.ends_with('\n'));
    assert_eq!(out.lines_returned, 1);
    assert!(out.truncated, "line 2 remains");
    assert_eq!(out.next_offset, Some(1));
}

#[tokio::test]
async fn nul_bytes_in_the_first_8_kib_make_a_file_binary() {
    let ws = Workspace::new();
    ws.write("image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    let err = read(&ws, "image.png").await.expect_err("binary");
    assert!(matches!(err, ToolError::Binary { .. }), "{err}");

    // A NUL far into a text file is just a character.
    let mut late = "a\n".repeat(5000).into_bytes();
    late.push(0);
    ws.write("late.txt", late);
    let out = read(&ws, "late.txt").await.expect("text");
    assert_eq!(out.total_lines, 5001);
}

#[tokio::test]
async fn invalid_utf8_names_the_offset_of_the_first_bad_byte() {
    let ws = Workspace::new();
    ws.write("latin1.txt", b"caf\xe9 au lait\n");
    let err = read(&ws, "latin1.txt").await.expect_err("not utf-8");
    assert!(
        matches!(err, ToolError::NotUtf8 { offset: 3, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn files_over_the_read_limit_are_refused() {
    let ws = Workspace::with_limits(Limits {
        max_file_bytes: 10,
        ..Limits::default()
    });
    ws.write("big.txt", "0123456789A");
    let err = read(&ws, "big.txt").await.expect_err("too large");
    assert!(
        matches!(
            err,
            ToolError::TooLarge {
                size: 11,
                limit: 10,
                ..
            }
        ),
        "{err:?}"
    );
    ws.write("fits.txt", "0123456789");
    read(&ws, "fits.txt").await.expect("at the limit");
}

#[tokio::test]
async fn directories_missing_files_and_special_files_are_refused() {
    let ws = Workspace::new();
    ws.write("dir/inner.txt", "x");
    let err = read(&ws, "dir").await.expect_err("dir");
    assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
    let err = read(&ws, ".").await.expect_err("root");
    assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
    let err = read(&ws, "nope.txt").await.expect_err("missing");
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
    let err = read(&ws, "dir/inner.txt/x").await.expect_err("file as dir");
    assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");

    // Opening a FIFO would block until a writer came; it is refused up front.
    let made = std::process::Command::new("mkfifo")
        .arg(ws.path("pipe"))
        .status()
        .expect("runs mkfifo");
    assert!(made.success(), "mkfifo failed");
    let err = read(&ws, "pipe").await.expect_err("fifo");
    assert!(matches!(err, ToolError::NotAFile { .. }), "{err}");
}

#[tokio::test]
async fn symlinks_inside_the_root_are_followed_and_ones_leading_out_are_refused() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), "secret\n").expect("write");
    ws.write("real/file.txt", "inside\n");
    ws.symlink("real/file.txt", "link.txt");
    ws.symlink(outside.path().join("secret.txt"), "out.txt");

    let out = read(&ws, "link.txt").await.expect("inside link");
    assert_eq!(out.content, "     1\tinside\n");
    assert_eq!(out.path, "link.txt");
    let err = read(&ws, "out.txt").await.expect_err("outside link");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
}

#[tokio::test]
async fn absolute_paths_inside_the_root_are_shown_relative() {
    let ws = Workspace::new();
    ws.write("sub/a.txt", "a\n");
    let abs = ws.path("sub/a.txt");
    let out = read(&ws, abs.to_str().expect("utf8 path"))
        .await
        .expect("reads");
    assert_eq!(out.path, "sub/a.txt");
}

#[test]
fn decode_text_checks_only_the_first_8_kib_for_nul() {
    let path = WorkspacePath::root().join("f");
    let mut bytes = vec![b'a'; BINARY_PROBE_BYTES - 1];
    bytes.push(0);
    assert!(matches!(
        decode_text(&path, bytes),
        Err(ToolError::Binary { .. })
    ));
    let mut bytes = vec![b'a'; BINARY_PROBE_BYTES];
    bytes.push(0);
    assert!(decode_text(&path, bytes).is_ok());
}

#[test]
fn line_numbers_wider_than_six_digits_still_get_their_tab() {
    let text = "x\n".repeat(1_000_000);
    let page = Page::of(&text, 999_999, None, usize::MAX);
    assert_eq!(page.content, "1000000\tx\n");
    assert_eq!(page.lines_returned, 1);
    assert_eq!(page.next_offset, None);
}

#[test]
fn prefix_at_char_boundary_never_splits_a_char() {
    assert_eq!(prefix_at_char_boundary("a€b", 2), "a");
    assert_eq!(prefix_at_char_boundary("a€b", 4), "a€");
    assert_eq!(prefix_at_char_boundary("abc", 10), "abc");
    assert_eq!(prefix_at_char_boundary("€", 0), "");
}
