//! The system prompt of every run: the agent's instructions, then — for
//! user-defined agents — a compact section on exactly the tools it may use
//! (generated from the catalog), then how to finish: the completion report for
//! user-defined agents, the planner output for internal ones.

use std::fmt::Write as _;

use chorus_catalog::{Executor, help_tool};

use crate::domain::AgentKind;

/// Tools every run has that get their own instruction instead of a listing.
const NOT_LISTED: [&str; 3] = ["completion-report", "planner-output", "help"];

/// How every CLI agent passes JSON to chorus-tools (anything else on the
/// command line is refused by the CLI's permission rules).
pub const QUOTING_INSTRUCTION: &str = "\
Run chorus-tools with exactly one argument, the JSON in single quotes, and nothing else on the command line: no redirection, pipe, second command or variable (those are refused). Inside the JSON, write an apostrophe as \\u0027 and a newline as \\n.";

/// How a user-defined agent must finish.
pub const COMPLETION_REPORT_INSTRUCTION: &str = "\
## Finishing

When your work is done, or you cannot go on, report it exactly once, as your last action:
chorus-tools '{\"tool\":\"completion-report\",\"status\":\"complete\",\"summary\":\"<one or two sentences>\",\"output\":\"<the result>\"}'
status is complete, blocked (say why in blocked_reason) or failed.";

/// How the internal planner must finish.
pub const PLANNER_OUTPUT_INSTRUCTION: &str = "\
## Finishing

Submit your verdict exactly once with planner-output, through Bash:
a plan: chorus-tools '{\"tool\":\"planner-output\",\"type\":\"plan\",\"summary\":\"...\",\"requirements\":[\"...\"],\"acceptance_criteria\":[\"...\"],\"plan\":[\"...\"],\"assigned_agent\":\"<an agent of this workspace>\"}'
or questions for the user: chorus-tools '{\"tool\":\"planner-output\",\"type\":\"questions\",\"questions\":[\"...\"]}'
or, if the task cannot be planned: chorus-tools '{\"tool\":\"planner-output\",\"type\":\"error\",\"error\":\"...\"}'";

/// How a user-defined API agent must finish.
pub const COMPLETION_REPORT_FUNCTION_INSTRUCTION: &str = "\
## Finishing

When your work is done, or you cannot go on, call the completion-report tool exactly once, as your last action, with status complete, blocked (say why in blocked_reason) or failed, a one- or two-sentence summary, and the result as output.";

/// How the internal planner must finish when it runs through an API.
pub const PLANNER_OUTPUT_FUNCTION_INSTRUCTION: &str = "\
## Finishing

Call the planner-output tool exactly once with your verdict: type plan (summary, requirements, acceptance_criteria, plan, assigned_agent), type questions (questions for the user), or type error (why the task cannot be planned).";

/// How the agent calls its tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation<'a> {
    /// Through its CLI's Bash tool, running chorus-tools at this path (the path
    /// the CLI's permission rule allows).
    Cli(&'a str),
    /// As native tools of the model — a chat-completions API's functions, a
    /// CLI's MCP tools: the model is given the tools with their schemas, so the
    /// prompt only says how to finish.
    Functions,
}

/// The whole system prompt of a run.
pub fn system_prompt(
    kind: AgentKind,
    instructions: &str,
    allowed_tools: &[String],
    how: Invocation<'_>,
) -> String {
    match how {
        Invocation::Cli(chorus_tools) => {
            let prompt = cli_prompt(kind, instructions, allowed_tools);
            if chorus_tools == "chorus-tools" {
                prompt
            } else {
                prompt.replace("chorus-tools '", &format!("{chorus_tools} '"))
            }
        }
        Invocation::Functions => {
            let finishing = match kind {
                AgentKind::UserDefined => COMPLETION_REPORT_FUNCTION_INSTRUCTION,
                AgentKind::Internal => PLANNER_OUTPUT_FUNCTION_INSTRUCTION,
            };
            format!("{}\n\n{finishing}", instructions.trim())
        }
    }
}

fn cli_prompt(kind: AgentKind, instructions: &str, allowed_tools: &[String]) -> String {
    let mut prompt = instructions.trim().to_owned();
    match kind {
        AgentKind::UserDefined => {
            let tools = tool_context(allowed_tools);
            if !tools.is_empty() {
                prompt.push_str("\n\n");
                prompt.push_str(&tools);
            }
            prompt.push_str("\n\n");
            prompt.push_str(COMPLETION_REPORT_INSTRUCTION);
        }
        AgentKind::Internal => {
            prompt.push_str("\n\n");
            prompt.push_str(PLANNER_OUTPUT_INSTRUCTION);
        }
    }
    prompt.push('\n');
    prompt.push_str(QUOTING_INSTRUCTION);
    prompt
}

/// The "Available Tools" section for an allow-list (names and `@profile`
/// references), in catalog order; empty when it names no listable tool.
pub fn tool_context(allowed_tools: &[String]) -> String {
    let named = chorus_catalog::named_tools(allowed_tools);
    // Catalog order, whatever the allow-list's order.
    let listed: Vec<_> = chorus_catalog::TOOLS
        .iter()
        .filter(|t| named.iter().any(|n| n.name == t.name) && !NOT_LISTED.contains(&t.name))
        .collect();
    if listed.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Available Tools\n\nCall these tools with Bash, one JSON object per call:\nchorus-tools '{\"tool\": \"<name>\", ...arguments}'\nThe result is JSON on stdout; on failure a JSON error is on stderr and the exit code is not 0.\n",
    );
    for spec in listed {
        let help = help_tool(spec);
        let _ = write!(out, "\n### {}\n{}\n", spec.name, spec.description);
        if spec.executor == Executor::AgentCli {
            out.push_str(
                "This is a native tool of your CLI: use it directly, not through chorus-tools.\n",
            );
            continue;
        }
        for (label, required) in [("Required", true), ("Optional", false)] {
            let args: Vec<String> = help
                .arguments
                .iter()
                .filter(|a| a.required == required)
                .map(|a| format!("{} ({})", a.name, first_sentence(&a.description)))
                .collect();
            if !args.is_empty() {
                let _ = writeln!(out, "{label}: {}", args.join(", "));
            }
        }
    }
    out.push_str("\nFor full documentation of your tools, including their output: chorus-tools '{\"tool\": \"help\"}'\n");
    out
}

fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    text.split_once(". ")
        .map_or(text.trim_end_matches('.'), |(first, _)| first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(tools: &[&str]) -> Vec<String> {
        tools.iter().map(|t| (*t).to_owned()).collect()
    }

    fn sections(context: &str) -> Vec<&str> {
        context
            .lines()
            .filter_map(|l| l.strip_prefix("### "))
            .collect()
    }

    #[test]
    fn an_empty_allow_list_gives_no_tool_section() {
        assert_eq!(tool_context(&[]), "");
        assert_eq!(tool_context(&list(&["completion-report", "Read"])), "");
    }

    #[test]
    fn only_the_allowed_tools_are_listed_with_their_arguments() {
        let context = tool_context(&list(&["file.search", "file.read"]));
        assert_eq!(sections(&context), ["file.read", "file.search"]);
        assert!(
            context.contains("chorus-tools '{\"tool\": \"<name>\", ...arguments}'"),
            "{context}"
        );
        assert!(context.contains("Required: path (File path, relative to the workspace root (absolute paths inside the root are accepted))"), "{context}");
        assert!(context.contains("Optional: offset ("), "{context}");
        assert!(context.contains("Required: pattern ("), "{context}");
        assert!(
            context.contains("chorus-tools '{\"tool\": \"help\"}'"),
            "{context}"
        );
    }

    #[test]
    fn web_search_is_described_as_native() {
        let context = tool_context(&list(&["web.search"]));
        assert_eq!(sections(&context), ["web.search"]);
        assert!(context.contains("native tool of your CLI"), "{context}");
        assert!(!context.contains("Required: query"), "{context}");
    }

    #[test]
    fn handoff_is_listed_with_its_arguments() {
        let context = tool_context(&list(&["handoff", "file.read"]));
        assert_eq!(sections(&context), ["file.read", "handoff"]);
        assert!(
            context.contains("Required: agent (") && context.contains("prompt ("),
            "{context}"
        );
    }

    #[test]
    fn profiles_expand_and_reporting_tools_never_appear_in_the_section() {
        let context = tool_context(&list(&["@reviewer", "completion-report", "planner-output"]));
        assert!(sections(&context).contains(&"task.update_stage"));
        assert!(
            !sections(&context).iter().any(|s| NOT_LISTED.contains(s)),
            "{context}"
        );
    }

    #[test]
    fn prompts_are_instructions_then_tools_then_how_to_finish() {
        let user = system_prompt(
            AgentKind::UserDefined,
            "You edit.",
            &list(&["file.read"]),
            Invocation::Cli("chorus-tools"),
        );
        let (tools_at, report_at) = (
            user.find("## Available Tools").expect("tools"),
            user.find("completion-report").expect("report"),
        );
        assert!(
            user.starts_with("You edit.") && tools_at < report_at,
            "{user}"
        );
        let internal = system_prompt(
            AgentKind::Internal,
            "You plan.",
            &list(&["file.read"]),
            Invocation::Cli("chorus-tools"),
        );
        assert!(
            !internal.contains("## Available Tools"),
            "internal agents get no tool section"
        );
        assert!(
            internal.contains("planner-output") && !internal.contains("completion-report"),
            "{internal}"
        );
    }

    #[test]
    fn cli_prompts_say_how_to_quote_the_json() {
        for kind in [AgentKind::UserDefined, AgentKind::Internal] {
            let prompt = system_prompt(kind, "x", &[], Invocation::Cli("chorus-tools"));
            assert!(prompt.ends_with(QUOTING_INSTRUCTION), "{prompt}");
            assert!(prompt.contains("as \\u0027"), "{prompt}");
        }
        let api = system_prompt(AgentKind::UserDefined, "x", &[], Invocation::Functions);
        assert!(!api.contains(QUOTING_INSTRUCTION));
    }

    #[test]
    fn cli_prompts_call_chorus_tools_by_the_allowed_path() {
        let prompt = system_prompt(
            AgentKind::UserDefined,
            "You read.",
            &list(&["file.read"]),
            Invocation::Cli("/opt/chorus/bin/chorus-tools"),
        );
        assert!(
            prompt.contains("/opt/chorus/bin/chorus-tools '{\"tool\": \"<name>\""),
            "{prompt}"
        );
        assert!(
            prompt.contains("/opt/chorus/bin/chorus-tools '{\"tool\":\"completion-report\""),
            "{prompt}"
        );
        assert!(!prompt.contains("\nchorus-tools '"), "{prompt}");
    }

    #[test]
    fn api_prompts_name_the_reporting_function_and_list_no_tools() {
        let user = system_prompt(
            AgentKind::UserDefined,
            "You read.",
            &list(&["file.read"]),
            Invocation::Functions,
        );
        assert!(user.starts_with("You read."), "{user}");
        assert!(
            !user.contains("## Available Tools") && !user.contains("chorus-tools"),
            "{user}"
        );
        assert!(user.contains("call the completion-report tool"), "{user}");
        let internal = system_prompt(AgentKind::Internal, "You plan.", &[], Invocation::Functions);
        assert!(internal.contains("planner-output") && !internal.contains("completion-report"));
    }
}
