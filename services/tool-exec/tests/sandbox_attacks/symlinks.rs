use std::os::unix::fs::symlink;

use tonic::Code;

use crate::arena::*;

// ---- symlinks that lead out ---------------------------------------------------

#[tokio::test]
async fn reading_through_a_symlink_to_an_outside_file_is_refused() {
    let a = Arena::new();
    for path in ["ln_secret_abs", "ln_secret_rel"] {
        a.refused("file.read", read(path), Code::PermissionDenied)
            .await;
    }
}

#[tokio::test]
async fn reading_through_a_symlink_to_an_outside_directory_is_refused() {
    let a = Arena::new();
    for path in [
        "ln_dir_abs/outside-hidden.txt",
        "ln_dir_rel/outside-hidden.txt",
        "ln_dir_rel/nested/outside-deep.txt",
        "deep/a/b/ln_up/outside-hidden.txt",
        "ln_dir_abs",
    ] {
        a.refused("file.read", read(path), Code::PermissionDenied)
            .await;
    }
}

#[tokio::test]
async fn writing_through_a_symlink_to_outside_is_refused() {
    let a = Arena::new();
    for path in [
        "ln_secret_abs",
        "ln_secret_rel",
        "ln_dir_abs/outside-hidden.txt",
        "deep/a/b/ln_up/f.txt",
    ] {
        a.refused("file.write", content(path), Code::PermissionDenied)
            .await;
    }
}

#[tokio::test]
async fn writing_through_a_dangling_symlink_to_outside_creates_nothing() {
    let a = Arena::new();
    a.refused(
        "file.write",
        content("ln_dangling_out"),
        Code::PermissionDenied,
    )
    .await;
    // The link is there, so create refuses it as existing and never follows it.
    a.refused(
        "file.create",
        content("ln_dangling_out"),
        Code::AlreadyExists,
    )
    .await;
    // Nor does a directory get made where the link points.
    a.refused(
        "file.create",
        content("ln_dangling_out/x.txt"),
        Code::PermissionDenied,
    )
    .await;
    assert!(!a.outside.join("created-by-attack.txt").exists());
}

#[tokio::test]
async fn patching_through_a_symlink_to_outside_is_refused() {
    let a = Arena::new();
    for path in [
        "ln_secret_abs",
        "ln_secret_rel",
        "ln_dir_rel/outside-hidden.txt",
        "deep/a/b/ln_up/f.txt",
    ] {
        a.refused("file.patch", patch(path), Code::PermissionDenied)
            .await;
    }
}

#[tokio::test]
async fn creating_under_a_symlinked_directory_that_points_outside_is_refused() {
    let a = Arena::new();
    for path in [
        "ln_dir_abs/new.txt",
        "ln_dir_rel/new.txt",
        "ln_dir_abs/newdir/deeper/new.txt",
        "deep/a/b/ln_up/new.txt",
        "ln_dir_rel/nested/new.txt",
    ] {
        a.refused("file.create", content(path), Code::PermissionDenied)
            .await;
    }
}

#[tokio::test]
async fn deleting_a_symlink_that_points_outside_is_refused_and_keeps_both_ends() {
    let a = Arena::new();
    for path in ["ln_secret_abs", "ln_secret_rel", "ln_dir_abs", "ln_dir_rel"] {
        a.refused("file.delete", read(path), Code::PermissionDenied)
            .await;
        assert!(
            a.root.join(path).symlink_metadata().is_ok(),
            "{path} is still there"
        );
    }
}

#[tokio::test]
async fn deleting_a_file_through_a_symlinked_directory_outside_is_refused() {
    let a = Arena::new();
    for path in [
        "ln_dir_abs/outside-hidden.txt",
        "ln_dir_rel/f.txt",
        "deep/a/b/ln_up/nested/outside-deep.txt",
    ] {
        a.refused("file.delete", read(path), Code::PermissionDenied)
            .await;
    }
}

#[tokio::test]
async fn symlink_chains_that_end_outside_are_refused() {
    let a = Arena::new();
    // chain_a -> chain_b -> ln_secret_rel -> ../outside/...; dir_chain -> ln_dir_rel -> ../outside/private
    symlink("chain_b", a.root.join("chain_a")).expect("symlink");
    symlink("ln_secret_rel", a.root.join("chain_b")).expect("symlink");
    symlink("dir/../ln_dir_rel", a.root.join("dir_chain")).expect("symlink");
    a.refused("file.read", read("chain_a"), Code::PermissionDenied)
        .await;
    a.refused("file.write", content("chain_a"), Code::PermissionDenied)
        .await;
    a.refused("file.patch", patch("chain_b"), Code::PermissionDenied)
        .await;
    a.refused("file.delete", read("chain_a/x"), Code::PermissionDenied)
        .await;
    a.refused(
        "file.read",
        read("dir_chain/outside-hidden.txt"),
        Code::PermissionDenied,
    )
    .await;
    a.refused(
        "file.create",
        content("dir_chain/nested/new.txt"),
        Code::PermissionDenied,
    )
    .await;
}

#[tokio::test]
async fn absolute_symlinks_are_refused_even_when_they_point_inside() {
    // The directory handle never follows an absolute target: where it lands
    // depends on the host's filesystem, not the workspace.
    let a = Arena::new();
    symlink(a.root.join("file.txt"), a.root.join("ln_inside_abs")).expect("symlink");
    a.refused("file.read", read("ln_inside_abs"), Code::PermissionDenied)
        .await;
    a.refused(
        "file.write",
        content("ln_inside_abs"),
        Code::PermissionDenied,
    )
    .await;
    assert_eq!(a.read_root("file.txt"), b"inside\n");
}

// ---- loops ----------------------------------------------------------------------

#[tokio::test]
async fn a_symlink_loop_is_an_invalid_path_for_every_tool() {
    let a = Arena::new();
    for path in ["loop_a", "loop_b/x.txt"] {
        a.refused("file.read", read(path), Code::InvalidArgument)
            .await;
        a.refused("file.write", content(path), Code::InvalidArgument)
            .await;
        a.refused("file.patch", patch(path), Code::InvalidArgument)
            .await;
    }
    a.refused(
        "file.create",
        content("loop_a/x.txt"),
        Code::InvalidArgument,
    )
    .await;
    a.refused("file.delete", read("loop_a"), Code::InvalidArgument)
        .await;
}

#[tokio::test]
async fn a_self_loop_is_an_invalid_path_for_every_tool() {
    let a = Arena::new();
    a.refused("file.read", read("self_loop"), Code::InvalidArgument)
        .await;
    a.refused("file.write", content("self_loop"), Code::InvalidArgument)
        .await;
    a.refused("file.patch", patch("self_loop"), Code::InvalidArgument)
        .await;
    a.refused(
        "file.create",
        content("self_loop/x.txt"),
        Code::InvalidArgument,
    )
    .await;
    a.refused("file.delete", read("self_loop"), Code::InvalidArgument)
        .await;
}
