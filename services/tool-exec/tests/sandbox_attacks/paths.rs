use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use serde_json::{Value, json};
use tonic::Code;

use crate::arena::*;

// ---- absolute paths and `..` ------------------------------------------------

#[tokio::test]
async fn absolute_paths_outside_the_root_are_refused() {
    let a = Arena::new();
    let secret = a.abs("outside/outside-secret.txt");
    for args in [read(&secret), read("/etc/passwd"), read("/")] {
        a.refused("file.read", args, Code::PermissionDenied).await;
    }
    a.refused("file.write", content(&secret), Code::PermissionDenied)
        .await;
    a.refused("file.patch", patch(&secret), Code::PermissionDenied)
        .await;
    a.refused("file.delete", read(&secret), Code::PermissionDenied)
        .await;
    a.refused(
        "file.create",
        content(&a.abs("outside/new.txt")),
        Code::PermissionDenied,
    )
    .await;
}

#[tokio::test]
async fn dot_dot_chains_are_refused() {
    let a = Arena::new();
    for path in [
        "../outside/outside-secret.txt",
        "dir/../../outside/outside-secret.txt",
        "./dir/./../../../../../../etc/passwd",
        "deep/a/b/../../../../outside/outside-secret.txt",
    ] {
        a.refused("file.read", read(path), Code::PermissionDenied)
            .await;
        a.refused("file.write", content(path), Code::PermissionDenied)
            .await;
        a.refused("file.delete", read(path), Code::PermissionDenied)
            .await;
    }
    a.refused(
        "file.create",
        content("../outside/new.txt"),
        Code::PermissionDenied,
    )
    .await;
}

#[tokio::test]
async fn an_absolute_path_through_the_root_that_climbs_out_is_refused() {
    let a = Arena::new();
    let sneaky = format!("{}/../outside/outside-secret.txt", a.root.display());
    a.refused("file.read", read(&sneaky), Code::PermissionDenied)
        .await;
    a.refused("file.patch", patch(&sneaky), Code::PermissionDenied)
        .await;
    // A sibling whose name starts like the root is not under it.
    let sibling = format!("{}-evil/x.txt", a.root.display());
    a.refused("file.create", content(&sibling), Code::PermissionDenied)
        .await;
}

// ---- malformed paths --------------------------------------------------------------

#[tokio::test]
async fn nul_bytes_in_a_path_are_refused() {
    let a = Arena::new();
    for path in [
        "file.txt\0",
        "file.txt\0../../outside/outside-secret.txt",
        "\0",
    ] {
        a.refused("file.read", read(path), Code::InvalidArgument)
            .await;
        a.refused("file.create", content(path), Code::InvalidArgument)
            .await;
        a.refused("file.delete", read(path), Code::InvalidArgument)
            .await;
    }
}

#[tokio::test]
async fn a_path_component_over_255_bytes_is_refused() {
    let a = Arena::new();
    let long = format!("dir/{}", "n".repeat(256));
    a.refused("file.read", read(&long), Code::InvalidArgument)
        .await;
    a.refused("file.create", content(&long), Code::InvalidArgument)
        .await;
    a.refused("file.write", content(&long), Code::InvalidArgument)
        .await;
    a.refused("file.patch", patch(&long), Code::InvalidArgument)
        .await;
    a.refused("file.delete", read(&long), Code::InvalidArgument)
        .await;
}

#[tokio::test]
async fn a_path_over_4096_bytes_is_refused() {
    let a = Arena::new();
    let long = "d/".repeat(2100) + "f.txt";
    a.refused("file.read", read(&long), Code::InvalidArgument)
        .await;
    a.refused("file.create", content(&long), Code::InvalidArgument)
        .await;
    assert!(!a.root.join("d").exists(), "no directory was made");
}

#[tokio::test]
async fn json_that_cannot_hold_a_path_is_an_invalid_argument() {
    let a = Arena::new();
    // A lone surrogate escape is not a string at all: serde_json refuses the JSON
    // text, so such a path can never reach a tool (a JSON boundary answers with an
    // argument error before anything is resolved).
    let err = serde_json::from_str::<Value>(r#"{"path":"\udc80"}"#)
        .expect_err("serde_json refuses a lone surrogate");
    assert!(err.is_syntax(), "{err}");
    // Arguments that parse but hold no usable path are refused the same way.
    for args in [
        json!({ "path": 42 }),
        json!({ "path": ["file.txt"] }),
        json!({ "path": null }),
        json!({}),
        json!({ "path": "file.txt", "sneaky": "../outside" }),
        json!("file.txt"),
    ] {
        a.refused("file.read", args, Code::InvalidArgument).await;
    }
    a.refused(
        "file.create",
        json!({ "path": { "parts": ["..", "outside"] }, "content": "x" }),
        Code::InvalidArgument,
    )
    .await;
}

#[tokio::test]
async fn a_non_utf8_file_name_cannot_be_reached_through_its_lossy_spelling() {
    let a = Arena::new();
    // "bad\xff.txt" exists; U+FFFD is what a lossy listing would show for it.
    let lossy = "bad\u{FFFD}.txt";
    a.refused("file.read", read(lossy), Code::NotFound).await;
    a.refused("file.write", content(lossy), Code::NotFound)
        .await;
    a.refused("file.patch", patch(lossy), Code::NotFound).await;
    a.refused("file.delete", read(lossy), Code::NotFound).await;
    assert_eq!(
        std::fs::read(a.root.join(OsStr::from_bytes(b"bad\xff.txt"))).expect("still there"),
        b"latin\n"
    );
}
