//! What the seccomp and run-cgroup tests share: a sandbox with the built
//! launcher, a workspace owned by the user sandboxed programs run as, a
//! process spec, and running one to its end.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::ExitStatus;

use chorus_sandbox::testing::{TEST_UID, give_to_test_user, running_as_root};
use chorus_sandbox::{
    Identity, Network, ProcessSpec, Sandbox, SandboxConfig, SandboxedChild, Tier,
};
use tokio::io::AsyncReadExt;

/// Every test named becomes `namespaces::<name>` and `landlock::<name>`: the
/// test function takes the tier and runs in each.
#[macro_export]
macro_rules! in_both_tiers {
    ($($name:ident),* $(,)?) => {
        mod namespaces {
            $(#[tokio::test]
            async fn $name() {
                super::$name(chorus_sandbox::Tier::Namespaces).await
            })*
        }
        mod landlock {
            $(#[tokio::test]
            async fn $name() {
                super::$name(chorus_sandbox::Tier::Landlock).await
            })*
        }
    };
}

/// An enforced sandbox of `tier` with this build's launcher.
pub async fn sandbox_in(tier: Tier) -> Sandbox {
    let sandbox = sandbox_with(SandboxConfig {
        tier: Some(tier),
        ..SandboxConfig::default()
    })
    .await;
    assert_eq!(sandbox.tier(), Some(tier), "{:?}", sandbox.status());
    sandbox
}

/// An enforced sandbox with this build's launcher and `config` otherwise.
pub async fn sandbox_with(config: SandboxConfig) -> Sandbox {
    let sandbox = Sandbox::start(SandboxConfig {
        launcher: Some(env!("CARGO_BIN_EXE_chorus-sandbox").into()),
        ..config
    })
    .await;
    assert_eq!(sandbox.status().state, "enforced", "{:?}", sandbox.status());
    sandbox
}

pub async fn sandbox() -> Sandbox {
    sandbox_with(SandboxConfig::default()).await
}

/// A workspace in a temporary directory, owned by the test user.
pub struct Workspace {
    _top: tempfile::TempDir,
    pub root: PathBuf,
}

impl Workspace {
    /// A workspace at `root` (which the caller keeps).
    pub fn at(root: PathBuf) -> Self {
        Self {
            _top: tempfile::tempdir().expect("tempdir"),
            root,
        }
    }
}

pub fn workspace() -> Workspace {
    let top = tempfile::tempdir().expect("tempdir");
    let root = top.path().join("ws");
    std::fs::create_dir(&root).expect("ws");
    give_to_test_user(&root);
    Workspace {
        root: root.canonicalize().expect("canonical"),
        _top: top,
    }
}

/// The identity sandboxed test programs run as.
pub fn identity() -> Identity {
    if running_as_root() {
        Identity::User {
            uid: TEST_UID,
            gid: TEST_UID,
        }
    } else {
        Identity::Service
    }
}

/// `bash -c <script>` in the workspace, no network, no run.
pub fn bash(ws: &Workspace, script: &str) -> ProcessSpec {
    ProcessSpec {
        program: "/bin/bash".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), "/tmp".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ],
        cwd: ws.root.clone(),
        read_write: vec![ws.root.clone()],
        read_only: Vec::new(),
        network: Network::None,
        identity: identity(),
        address_space_limit: false,
        run: None,
        covers: Vec::new(),
        fence: None,
        network_questions: None,
    }
}

/// How a sandboxed program ended and what it wrote.
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

pub async fn run(sandbox: &Sandbox, spec: &ProcessSpec) -> Ran {
    let mut child = sandbox.spawn(spec).expect("spawned");
    let (stdout, stderr) = read_both(&mut child).await;
    let status = child.wait().await.expect("waited");
    Ran {
        status,
        stdout,
        stderr,
    }
}

pub async fn read_both(child: &mut SandboxedChild) -> (String, String) {
    let mut out = child.take_stdout().expect("stdout");
    let mut err = child.take_stderr().expect("stderr");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let (a, b) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut stderr)
    );
    a.expect("read stdout");
    b.expect("read stderr");
    (stdout, stderr)
}

/// `key=value` lines of `text`, in order.
pub fn answers(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The value of `key` among `answers`.
pub fn answer<'a>(answers: &'a [(String, String)], key: &str) -> Option<&'a str> {
    answers
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Runs this test binary again as nobody (for a root run), all its tests but
/// those whose names contain `skip` (the one calling this), in the tier each
/// test names, and asserts they pass. As nobody, or not root: nothing.
pub fn again_as_nobody(skip: &str) {
    if !running_as_root() || std::env::var_os("CHORUS_SANDBOX_TEST_UNPRIVILEGED").is_some() {
        return;
    }
    chorus_sandbox::testing::again_in(
        chorus_sandbox::testing::Configuration {
            name: "non-root service",
            as_nobody: true,
            tier: "",
        },
        skip,
    );
}
