use std::path::Path;
use std::time::Duration;

use chorus_tool_exec::Limits;
use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use serde_json::json;
use tonic::Code;

use crate::arena::*;

// ---- wrong kind of entry ------------------------------------------------------------

#[tokio::test]
async fn a_directory_where_a_file_is_expected_is_refused() {
    let a = Arena::new();
    for path in ["dir", ".", "ln_git"] {
        a.refused("file.read", read(path), Code::InvalidArgument)
            .await;
        a.refused("file.patch", patch(path), Code::InvalidArgument)
            .await;
    }
    for path in ["dir", "."] {
        a.refused("file.write", content(path), Code::InvalidArgument)
            .await;
        a.refused("file.delete", read(path), Code::InvalidArgument)
            .await;
    }
    assert!(a.root.join("dir/inner.txt").exists());
}

#[tokio::test]
async fn a_file_where_a_directory_is_expected_is_refused() {
    let a = Arena::new();
    let path = "file.txt/x";
    a.refused("file.read", read(path), Code::InvalidArgument)
        .await;
    a.refused("file.create", content(path), Code::InvalidArgument)
        .await;
    a.refused("file.write", content(path), Code::InvalidArgument)
        .await;
    a.refused("file.patch", patch(path), Code::InvalidArgument)
        .await;
    a.refused("file.delete", read(path), Code::InvalidArgument)
        .await;
    assert_eq!(a.read_root("file.txt"), b"inside\n");
}

#[tokio::test]
async fn a_fifo_or_device_named_directly_is_refused_before_its_deadline() {
    // A short deadline: an answer past it would be DEADLINE_EXCEEDED, not a refusal.
    let a = Arena::with_limits(Limits {
        tool_timeout: Duration::from_secs(5),
        ..Limits::default()
    });
    nix::unistd::mkfifo(&a.root.join("pipe"), Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let mut specials = vec![("pipe", "a FIFO (named pipe)")];
    // A device like /dev/zero, which never ends: only root may make one.
    match mknod(
        &a.root.join("zero"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 5),
    ) {
        Ok(()) => specials.push(("zero", "a character device")),
        Err(e) => eprintln!("no device case: mknod refused ({e}); run as root to include it"),
    }
    for (path, kind) in specials {
        let search = json!({ "path": path, "pattern": "x" });
        for (tool, args) in [
            ("file.read", read(path)),
            ("file.patch", patch(path)),
            ("file.write", content(path)),
            ("file.search", search),
        ] {
            let err = a.refused(tool, args, Code::InvalidArgument).await;
            assert_eq!(
                err.to_string(),
                format!(
                    "'{path}' is {kind}, not a regular file; file tools read and change \
                     regular files only"
                )
            );
        }
    }
    // A walk skips them.
    let walked = a
        .call("file.search", json!({ "path": ".", "pattern": "inside" }))
        .await
        .expect("the walk answers");
    assert_eq!(walked.output["matches"][0]["path"], "file.txt");
}

// ---- the .git directory ------------------------------------------------------------

#[tokio::test]
async fn writes_into_git_are_refused_for_every_writing_tool() {
    let a = Arena::new();
    let git_before = snapshot_of(&a.root.join(".git"));
    for path in [
        ".git/hooks/pre-commit",
        "./.git/hooks/post-checkout",
        "dir/../.git/info/exclude",
        "ln_git/hooks/pre-commit",
        "sub/.git/config",
    ] {
        a.refused("file.create", content(path), Code::PermissionDenied)
            .await;
    }
    for path in [".git/config", "ln_git/config", "dir/../.git/HEAD"] {
        a.refused("file.write", content(path), Code::PermissionDenied)
            .await;
        a.refused(
            "file.patch",
            json!({ "path": path, "patches": [{ "find": "[core]", "replace": "[x]" }] }),
            Code::PermissionDenied,
        )
        .await;
        a.refused("file.delete", read(path), Code::PermissionDenied)
            .await;
    }
    assert_eq!(
        git_before,
        snapshot_of(&a.root.join(".git")),
        ".git is unchanged"
    );
    assert!(!a.root.join("sub").exists());
}

fn snapshot_of(dir: &Path) -> Snapshot {
    let mut snap = Snapshot::new();
    walk(dir, dir, &[], &mut snap);
    snap
}

// ---- grants -----------------------------------------------------------------------------

#[tokio::test]
async fn a_tool_the_grant_does_not_name_is_refused() {
    let a = Arena::new();
    let mut grant = a.grant();
    grant.tools = vec!["file.read".to_owned()];
    let before = a.outside_snapshot();
    let err = a
        .runner
        .execute(grant, "file.write", content("file.txt"))
        .await
        .expect_err("not granted");
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert_eq!(before, a.outside_snapshot());
    assert_eq!(a.read_root("file.txt"), b"inside\n");
}

// ---- hard links: the one link a path check cannot see ------------------------------

#[tokio::test]
async fn writes_through_a_hard_link_to_an_outside_file_leave_that_file_alone() {
    let a = Arena::new();
    std::fs::hard_link(
        a.outside.join("outside-secret.txt"),
        a.root.join("hard.txt"),
    )
    .expect("hard link");
    let before = a.outside_snapshot();
    // Replacing is an atomic rename: the link gets a new inode, the outside file keeps its bytes.
    a.call("file.write", content("hard.txt"))
        .await
        .expect("writes the workspace entry");
    std::fs::hard_link(
        a.outside.join("private/outside-hidden.txt"),
        a.root.join("hard2.txt"),
    )
    .expect("hard link");
    // A patch reads first: a file with another link is not read.
    let err = a
        .call("file.patch", patch("hard2.txt"))
        .await
        .expect_err("reads through a hard link");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    a.call("file.delete", read("hard2.txt"))
        .await
        .expect("deletes the workspace entry");
    assert_eq!(before, a.outside_snapshot());
    assert_eq!(a.read_root("hard.txt"), b"pwned\n");
}
