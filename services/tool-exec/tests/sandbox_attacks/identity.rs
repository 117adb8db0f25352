//! File tools act as the workspace's user, as its processes do: what that
//! user cannot read, they cannot read, whatever the service runs as; and a
//! hard link — the one way to a file outside that no path check sees — is not
//! read unless the operator allows it.

use std::os::unix::fs::PermissionsExt;

use chorus_sandbox::testing::{give_to_test_user, running_as_root};
use chorus_tool_exec::Limits;
use chorus_tool_exec::sandbox::HardLinks;
use serde_json::json;
use tonic::Code;

use crate::arena::{Arena, SECRET, patch, read};

/// Whether this test can run as a root service; CI (CHORUS_TEST_REQUIRE_ROOT=1)
/// makes its absence a failure.
fn root_service() -> bool {
    let root = running_as_root();
    assert!(
        root || std::env::var("CHORUS_TEST_REQUIRE_ROOT").as_deref() != Ok("1"),
        "CHORUS_TEST_REQUIRE_ROOT=1 but the tests do not run as root: run them as root (CI does)"
    );
    root
}

/// The reported attack: a root-owned 0600 file inside a workspace owned by
/// an ordinary user was returned by file.read, though bash got "Permission
/// denied".
#[tokio::test]
async fn a_file_the_workspace_user_cannot_read_is_not_read_by_file_tools() {
    if !root_service() {
        // A service that is not root acts as itself: no other identity to take.
        return;
    }
    let a = Arena::new();
    give_to_test_user(&a.root);
    let secret = a.root.join("root-only.txt");
    std::fs::write(&secret, format!("{SECRET} root only\n")).expect("write");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let err = a
        .refused("file.read", read("root-only.txt"), Code::FailedPrecondition)
        .await;
    assert!(err.to_string().contains("permission denied"), "{err}");
    a.refused(
        "file.patch",
        patch("root-only.txt"),
        Code::FailedPrecondition,
    )
    .await;
    a.list_or_search("file.search", json!({"pattern": SECRET}), true)
        .await;
    // What the tools make belongs to the workspace's user.
    a.call(
        "file.create",
        json!({"path": "made/new.txt", "content": "x"}),
    )
    .await
    .expect("create");
    for made in ["made", "made/new.txt"] {
        assert!(
            chorus_sandbox::testing::owned_by_test_user(&a.root.join(made)),
            "{made} is not the workspace user's"
        );
    }
}

/// The reported attack: a hard link planted (on the host) to a file outside
/// the workspace was read and found by search.
#[tokio::test]
async fn a_hard_link_to_a_file_outside_is_neither_read_nor_searched() {
    let a = Arena::new();
    std::fs::hard_link(
        a.outside.join("outside-secret.txt"),
        a.root.join("linked.txt"),
    )
    .expect("hard link");
    let err = a
        .refused("file.read", read("linked.txt"), Code::FailedPrecondition)
        .await;
    assert!(err.to_string().contains("hard links"), "{err}");
    a.refused("file.patch", patch("linked.txt"), Code::FailedPrecondition)
        .await;
    a.list_or_search("file.search", json!({"pattern": SECRET}), true)
        .await;
    a.refused(
        "file.search",
        json!({"pattern": SECRET, "path": "linked.txt"}),
        Code::FailedPrecondition,
    )
    .await;

    // The operator may allow them (workspaces made with hard links).
    let allowed = Arena::with_limits(Limits {
        hard_links: HardLinks::Allow,
        ..Limits::default()
    });
    std::fs::write(allowed.root.join("a.txt"), "linked content\n").expect("write");
    std::fs::hard_link(allowed.root.join("a.txt"), allowed.root.join("b.txt")).expect("link");
    let read = allowed
        .call("file.read", read("b.txt"))
        .await
        .expect("allowed");
    assert!(
        read.output.to_string().contains("linked content"),
        "{:?}",
        read.output
    );
}

/// Another deployment's data directory inside a workspace (its admin key,
/// its database) is never walked: file.list and file.search pass it by.
#[tokio::test]
async fn a_chorus_data_directory_inside_the_workspace_is_never_walked() {
    let a = Arena::new();
    let data = a.root.join("other/.chorus");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(
        data.join("admin.key"),
        format!("{SECRET} chorus_admin_key\n"),
    )
    .expect("key");
    chorus_serve::data_dir::mark(&data).expect("the other deployment marks it");
    a.list_or_search("file.search", json!({"pattern": SECRET}), true)
        .await;
    let listed = a
        .call("file.list", json!({"path": ".", "recursive": true}))
        .await
        .expect("list");
    assert!(
        !listed.output.to_string().contains("admin.key"),
        "{:?}",
        listed.output
    );
}
