//! A workspace in a temporary directory and a [`ToolContext`] for it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chorus_run_token::RunGrant;

use crate::config::Limits;
use crate::context::ToolContext;
use crate::sandbox::FileRoot;
use crate::stop::CallStop;

#[derive(Debug)]
pub(crate) struct Workspace {
    /// Holds the directory: the workspace is `<dir>/ws`, so tests can put things
    /// next to it (outside the root) in `<dir>/outside`.
    dir: tempfile::TempDir,
    pub(crate) ctx: ToolContext,
}

impl Workspace {
    pub(crate) fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    pub(crate) fn with_limits(limits: Limits) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).expect("create the workspace");
        std::fs::create_dir_all(dir.path().join("outside")).expect("create outside");
        let sandbox = FileRoot::open(&root).expect("open the sandbox");
        let grant = RunGrant {
            run_id: "run-1".to_owned(),
            task_id: "task-1".to_owned(),
            agent: "tester".to_owned(),
            tools: [
                "file.read",
                "file.create",
                "file.write",
                "file.patch",
                "file.delete",
                "file.list",
                "file.search",
            ]
            .map(str::to_owned)
            .to_vec(),
            root,
            egress: Vec::new(),
            epoch: 0,
        };
        let ctx = ToolContext {
            sandbox: Arc::new(sandbox),
            grant: Arc::new(grant),
            limits,
            processes: chorus_sandbox::Sandbox::refusing("file tools start no process"),
            stop: CallStop::idle(),
            fence: None,
            network_questions: None,
        };
        Self { dir, ctx }
    }

    /// The workspace root.
    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// A directory next to the workspace, outside its root.
    pub(crate) fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    /// Writes a file below the root, creating its parents.
    pub(crate) fn write(&self, rel: impl AsRef<Path>, content: impl AsRef<[u8]>) {
        write_file(&self.root().join(rel), content);
    }

    /// The real path of `rel` under the root, for setting up and checking with std::fs.
    pub(crate) fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root().join(rel)
    }

    /// Reads a file below the root with std::fs.
    pub(crate) fn get(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path(rel)).expect("read fixture")
    }

    /// Reads a file below the root with std::fs, as text.
    pub(crate) fn text(&self, rel: &str) -> String {
        String::from_utf8(self.get(rel)).expect("utf8 fixture")
    }

    /// True when anything (a dangling symlink included) is at `rel`.
    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.path(rel).symlink_metadata().is_ok()
    }

    /// Names in the directory `rel`, sorted (temporary files would show up here).
    pub(crate) fn names(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Creates a directory below the root.
    pub(crate) fn mkdir(&self, rel: impl AsRef<Path>) {
        std::fs::create_dir_all(self.root().join(rel)).expect("create dir");
    }

    /// Creates a symlink at `rel` below the root pointing at `target`.
    pub(crate) fn symlink(&self, target: impl AsRef<Path>, rel: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, self.root().join(rel)).expect("symlink");
    }
}

/// The typed output of a successful outcome.
pub(crate) fn output<T: serde::de::DeserializeOwned>(outcome: crate::context::ToolOutcome) -> T {
    serde_json::from_value(outcome.output).expect("output has the catalog type")
}

/// Writes a file, creating its parents.
pub(crate) fn write_file(path: &Path, content: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parents");
    }
    std::fs::write(path, content).expect("write file");
}
