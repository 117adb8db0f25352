//! The one tool catalog of Chorus.
//!
//! Every tool's name, description, argument and output JSON Schemas, category and
//! executing service live here, and everything else derives from it: execution-time
//! argument validation (the argument types in [`args`]), the `help` answer and
//! ListTools, agent system prompts, OpenAI `tools` definitions and CLI flags.
#![forbid(unsafe_code)]

pub mod args;
mod help;
pub mod mcp_rules;
pub mod outputs;
mod profiles;

use std::collections::BTreeSet;
use std::sync::LazyLock;

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde_json::Value;

pub use help::{help_for, help_tool};
pub use profiles::{PROFILES, Profile};

/// Which family a tool belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    File,
    Dev,
    Git,
    Orchestration,
    Native,
}

/// Which part of the system executes a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Executor {
    /// chorus-tool-exec, inside the workspace sandbox.
    ToolExec,
    /// chorus-orchestrator (tasks, handoff, reporting).
    Orchestrator,
    /// The agent CLI itself (web.search is Claude Code's WebSearch).
    AgentCli,
}

/// One tool of the catalog.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub category: Category,
    pub executor: Executor,
    /// Granted to every run whatever its allow-list.
    pub always_granted: bool,
    input: fn(&mut SchemaGenerator) -> Schema,
    output: fn(&mut SchemaGenerator) -> Schema,
}

impl ToolSpec {
    /// JSON Schema (draft 2020-12) of the tool's arguments, self-contained.
    pub fn input_schema(&self) -> &'static Value {
        &self.derived().input
    }

    /// JSON Schema (draft 2020-12) of the tool's output, self-contained.
    pub fn output_schema(&self) -> &'static Value {
        &self.derived().output
    }

    /// What `help` says about the tool.
    pub fn help(&self) -> &'static outputs::HelpTool {
        &self.derived().help
    }

    fn derived(&self) -> &'static Derived {
        let index = TOOLS
            .iter()
            .position(|t| t.name == self.name)
            .expect("every ToolSpec is one of TOOLS");
        &DERIVED[index]
    }
}

/// Schemas and help derived once per process from the types, in TOOLS order.
struct Derived {
    input: Value,
    output: Value,
    help: outputs::HelpTool,
}

static DERIVED: LazyLock<Vec<Derived>> = LazyLock::new(|| {
    TOOLS
        .iter()
        .map(|spec| {
            let input = object_root(schema_value(spec.input));
            let help = help::describe(spec, &input);
            Derived {
                output: schema_value(spec.output),
                input,
                help,
            }
        })
        .collect()
});

fn schema_value(make: fn(&mut SchemaGenerator) -> Schema) -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let schema = make(&mut generator);
    let mut value = schema.to_value();
    // Inline-able definitions are kept under $defs so every schema stands alone.
    let defs = generator.take_definitions(true);
    if !defs.is_empty()
        && let Some(obj) = value.as_object_mut()
    {
        obj.insert("$defs".to_owned(), Value::Object(defs));
    }
    value
}

/// An argument schema with `"type": "object"` at its root, as MCP clients and
/// function-calling APIs require: a tagged choice (planner-output's `oneOf`)
/// gets it beside its alternatives, and its tag as the one root property
/// every alternative requires. (Claude Code drops every tool of a server
/// when one has no root type.)
fn object_root(mut schema: Value) -> Value {
    let Some(object) = schema.as_object_mut() else {
        return schema;
    };
    if object.get("type").is_none() {
        object.insert("type".to_owned(), Value::String("object".to_owned()));
    }
    let tags = object
        .get("oneOf")
        .and_then(Value::as_array)
        .map(|alternatives| mcp_rules::tag_values(alternatives, "type"));
    if let Some(Some(values)) = tags {
        object
            .entry("properties")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
            .map(|p| p.insert("type".to_owned(), serde_json::json!({"enum": values})));
        object.insert("required".to_owned(), serde_json::json!(["type"]));
    }
    schema
}

fn root<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.root_schema_for::<T>()
}

macro_rules! tool {
    ($name:literal, $category:ident, $executor:ident, $granted:literal, $args:ty, $out:ty, $description:literal) => {
        ToolSpec {
            name: $name,
            description: $description,
            category: Category::$category,
            executor: Executor::$executor,
            always_granted: $granted,
            input: root::<$args>,
            output: root::<$out>,
        }
    };
}

use args as a;
use outputs as o;

/// Every tool, in the order they are documented.
pub static TOOLS: &[ToolSpec] = &[
    tool!(
        "file.read",
        File,
        ToolExec,
        false,
        a::FileRead,
        o::FileRead,
        "Read a text file as numbered lines; page through long files with offset and limit."
    ),
    tool!(
        "file.create",
        File,
        ToolExec,
        false,
        a::FileCreate,
        o::FileWritten,
        "Create a new file with the given content (parent directories are created); fails if the file exists."
    ),
    tool!(
        "file.write",
        File,
        ToolExec,
        false,
        a::FileWrite,
        o::FileWritten,
        "Replace the whole content of an existing file; fails if the file does not exist."
    ),
    tool!(
        "file.patch",
        File,
        ToolExec,
        false,
        a::FilePatch,
        o::FilePatched,
        "Edit a file with literal find/replace patches applied in order; each find must match exactly once; all patches apply or none."
    ),
    tool!(
        "file.delete",
        File,
        ToolExec,
        false,
        a::FileDelete,
        o::FileDeleted,
        "Delete a file (directories are refused)."
    ),
    tool!(
        "file.list",
        File,
        ToolExec,
        false,
        a::FileList,
        o::FileList,
        "List a directory with size, modification time and kind of each entry; recursive with a glob pattern."
    ),
    tool!(
        "file.search",
        File,
        ToolExec,
        false,
        a::FileSearch,
        o::FileSearch,
        "Search file contents with a regular expression, respecting .gitignore; returns matching lines with optional context."
    ),
    tool!(
        "bash",
        Dev,
        ToolExec,
        false,
        a::Bash,
        o::Bash,
        "Run a bash command in the workspace root with a timeout; returns stdout, stderr and the exit code."
    ),
    tool!(
        "git.status",
        Git,
        ToolExec,
        false,
        a::GitStatus,
        o::GitStatus,
        "Show the branch and the changed, staged and untracked files."
    ),
    tool!(
        "git.diff",
        Git,
        ToolExec,
        false,
        a::GitDiff,
        o::GitDiff,
        "Show unstaged, staged or revision-relative changes as a unified diff."
    ),
    tool!(
        "git.commit",
        Git,
        ToolExec,
        false,
        a::GitCommit,
        o::GitCommit,
        "Commit staged changes, optionally staging given paths or all changes first."
    ),
    tool!(
        "git.push",
        Git,
        ToolExec,
        false,
        a::GitPush,
        o::GitPush,
        "Push the current branch to one of the repository's configured remotes."
    ),
    tool!(
        "handoff",
        Orchestration,
        Orchestrator,
        false,
        a::Handoff,
        o::Handoff,
        "Hand part of the work to another agent and wait for its output and completion report."
    ),
    tool!(
        "task.get",
        Orchestration,
        Orchestrator,
        false,
        a::TaskGet,
        o::TaskGet,
        "Read a task of this workspace (default: the current task)."
    ),
    tool!(
        "task.list",
        Orchestration,
        Orchestrator,
        false,
        a::TaskList,
        o::TaskList,
        "List the tasks of this workspace, optionally by status."
    ),
    tool!(
        "task.update_stage",
        Orchestration,
        Orchestrator,
        false,
        a::TaskUpdateStage,
        o::TaskStage,
        "Move the current task to another stage (backlog, research, plan_approval, in_progress, verification, done)."
    ),
    tool!(
        "task.comment",
        Orchestration,
        Orchestrator,
        false,
        a::TaskComment,
        o::TaskComment,
        "Add a comment to the current task's history."
    ),
    tool!(
        "help",
        Orchestration,
        ToolExec,
        true,
        a::Help,
        o::Help,
        "List the tools this run may use, with their arguments."
    ),
    tool!(
        "completion-report",
        Orchestration,
        Orchestrator,
        true,
        a::CompletionReport,
        o::CompletionReportAccepted,
        "Finish the run with a status (complete, blocked, failed), a summary and the output. Call it exactly once, last."
    ),
    // Granted to Chorus's own planner only (the orchestrator grants it).
    tool!(
        "planner-output",
        Orchestration,
        Orchestrator,
        false,
        a::PlannerOutput,
        o::PlannerOutputAccepted,
        "Submit the planner's verdict: a plan, questions for the user, or an error. Call it exactly once."
    ),
    tool!(
        "web.search",
        Native,
        AgentCli,
        false,
        a::WebSearch,
        o::WebSearch,
        "Search the web. Native to the agent CLI: use it directly, not through chorus-tools."
    ),
];

/// A permission an allow-list can hold that is not a tool: it changes what
/// tools may do.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub name: &'static str,
    pub description: &'static str,
}

/// The name of the grant that lets bash and git reach the network.
pub const NETWORK: &str = "network";

/// Every grant.
pub static GRANTS: &[Grant] = &[Grant {
    name: NETWORK,
    description: "bash and git may reach the destinations in the agent's egress list (host:port rules, through the sandbox's egress proxy; never the host's loopback, link-local or metadata addresses); with an empty egress list the grant reaches nothing outside; without the grant they run with no network at all, and git.push is refused",
}];

/// Looks a grant up by name.
pub fn get_grant(name: &str) -> Option<&'static Grant> {
    GRANTS.iter().find(|g| g.name == name)
}

/// Looks a tool up by its exact catalog name.
pub fn get(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The name a tool goes by where names are `[a-zA-Z0-9_-]` only (OpenAI
/// functions, MCP tools as Claude Code names them): the catalog's dots become
/// underscores (`file.read` → `file_read`).
pub fn wire_name(name: &str) -> String {
    name.replace('.', "_")
}

/// The name the tools' MCP server goes by in MCP client configurations
/// (`mcp__chorus__file_read` in Claude Code).
pub const MCP_SERVER: &str = "chorus";

/// Looks a tool up by its [`wire_name`] or its catalog name.
pub fn by_wire_name(name: &str) -> Option<&'static ToolSpec> {
    TOOLS
        .iter()
        .find(|t| t.name == name || wire_name(t.name) == name)
}

/// A name in an allow-list that is neither a tool nor a `@profile`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowListError {
    #[error("unknown tool '{0}'; known tools: {known}; grants: {grants}", known = known_tools(), grants = known_grants())]
    UnknownTool(String),
    #[error("unknown profile '@{0}'; known profiles: {known}", known = known_profiles())]
    UnknownProfile(String),
}

fn known_tools() -> String {
    TOOLS.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
}

fn known_grants() -> String {
    GRANTS.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
}

fn known_profiles() -> String {
    PROFILES
        .iter()
        .map(|p| format!("@{}", p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Expands an allow-list (tool names, grants such as `network`, and `@profile`
/// references) into the set of names it grants, always-granted tools included.
/// Unknown names are errors.
pub fn expand_allow_list<S: AsRef<str>>(
    entries: &[S],
) -> Result<BTreeSet<&'static str>, AllowListError> {
    let mut granted: BTreeSet<&'static str> = TOOLS
        .iter()
        .filter(|t| t.always_granted)
        .map(|t| t.name)
        .collect();
    for entry in entries {
        let entry = entry.as_ref().trim();
        if let Some(profile) = entry.strip_prefix('@') {
            let profile = profiles::get(profile)
                .ok_or_else(|| AllowListError::UnknownProfile(profile.to_owned()))?;
            granted.extend(profile.tools.iter().copied());
        } else if let Some(grant) = get_grant(entry) {
            granted.insert(grant.name);
        } else {
            let tool = get(entry).ok_or_else(|| AllowListError::UnknownTool(entry.to_owned()))?;
            granted.insert(tool.name);
        }
    }
    Ok(granted)
}

/// The catalog tools an allow-list names, in the list's order and without
/// repeats: `@profile` references expanded, names the catalog does not know
/// dropped. For mapping an already-validated list (CLI flags, prompts);
/// validation is [`expand_allow_list`].
pub fn named_tools<S: AsRef<str>>(entries: &[S]) -> Vec<&'static ToolSpec> {
    let mut named: Vec<&'static ToolSpec> = Vec::new();
    for entry in entries {
        let entry = entry.as_ref().trim();
        let names = match entry.strip_prefix('@') {
            Some(profile) => profiles::get(profile)
                .map(|p| p.tools.to_vec())
                .unwrap_or_default(),
            None => vec![entry],
        };
        for spec in names.into_iter().filter_map(get) {
            if !named.iter().any(|n| n.name == spec.name) {
                named.push(spec);
            }
        }
    }
    named
}

/// The names of the tools a run holding `tools` may call: the always-granted
/// ones and those it names, in catalog order.
pub fn granted_names<S: AsRef<str>>(tools: &[S]) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| t.always_granted || tools.iter().any(|g| g.as_ref() == t.name))
        .map(|t| t.name)
        .collect()
}

#[cfg(test)]
mod tests;
