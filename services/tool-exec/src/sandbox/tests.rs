use super::*;
use crate::stop::CallStop;

fn sandbox() -> (tempfile::TempDir, FileRoot) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = FileRoot::open(dir.path()).expect("opens");
    (dir, sandbox)
}

#[test]
fn relative_and_absolute_paths_inside_the_root_resolve_to_the_same_place() {
    let (dir, sandbox) = sandbox();
    let abs = dir.path().join("src/main.rs");
    assert_eq!(
        sandbox.resolve("src/main.rs").expect("relative").display(),
        "src/main.rs"
    );
    assert_eq!(
        sandbox
            .resolve(abs.to_str().expect("utf8"))
            .expect("absolute")
            .display(),
        "src/main.rs"
    );
    assert_eq!(
        sandbox
            .resolve("./src/../src/./main.rs")
            .expect("dots")
            .display(),
        "src/main.rs"
    );
    assert_eq!(sandbox.resolve(".").expect("root").display(), ".");
}

#[test]
fn paths_that_climb_out_are_refused_before_touching_the_disk() {
    let (_dir, sandbox) = sandbox();
    for path in [
        "..",
        "../x",
        "a/../../x",
        "/etc/passwd",
        "./../../../../etc/shadow",
    ] {
        let err = sandbox.resolve(path).expect_err(path);
        assert!(
            matches!(err, ToolError::OutsideWorkspace { .. }),
            "{path}: {err}"
        );
    }
}

#[test]
fn malformed_paths_are_invalid_arguments() {
    let (_dir, sandbox) = sandbox();
    for path in ["", "  ", "a\0b", &"x".repeat(300), &"a/".repeat(2100)] {
        let err = sandbox.resolve(path).expect_err("invalid");
        assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
    }
}

#[test]
fn writes_into_the_git_directory_are_refused() {
    let (_dir, sandbox) = sandbox();
    let err = sandbox
        .resolve_for_write(".git/hooks/pre-commit")
        .expect_err("protected");
    assert!(matches!(err, ToolError::ProtectedPath { .. }), "{err}");
    assert!(sandbox.resolve_for_write("sub/.git/config").is_err());
    assert!(
        sandbox
            .resolve_for_write(".github/workflows/ci.yml")
            .is_ok()
    );
}

fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

#[test]
fn absolute_paths_must_be_under_the_root_not_just_share_its_prefix() {
    let (dir, sandbox) = sandbox();
    let sibling = format!("{}-other/x", dir.path().display());
    let err = sandbox.resolve(&sibling).expect_err("sibling");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
    let climbing = format!("{}/../x", dir.path().display());
    let err = sandbox.resolve(&climbing).expect_err("climbing");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
}

#[test]
fn symlinks_leading_out_are_refused_when_used() {
    let (dir, sandbox) = sandbox();
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    symlink(outside.path(), dir.path().join("out"));
    symlink("../../../../../../../../etc", dir.path().join("up"));
    for rel in ["out/secret.txt", "up/passwd"] {
        let path = sandbox.resolve(rel).expect("resolves lexically");
        let err = sandbox
            .read_file(&path, 1024, &CallStop::idle())
            .expect_err(rel);
        assert!(
            matches!(err, ToolError::OutsideWorkspace { .. }),
            "{rel}: {err}"
        );
    }
}

#[test]
fn symlink_loops_are_invalid_paths() {
    let (dir, sandbox) = sandbox();
    symlink("b", dir.path().join("a"));
    symlink("a", dir.path().join("b"));
    symlink("self", dir.path().join("self"));
    for rel in ["a", "self", "a/x"] {
        let path = sandbox.resolve(rel).expect("resolves lexically");
        let err = sandbox.metadata(&path).expect_err(rel);
        assert!(matches!(err, ToolError::InvalidPath { .. }), "{rel}: {err}");
    }
}

#[test]
fn opening_a_fifo_is_refused_without_blocking() {
    let (dir, sandbox) = sandbox();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe"))
        .status()
        .expect("runs mkfifo");
    assert!(made.success());
    let path = sandbox.resolve("pipe").expect("resolves");
    let err = sandbox.open_file(&path).expect_err("fifo");
    assert!(matches!(err, ToolError::NotAFile { .. }), "{err}");
}

#[test]
fn write_atomic_keeps_temporary_names_short_enough_for_long_file_names() {
    let (dir, sandbox) = sandbox();
    let name = "é".repeat(127); // 254 bytes
    let path = sandbox.resolve(&name).expect("resolves");
    sandbox
        .write_atomic(&path, b"one", WriteMode::CreateNew, &CallStop::idle())
        .expect("creates");
    sandbox
        .write_atomic(&path, b"two", WriteMode::Replace, &CallStop::idle())
        .expect("replaces");
    assert_eq!(std::fs::read(dir.path().join(&name)).expect("read"), b"two");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
}

#[test]
fn the_git_directory_is_protected_under_any_name() {
    let (dir, sandbox) = sandbox();
    std::fs::create_dir_all(dir.path().join(".git/hooks")).expect("mkdir");
    std::fs::write(dir.path().join(".git/config"), "[core]\n").expect("write");
    symlink(".git", dir.path().join("g"));
    symlink(".git/hooks", dir.path().join("hooks"));
    symlink(".git/config", dir.path().join("cfg"));
    let protected = |err: ToolError| matches!(err, ToolError::ProtectedPath { .. });

    for rel in ["g/hooks/pre-commit", "hooks/post-checkout", "g/a/b/c"] {
        let path = sandbox.resolve_for_write(rel).expect("not .git by name");
        let err = sandbox
            .write_atomic(
                &path,
                b"#!/bin/sh\n",
                WriteMode::CreateNew,
                &CallStop::idle(),
            )
            .expect_err(rel);
        assert!(protected(err), "{rel}");
    }
    let path = sandbox.resolve_for_write("cfg").expect("not .git by name");
    let err = sandbox
        .write_atomic(&path, b"x", WriteMode::Replace, &CallStop::idle())
        .expect_err("through link");
    assert!(protected(err));
    let path = sandbox
        .resolve_for_write("g/config")
        .expect("not .git by name");
    assert!(protected(
        sandbox
            .remove_file(&path, &CallStop::idle())
            .expect_err("remove")
    ));

    assert!(!dir.path().join(".git/a").exists(), "no directory was made");
    assert_eq!(
        std::fs::read_dir(dir.path().join(".git/hooks"))
            .expect("dir")
            .count(),
        0
    );
    assert_eq!(
        std::fs::read(dir.path().join(".git/config")).expect("read"),
        b"[core]\n"
    );
    // Removing the link itself changes nothing in .git.
    let path = sandbox.resolve_for_write("cfg").expect("resolves");
    sandbox
        .remove_file(&path, &CallStop::idle())
        .expect("removes the link");
    assert!(dir.path().join(".git/config").exists());
}

#[test]
fn create_new_refuses_a_parent_that_leads_outside() {
    let (dir, sandbox) = sandbox();
    let outside = tempfile::tempdir().expect("tempdir");
    symlink(outside.path(), dir.path().join("out"));
    let path = sandbox
        .resolve_for_write("out/new/file.txt")
        .expect("resolves");
    let err = sandbox
        .write_atomic(&path, b"x", WriteMode::CreateNew, &CallStop::idle())
        .expect_err("outside");
    assert!(matches!(err, ToolError::OutsideWorkspace { .. }), "{err}");
    assert_eq!(
        std::fs::read_dir(outside.path()).expect("dir").count(),
        0,
        "nothing was created outside"
    );
}
