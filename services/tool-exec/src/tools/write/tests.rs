use std::os::unix::fs::PermissionsExt;

use chorus_catalog::{args, outputs};

use super::*;
use crate::config::Limits;
use crate::tools::test_support::{Workspace, output};

async fn create_file(
    ws: &Workspace,
    path: &str,
    content: &str,
) -> Result<outputs::FileWritten, ToolError> {
    let args = args::FileCreate {
        path: path.to_owned(),
        content: content.to_owned(),
    };
    create(&ws.ctx, args).await.map(output)
}

async fn write_file(
    ws: &Workspace,
    path: &str,
    content: &str,
) -> Result<outputs::FileWritten, ToolError> {
    let args = args::FileWrite {
        path: path.to_owned(),
        content: content.to_owned(),
    };
    write(&ws.ctx, args).await.map(output)
}

#[tokio::test]
async fn create_makes_the_file_and_its_parents_and_counts_utf8_bytes() {
    let ws = Workspace::new();
    let out = create_file(&ws, "docs/notes/café.md", "é\n")
        .await
        .expect("creates");
    assert_eq!(
        out,
        outputs::FileWritten {
            path: "docs/notes/café.md".to_owned(),
            bytes_written: 3,
        }
    );
    assert_eq!(ws.text("docs/notes/café.md"), "é\n");
    assert_eq!(
        ws.names("docs/notes"),
        ["café.md"],
        "no temporary file left"
    );
}

#[tokio::test]
async fn create_accepts_empty_content_and_the_longest_file_name() {
    let ws = Workspace::new();
    create_file(&ws, "empty.txt", "").await.expect("empty");
    assert_eq!(ws.get("empty.txt"), b"");
    let long = "n".repeat(255);
    create_file(&ws, &long, "x").await.expect("255-byte name");
    assert_eq!(ws.text(&long), "x");
}

#[tokio::test]
async fn create_refuses_anything_already_at_the_path() {
    let ws = Workspace::new();
    ws.write("file.txt", "old");
    ws.write("dir/inner.txt", "x");
    ws.symlink("file.txt", "link.txt");
    ws.symlink("nowhere.txt", "dangling.txt");
    for path in ["file.txt", "dir", "link.txt", "dangling.txt"] {
        let err = create_file(&ws, path, "new").await.expect_err(path);
        assert!(
            matches!(err, ToolError::AlreadyExists { .. }),
            "{path}: {err}"
        );
    }
    assert_eq!(ws.text("file.txt"), "old");
    assert!(
        !ws.exists("nowhere.txt"),
        "the dangling link was not followed"
    );
    assert!(
        ws.path("dangling.txt")
            .symlink_metadata()
            .expect("still there")
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn create_goes_through_a_symlinked_directory_inside_the_root() {
    let ws = Workspace::new();
    ws.write("real/keep.txt", "");
    ws.symlink("real", "alias");
    create_file(&ws, "alias/new.txt", "hi")
        .await
        .expect("creates");
    assert_eq!(ws.text("real/new.txt"), "hi");
}

#[tokio::test]
async fn create_refuses_the_root_and_paths_under_a_file() {
    let ws = Workspace::new();
    ws.write("file.txt", "x");
    let err = create_file(&ws, ".", "x").await.expect_err("root");
    assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
    let err = create_file(&ws, "file.txt/x", "x")
        .await
        .expect_err("under a file");
    assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
}

#[tokio::test]
async fn create_and_write_refuse_content_over_the_write_limit() {
    let ws = Workspace::with_limits(Limits {
        max_write_bytes: 4,
        ..Limits::default()
    });
    let err = create_file(&ws, "big.txt", "12345")
        .await
        .expect_err("too big");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert!(err.to_string().contains("over the 4-byte limit"), "{err}");
    assert!(!ws.exists("big.txt"));
    create_file(&ws, "ok.txt", "1234")
        .await
        .expect("at the limit");

    let err = write_file(&ws, "ok.txt", "12345")
        .await
        .expect_err("too big");
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert_eq!(ws.text("ok.txt"), "1234");
}

#[tokio::test]
async fn create_and_write_refuse_the_git_directory_even_through_a_symlink() {
    let ws = Workspace::new();
    ws.write(".git/config", "[core]\n");
    ws.write(".git/hooks/README", "");
    ws.symlink(".git", "g");
    ws.symlink(".git/config", "cfg");
    for path in [
        ".git/hooks/pre-commit",
        "sub/.git/x",
        "g/hooks/pre-commit",
        "g/new/deep",
    ] {
        let err = create_file(&ws, path, "#!/bin/sh\n").await.expect_err(path);
        assert!(
            matches!(err, ToolError::ProtectedPath { .. }),
            "{path}: {err}"
        );
    }
    assert_eq!(ws.names(".git/hooks"), ["README"]);
    assert!(!ws.exists("sub"));
    assert_eq!(ws.names(".git"), ["config", "hooks"]);
    for path in [".git/config", "g/config", "cfg"] {
        let err = write_file(&ws, path, "pwned").await.expect_err(path);
        assert!(
            matches!(err, ToolError::ProtectedPath { .. }),
            "{path}: {err}"
        );
    }
    assert_eq!(ws.text(".git/config"), "[core]\n");
}

#[tokio::test]
async fn write_replaces_the_content_and_keeps_the_permissions() {
    let ws = Workspace::new();
    ws.write("run.sh", "echo old\n");
    std::fs::set_permissions(ws.path("run.sh"), std::fs::Permissions::from_mode(0o751))
        .expect("chmod");
    let out = write_file(&ws, "run.sh", "echo new\n")
        .await
        .expect("writes");
    assert_eq!(out.bytes_written, 9);
    assert_eq!(out.path, "run.sh");
    assert_eq!(ws.text("run.sh"), "echo new\n");
    let mode = ws
        .path("run.sh")
        .metadata()
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o751);
    assert_eq!(ws.names("."), ["run.sh"], "no temporary file left");
}

#[tokio::test]
async fn write_needs_an_existing_regular_file() {
    let ws = Workspace::new();
    ws.write("dir/inner.txt", "x");
    ws.symlink("nowhere.txt", "dangling.txt");
    let err = write_file(&ws, "new.txt", "x").await.expect_err("missing");
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
    assert!(!ws.exists("new.txt"));
    let err = write_file(&ws, "dangling.txt", "x")
        .await
        .expect_err("dangling");
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
    assert!(!ws.exists("nowhere.txt"));
    let err = write_file(&ws, "dir", "x").await.expect_err("dir");
    assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
    let err = write_file(&ws, ".", "x").await.expect_err("root");
    assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
}

#[tokio::test]
async fn write_through_a_symlink_changes_its_target_and_keeps_the_link() {
    let ws = Workspace::new();
    ws.write("real/target.txt", "old");
    ws.symlink("real/target.txt", "link.txt");
    write_file(&ws, "link.txt", "new").await.expect("writes");
    assert_eq!(ws.text("real/target.txt"), "new");
    let meta = ws.path("link.txt").symlink_metadata().expect("meta");
    assert!(meta.file_type().is_symlink(), "the link is still a link");
    assert_eq!(ws.names("real"), ["target.txt"], "no temporary file left");
}

#[tokio::test]
async fn write_refuses_a_symlink_that_leads_outside() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "secret").expect("write");
    ws.symlink(&secret, "out.txt");
    let err = write_file(&ws, "out.txt", "pwned")
        .await
        .expect_err("outside");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&secret).expect("read"), "secret");
}

#[tokio::test]
async fn create_under_a_broken_symlink_says_the_parent_is_not_a_directory() {
    let ws = Workspace::new();
    ws.symlink("missing-dir", "broken");
    let err = create_file(&ws, "broken/new.txt", "x")
        .await
        .expect_err("broken parent");
    assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
    assert!(err.to_string().contains("not a directory"), "{err}");
    assert!(!ws.exists("missing-dir"));
}
