use super::*;

fn sandbox() -> (tempfile::TempDir, Sandbox) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = Sandbox::open(dir.path()).expect("opens");
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
