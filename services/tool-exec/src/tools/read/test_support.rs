//! A throwaway workspace and tool context for the file tools' unit tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chorus_run_token::RunGrant;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::context::{ToolContext, ToolOutcome};
use crate::sandbox::Sandbox;

/// A temporary workspace root with a context whose sandbox is opened on it.
pub(crate) struct Workspace {
    pub dir: tempfile::TempDir,
    pub ctx: ToolContext,
}

impl Workspace {
    pub fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    pub fn with_limits(limits: Limits) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let sandbox = Sandbox::open(&root).expect("sandbox opens");
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
            ]
            .map(str::to_owned)
            .to_vec(),
            root,
        };
        let ctx = ToolContext {
            sandbox: Arc::new(sandbox),
            grant: Arc::new(grant),
            limits,
            cancel: CancellationToken::new(),
        };
        Self { dir, ctx }
    }

    /// The real path of `rel` under the root, for setting up and checking with std::fs.
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes a file with std::fs, creating its parent directories.
    pub fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(path, content).expect("write fixture");
    }

    /// Reads a file with std::fs.
    pub fn get(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path(rel)).expect("read fixture")
    }

    /// Reads a file with std::fs as text.
    pub fn text(&self, rel: &str) -> String {
        String::from_utf8(self.get(rel)).expect("utf8 fixture")
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).symlink_metadata().is_ok()
    }

    pub fn symlink(&self, target: impl AsRef<Path>, rel: &str) {
        std::os::unix::fs::symlink(target, self.path(rel)).expect("symlink");
    }

    /// Names in the directory `rel`, sorted (temporary files would show up here).
    pub fn names(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// The typed output of a successful outcome.
pub(crate) fn output<T: DeserializeOwned>(outcome: ToolOutcome) -> T {
    serde_json::from_value(outcome.output).expect("output has the catalog type")
}
