//! Argument types of every tool. Their serde shape is the wire shape (snake_case
//! keys, unknown keys refused) and their JSON Schemas are derived from them, so
//! validation and documentation cannot drift apart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_dot() -> String {
    ".".to_owned()
}

/// Reads a text file, returning numbered lines.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRead {
    /// File path, relative to the workspace root (absolute paths inside the root are accepted).
    pub path: String,
    /// Number of lines to skip before the first returned line (0-based).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Maximum number of lines to return (default: all, up to the output limit).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Creates a new file; fails if it already exists. Parent directories are created.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileCreate {
    /// Path of the file to create.
    pub path: String,
    /// Full content of the new file.
    pub content: String,
}

/// Replaces the whole content of an existing file; fails if it does not exist.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWrite {
    /// Path of the existing file to overwrite.
    pub path: String,
    /// New full content of the file.
    pub content: String,
}

/// One literal find/replace edit.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Patch {
    /// Exact text to find; it must occur exactly once in the searched range.
    pub find: String,
    /// Text that replaces it.
    pub replace: String,
    /// Search only from this 1-based line onward.
    #[serde(default, alias = "startLine")]
    pub start_line: Option<u64>,
}

/// Applies literal find/replace patches in order; all apply or none do.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilePatch {
    /// Path of the file to patch.
    pub path: String,
    /// Patches, applied in order; each sees the result of the previous ones.
    pub patches: Vec<Patch>,
}

/// Deletes one file (never a directory).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileDelete {
    /// Path of the file to delete.
    pub path: String,
}

/// Lists a directory: its entries, or with `pattern`/`recursive` every entry below
/// it. Symlinks are listed as symlinks and never followed; `.git` is never listed.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileList {
    /// Directory to list (default: the workspace root).
    #[serde(default = "default_dot")]
    pub path: String,
    /// Glob that files must match, e.g. "*.rs" (matched against the file name) or
    /// "src/**/*.rs" (matched against the path relative to `path`; `*` stays within
    /// one directory, `**` crosses them). Implies recursive and lists regular files only.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Walk subdirectories too, skipping what .gitignore/.ignore files exclude.
    #[serde(default)]
    pub recursive: bool,
    /// Include entries ignored by .gitignore/.ignore files when walking recursively.
    #[serde(default)]
    pub include_ignored: bool,
}

/// Searches file contents with a regular expression (ripgrep's engine and rules):
/// .gitignore/.ignore rules apply, hidden files are searched, `.git`, binary files
/// (with a NUL byte) and symlinks met while walking are not.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSearch {
    /// Regular expression (Rust regex syntax), matched line by line. A pattern
    /// starting with '-' is fine.
    pub pattern: String,
    /// File or directory to search (default: the workspace root). A file named
    /// here is searched even if ignore rules would skip it.
    #[serde(default = "default_dot")]
    pub path: String,
    /// Only search files matching this glob: "*.md" matches file names, "docs/**/*.md"
    /// matches paths relative to `path`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Match case exactly (default true).
    #[serde(default)]
    pub case_sensitive: Option<bool>,
    /// Lines of context to return before and after each match (at most 50).
    #[serde(default)]
    pub context_lines: Option<u32>,
    /// Maximum number of matching lines to return, counted across all files
    /// (default 100; the service caps it).
    #[serde(default)]
    pub max_results: Option<u32>,
    /// Treat the pattern as a literal string, not a regex.
    #[serde(default)]
    pub fixed_strings: bool,
    /// Also search files ignored by .gitignore files.
    #[serde(default)]
    pub include_ignored: bool,
}

/// Runs a shell command with bash in the workspace root.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bash {
    /// The command line, run as `bash -c <command>` in the workspace root.
    pub command: String,
    /// Seconds before the command and everything it started are killed (default 120).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Shows the working tree status.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitStatus {}

/// Shows changes as a unified diff.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitDiff {
    /// Diff the staged changes instead of the unstaged ones.
    #[serde(default)]
    pub staged: bool,
    /// Compare against this revision (e.g. "HEAD~1", "main") instead of the index.
    #[serde(default)]
    pub base: Option<String>,
    /// Limit the diff to these paths.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// Records a commit.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitCommit {
    /// Commit message.
    pub message: String,
    /// Stage these paths before committing.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Stage every change in the working tree (new, modified, deleted) before committing.
    #[serde(default)]
    pub all: bool,
}

/// Pushes the current branch to one of the repository's configured remotes.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitPush {
    /// Name of a configured remote (default "origin").
    #[serde(default)]
    pub remote: Option<String>,
    /// Branch to push (default: the current branch).
    #[serde(default)]
    pub branch: Option<String>,
}

/// Hands part of the work to another agent and waits for its result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    /// Name of the agent to hand off to.
    #[serde(alias = "agentName")]
    pub agent: String,
    /// What the agent should do.
    pub prompt: String,
    /// Seconds to wait for the agent before it is stopped (default 600).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Reads a task.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskGet {
    /// Task id (default: the run's own task).
    #[serde(default, alias = "taskId")]
    pub task_id: Option<String>,
}

/// Lists the workspace's tasks.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskList {
    /// Only tasks with this status (pending, planning, awaiting_input, planned, active,
    /// waiting, completed, failed, canceled).
    #[serde(default)]
    pub status: Option<String>,
}

/// The Bonsai-style stage of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Backlog,
    Research,
    PlanApproval,
    InProgress,
    Verification,
    Done,
}

/// Moves the run's task to another stage.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskUpdateStage {
    /// The new stage.
    pub stage: Stage,
}

/// Adds a comment to the run's task history.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskComment {
    /// The comment.
    pub text: String,
}

/// Lists the tools this run may use, with their arguments.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Help {
    /// Show only this tool.
    #[serde(default)]
    pub tool: Option<String>,
}

/// Outcome of a run, as the agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    Complete,
    Blocked,
    Failed,
}

/// Ends the run with a structured report. Call it exactly once, last.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompletionReport {
    /// complete, blocked (needs someone else first) or failed.
    pub status: ReportStatus,
    /// One or two sentences on what was done.
    pub summary: String,
    /// The result itself: findings, changes made, answers.
    pub output: String,
    /// Why the work is blocked (required in spirit when status is blocked).
    #[serde(default, alias = "blockedReason")]
    pub blocked_reason: Option<String>,
}

/// The planner's verdict on a task: a plan, questions for the user, or an error.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PlannerOutput {
    /// The task is clear: here is the plan.
    Plan {
        /// What the task is about.
        summary: String,
        /// What the result must include.
        requirements: Vec<String>,
        /// How to tell the task is done.
        #[serde(alias = "acceptanceCriteria")]
        acceptance_criteria: Vec<String>,
        /// Ordered steps.
        plan: Vec<String>,
        /// The agent that should execute the plan.
        #[serde(default, alias = "assignedAgent")]
        assigned_agent: Option<String>,
    },
    /// The task is unclear: ask the user.
    Questions {
        /// Questions for the user.
        questions: Vec<String>,
    },
    /// The task cannot be planned.
    Error {
        /// Why.
        error: String,
    },
}

/// Searches the web (native to the Claude Code CLI).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearch {
    /// What to search for.
    pub query: String,
}
