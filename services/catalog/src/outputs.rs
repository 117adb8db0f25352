//! Output types of every tool. Tool-exec builds its answers from these types and the
//! catalog derives the output JSON Schemas from them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::args::{CompletionReport, ReportStatus, Stage};

/// Numbered lines of a text file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct FileRead {
    /// Path relative to the workspace root.
    pub path: String,
    /// The lines, each prefixed with its 1-based number right-aligned to 6 columns and a tab.
    pub content: String,
    /// Number of lines in the whole file.
    pub total_lines: u64,
    /// Number of lines returned.
    pub lines_returned: u64,
    /// True when lines after the returned ones exist.
    pub truncated: bool,
    /// The `offset` that reads on from where this answer stopped, when truncated.
    pub next_offset: Option<u64>,
}

/// Result of file.create and file.write.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct FileWritten {
    /// Path relative to the workspace root.
    pub path: String,
    /// UTF-8 bytes written.
    pub bytes_written: u64,
}

/// Result of file.patch.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct FilePatched {
    /// Path relative to the workspace root.
    pub path: String,
    /// Number of patches applied (all of them).
    pub patches_applied: u64,
    /// Size of the file after patching.
    pub bytes_written: u64,
}

/// Result of file.delete.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct FileDeleted {
    /// Path relative to the workspace root.
    pub path: String,
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ListEntry {
    /// Path relative to the workspace root.
    pub path: String,
    pub kind: EntryKind,
    /// Size in bytes (of the link itself for symlinks).
    pub size: u64,
    /// Last modification, milliseconds since the Unix epoch.
    pub modified_ms: i64,
}

/// Result of file.list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct FileList {
    /// The listed directory, relative to the workspace root.
    pub path: String,
    /// Entries sorted by path, component by component (a directory's entries follow it).
    pub entries: Vec<ListEntry>,
    /// True when the entry limit cut the listing short.
    pub truncated: bool,
}

/// A line shown around a match.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ContextLine {
    pub line: u64,
    pub content: String,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct SearchMatch {
    /// Path relative to the workspace root.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line, without its line terminator (invalid UTF-8 shown as U+FFFD; lines
    /// over 2000 bytes are cut and end in "…").
    pub content: String,
    /// Context lines before the match (when context_lines > 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<ContextLine>,
    /// Context lines after the match (when context_lines > 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<ContextLine>,
}

/// Result of file.search.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct FileSearch {
    /// Matches sorted by path, then line.
    pub matches: Vec<SearchMatch>,
    /// True when more matches existed than max_results, or than fit in the output
    /// limit: narrow the search (path, glob, pattern) to see the rest.
    pub truncated: bool,
}

/// Result of bash.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Bash {
    pub stdout: String,
    pub stderr: String,
    /// Exit code, absent when the command was killed by a signal.
    pub exit_code: Option<i32>,
    /// Signal that killed the command, if any.
    pub signal: Option<i32>,
    /// True when the command ran past its timeout and was killed.
    pub timed_out: bool,
    /// True when stdout or stderr was cut at the output limit.
    pub truncated: bool,
}

/// One changed path in git.status.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct GitStatusEntry {
    /// Path relative to the workspace root.
    pub path: String,
    /// Status letter in the index (git's porcelain X column; ' ' unchanged, '?' untracked).
    pub index: String,
    /// Status letter in the working tree (git's porcelain Y column).
    pub worktree: String,
    /// For renames and copies, the original path.
    pub orig_path: Option<String>,
}

/// Result of git.status.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct GitStatus {
    /// Current branch, absent on a detached HEAD.
    pub branch: Option<String>,
    /// Upstream branch, if one is set.
    pub upstream: Option<String>,
    pub ahead: u64,
    pub behind: u64,
    /// True when nothing is changed or untracked.
    pub clean: bool,
    pub entries: Vec<GitStatusEntry>,
}

/// Result of git.diff.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct GitDiff {
    /// Unified diff.
    pub diff: String,
    /// True when the diff was cut at the output limit.
    pub truncated: bool,
}

/// Result of git.commit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct GitCommit {
    /// Full id of the new commit.
    pub commit: String,
    /// Branch the commit is on, absent on a detached HEAD.
    pub branch: Option<String>,
    /// git's own summary of the commit.
    pub summary: String,
}

/// Result of git.push.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct GitPush {
    pub remote: String,
    pub branch: String,
    /// git's report of what was pushed.
    pub output: String,
}

/// Result of handoff: the other agent's final output and report.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Handoff {
    pub agent: String,
    pub run_id: String,
    /// The agent's final text.
    pub output: String,
    pub completion_report: Option<CompletionReport>,
    /// Tokens and cost of the agent's run.
    pub usage: HandoffUsage,
}

/// Tokens and cost of a handoff's run.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct HandoffUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// A task as agents see it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Task {
    pub id: String,
    pub description: String,
    pub status: String,
    pub stage: Stage,
    pub summary: Option<String>,
    pub requirements: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub plan: Vec<String>,
    pub assigned_agent: Option<String>,
    pub current_agent: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// Result of task.get.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct TaskGet {
    pub task: Task,
}

/// Result of task.list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct TaskList {
    pub tasks: Vec<Task>,
}

/// Result of task.update_stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct TaskStage {
    pub task_id: String,
    pub stage: Stage,
}

/// Result of task.comment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct TaskComment {
    pub task_id: String,
    /// Sequence number of the history event that holds the comment.
    pub sequence: u64,
}

/// One argument in a help answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct HelpArgument {
    pub name: String,
    /// JSON type, e.g. "string", "integer", "boolean", "array", "object".
    #[serde(rename = "type")]
    pub kind: String,
    pub required: bool,
    pub description: String,
}

/// One tool in a help answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct HelpTool {
    pub name: String,
    pub description: String,
    pub arguments: Vec<HelpArgument>,
    /// Example invocation through chorus-tools.
    pub example: String,
}

/// Result of help.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Help {
    pub tools: Vec<HelpTool>,
}

/// Result of completion-report.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct CompletionReportAccepted {
    pub status: ReportStatus,
}

/// Result of planner-output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct PlannerOutputAccepted {
    /// plan, questions or error.
    #[serde(rename = "type")]
    pub kind: String,
}

/// Result of web.search (produced by the Claude Code CLI itself).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct WebSearch {
    pub results: Vec<String>,
}
