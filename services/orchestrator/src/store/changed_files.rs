//! The files a task's agents changed with file tools, read from its
//! history (the A2A `files-changed` artifact).

use diesel::prelude::*;

use super::schema::task_events;
use super::{Db, Store, StoreError};
use crate::domain::{EventKind, TaskId};

/// The file tools that change a file.
const FILE_CHANGES: [&str; 4] = ["file.create", "file.write", "file.patch", "file.delete"];

/// A file a task changed (see [`Store::changed_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedFile {
    /// In the workspace, as the tool was given it.
    pub path: String,
    /// The tool of its last change.
    pub tool: String,
    pub deleted: bool,
    pub at_ms: i64,
}

impl Store {
    /// The files the task's agents changed with file tools (create, write,
    /// patch, delete) that succeeded, each once with its last change, in the
    /// order they were first changed.
    pub async fn changed_files(&self, task_id: TaskId) -> Result<Vec<ChangedFile>, StoreError> {
        self.with_conn(move |conn| {
            let rows: Vec<(String, i64)> = task_events::table
                .filter(task_events::task_id.eq(task_id.to_string()))
                .filter(task_events::kind.eq(EventKind::ToolExecuted.as_str()))
                .select((task_events::data, task_events::at_ms))
                .order(task_events::sequence.asc())
                .load(conn)
                .db()?;
            let mut files: Vec<ChangedFile> = Vec::new();
            for (data, at_ms) in rows {
                let Ok(data) = serde_json::from_str::<serde_json::Value>(&data) else {
                    continue;
                };
                let tool = data["tool"].as_str().unwrap_or_default();
                if !FILE_CHANGES.contains(&tool) || data["status"] != "ok" {
                    continue;
                }
                let Some(path) = data["input"]["path"].as_str() else {
                    continue;
                };
                let change = ChangedFile {
                    path: path.to_owned(),
                    tool: tool.to_owned(),
                    deleted: tool == "file.delete",
                    at_ms,
                };
                match files.iter_mut().find(|f| f.path == path) {
                    Some(f) => *f = change,
                    None => files.push(change),
                }
            }
            Ok(files)
        })
        .await
    }
}
