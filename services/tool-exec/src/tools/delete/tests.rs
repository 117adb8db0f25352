use chorus_catalog::{args, outputs};

use super::*;
use crate::tools::test_support::{Workspace, output};

async fn delete(ws: &Workspace, path: &str) -> Result<outputs::FileDeleted, ToolError> {
    let args = args::FileDelete {
        path: path.to_owned(),
    };
    run(&ws.ctx, args).await.map(output)
}

#[tokio::test]
async fn deletes_a_file() {
    let ws = Workspace::new();
    ws.write("sub/a.txt", "x");
    let out = delete(&ws, "./sub/a.txt").await.expect("deletes");
    assert_eq!(out.path, "sub/a.txt");
    assert!(!ws.exists("sub/a.txt"));
    assert!(ws.exists("sub"), "the directory stays");
}

#[tokio::test]
async fn deletes_a_symlink_itself_not_its_target() {
    let ws = Workspace::new();
    ws.write("target.txt", "keep");
    ws.symlink("target.txt", "link.txt");
    ws.symlink("nowhere.txt", "dangling.txt");
    delete(&ws, "link.txt").await.expect("deletes the link");
    assert!(!ws.exists("link.txt"));
    assert_eq!(ws.text("target.txt"), "keep");
    delete(&ws, "dangling.txt")
        .await
        .expect("deletes a dangling link");
    assert!(!ws.exists("dangling.txt"));
}

#[tokio::test]
async fn refuses_directories_and_symlinks_to_directories() {
    let ws = Workspace::new();
    ws.write("dir/inner.txt", "x");
    ws.symlink("dir", "dirlink");
    for path in ["dir", "dirlink", "."] {
        let err = delete(&ws, path).await.expect_err(path);
        assert!(
            matches!(err, ToolError::IsDirectory { .. }),
            "{path}: {err}"
        );
    }
    assert!(ws.exists("dir/inner.txt"));
    assert!(ws.exists("dirlink"));
}

#[tokio::test]
async fn a_missing_file_is_not_found() {
    let ws = Workspace::new();
    let err = delete(&ws, "nope.txt").await.expect_err("missing");
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn refuses_symlinks_that_lead_outside_and_keeps_their_targets() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "secret").expect("write");
    ws.symlink(&secret, "out.txt");
    ws.symlink(outside.path(), "outdir");
    let err = delete(&ws, "out.txt").await.expect_err("outside link");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
    let err = delete(&ws, "outdir/secret.txt")
        .await
        .expect_err("through outside dir");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
    assert!(ws.exists("out.txt"));
    assert!(secret.exists());
}

#[tokio::test]
async fn refuses_the_git_directory_even_through_a_symlink() {
    let ws = Workspace::new();
    ws.write(".git/config", "[core]\n");
    ws.write("sub/.git/HEAD", "ref\n");
    ws.symlink(".git", "g");
    for path in [".git/config", "sub/.git/HEAD", "g/config"] {
        let err = delete(&ws, path).await.expect_err(path);
        assert!(
            matches!(err, ToolError::ProtectedPath { .. }),
            "{path}: {err}"
        );
    }
    assert!(ws.exists(".git/config"));
    assert!(ws.exists("sub/.git/HEAD"));
    // The link itself is an ordinary entry of the workspace.
    let err = delete(&ws, "g").await.expect_err("link to a directory");
    assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
}
