//! The tests' own git on a workspace's repository: reading no configuration
//! but the repository's, whoever owns it (the test user, as agents act).

use std::path::Path;
use std::process::Command;

/// Runs git in `root`; its stdout, trimmed. Fails the test when git does.
pub fn git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(root)
        .args(["-c", "safe.directory=*"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Makes `root` a repository on branch main holding `files` (path, content)
/// in one commit by Ana, and gives it to the test user.
pub fn repository(root: &Path, files: &[(&str, &str)]) {
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["config", "user.name", "Ana"]);
    git(root, &["config", "user.email", "ana@example.com"]);
    for (path, content) in files {
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("directories");
        }
        std::fs::write(path, content).expect("a file");
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "first"]);
    chorus_sandbox::testing::give_to_test_user(root);
}
