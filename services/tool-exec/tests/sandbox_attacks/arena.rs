//! The arena every attack runs in, and its snapshot of the outside world.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use chorus_run_token::RunGrant;
use chorus_tool_exec::context::ToolOutcome;
use chorus_tool_exec::{Limits, ToolError, ToolRunner};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tonic::Code;

pub(crate) const FILE_TOOLS: [&str; 7] = [
    "file.read",
    "file.create",
    "file.write",
    "file.patch",
    "file.delete",
    "file.list",
    "file.search",
];

/// Text only files outside the root contain; it must never come back.
pub(crate) const SECRET: &str = "TOPSECRET";
/// Prefix of every name outside the root; no listing may show it.
pub(crate) const OUTSIDE_NAME: &str = "outside-";

/// What a path is, without following symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    File(Vec<u8>),
    Dir,
    Link(PathBuf),
    Other,
}

pub(crate) type Snapshot = BTreeMap<PathBuf, Node>;

pub(crate) struct Arena {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) outside: PathBuf,
    pub(crate) stash: PathBuf,
    pub(crate) runner: ToolRunner,
}

impl Arena {
    pub(crate) fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    pub(crate) fn with_limits(limits: Limits) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path().canonicalize().expect("canonical tempdir");
        let root = base.join("root");
        let outside = base.join("outside");
        let stash = base.join("stash");
        for dir in [&root, &stash, &outside.join("private/nested")] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        let put = |path: PathBuf, content: &str| std::fs::write(path, content).expect("write");
        put(
            outside.join("outside-secret.txt"),
            "TOPSECRET outside file\n",
        );
        put(
            outside.join("private/outside-hidden.txt"),
            "TOPSECRET hidden\n",
        );
        put(outside.join("private/f.txt"), "TOPSECRET private f\n");
        put(
            outside.join("private/nested/outside-deep.txt"),
            "TOPSECRET deep\n",
        );

        std::fs::create_dir_all(root.join("dir")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git/hooks")).expect("mkdir");
        std::fs::create_dir_all(root.join("deep/a/b")).expect("mkdir");
        put(root.join("file.txt"), "inside\n");
        put(root.join("dir/inner.txt"), "inner\n");
        put(root.join(".git/config"), "[core]\n");
        put(root.join(".git/HEAD"), "ref: refs/heads/main\n");
        std::fs::write(root.join(OsStr::from_bytes(b"bad\xff.txt")), "latin\n").expect("write");

        let link = |target: &Path, name: &str| symlink(target, root.join(name)).expect("symlink");
        link(&outside.join("outside-secret.txt"), "ln_secret_abs");
        link(Path::new("../outside/outside-secret.txt"), "ln_secret_rel");
        link(&outside.join("private"), "ln_dir_abs");
        link(Path::new("../outside/private"), "ln_dir_rel");
        link(Path::new("../../../../outside/private"), "deep/a/b/ln_up");
        link(&outside.join("created-by-attack.txt"), "ln_dangling_out");
        link(Path::new(".git"), "ln_git");
        link(Path::new("loop_b"), "loop_a");
        link(Path::new("loop_a"), "loop_b");
        link(Path::new("self_loop"), "self_loop");

        Self {
            tmp,
            root,
            outside,
            stash,
            runner: ToolRunner::new(
                limits,
                chorus_sandbox::Sandbox::refusing("file-tool attacks start no process"),
                CancellationToken::new(),
            ),
        }
    }

    pub(crate) fn grant(&self) -> RunGrant {
        RunGrant {
            run_id: "run-attack".to_owned(),
            task_id: "task-attack".to_owned(),
            agent: "attacker".to_owned(),
            tools: FILE_TOOLS.map(str::to_owned).to_vec(),
            root: self.root.clone(),
            egress: Vec::new(),
            epoch: 0,
        }
    }

    pub(crate) fn abs(&self, rel: &str) -> String {
        self.tmp
            .path()
            .canonicalize()
            .expect("canonical")
            .join(rel)
            .to_str()
            .expect("utf8 temp path")
            .to_owned()
    }

    pub(crate) async fn call(&self, tool: &str, args: Value) -> Result<ToolOutcome, ToolError> {
        self.runner.execute(self.grant(), tool, args).await
    }

    /// Everything next to the root (the root itself and the race's stash excluded).
    pub(crate) fn outside_snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::new();
        let base = self.root.parent().expect("root has a parent");
        walk(base, base, &[&self.root, &self.stash], &mut snap);
        snap
    }

    /// One attack: `tool(args)` must fail with `code`, leave everything outside the
    /// root as it was, and not show any outside content in its message.
    pub(crate) async fn refused(&self, tool: &str, args: Value, code: Code) -> ToolError {
        let before = self.outside_snapshot();
        let result = self.call(tool, args.clone()).await;
        let after = self.outside_snapshot();
        assert_eq!(before, after, "{tool} {args}: the outside tree changed");
        let err = match result {
            Ok(outcome) => panic!("{tool} {args}: expected {code:?}, got {:?}", outcome.output),
            Err(err) => err,
        };
        assert_eq!(err.code(), code, "{tool} {args}: {err}");
        assert!(
            !err.to_string().contains(SECRET),
            "{tool} {args}: the message shows outside content: {err}"
        );
        err
    }

    /// A file.list or file.search attack: refused with PermissionDenied or
    /// InvalidArgument, or, for a call that may succeed, an answer that shows no
    /// outside name or content. Nothing outside may change either way.
    pub(crate) async fn list_or_search(&self, tool: &str, args: Value, may_succeed: bool) {
        let before = self.outside_snapshot();
        let result = self.call(tool, args.clone()).await;
        assert_eq!(
            before,
            self.outside_snapshot(),
            "{tool} {args}: the outside tree changed"
        );
        match result {
            Err(err) => {
                assert!(
                    matches!(err.code(), Code::PermissionDenied | Code::InvalidArgument),
                    "{tool} {args}: {err}"
                );
                assert!(!err.to_string().contains(SECRET), "{tool} {args}: {err}");
            }
            Ok(outcome) => {
                assert!(
                    may_succeed,
                    "{tool} {args}: expected a refusal, got {:?}",
                    outcome.output
                );
                let shown = outcome.output.to_string();
                assert!(
                    !shown.contains(SECRET),
                    "{tool} {args}: leaks content: {shown}"
                );
                assert!(
                    !shown.contains(OUTSIDE_NAME),
                    "{tool} {args}: leaks names: {shown}"
                );
            }
        }
    }

    pub(crate) fn read_root(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root.join(rel)).expect("read inside")
    }
}

pub(crate) fn walk(base: &Path, dir: &Path, skip: &[&Path], snap: &mut Snapshot) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if skip.contains(&path.as_path()) {
            continue;
        }
        let meta = path.symlink_metadata().expect("lstat");
        let rel = path.strip_prefix(base).expect("under base").to_path_buf();
        let node = if meta.file_type().is_symlink() {
            Node::Link(std::fs::read_link(&path).expect("readlink"))
        } else if meta.is_dir() {
            walk(base, &path, skip, snap);
            Node::Dir
        } else if meta.is_file() {
            Node::File(std::fs::read(&path).expect("read"))
        } else {
            Node::Other
        };
        snap.insert(rel, node);
    }
}

pub(crate) fn read(path: &str) -> Value {
    json!({ "path": path })
}

pub(crate) fn content(path: &str) -> Value {
    json!({ "path": path, "content": "pwned\n" })
}

pub(crate) fn patch(path: &str) -> Value {
    json!({ "path": path, "patches": [{ "find": "TOPSECRET", "replace": "pwned" }] })
}
