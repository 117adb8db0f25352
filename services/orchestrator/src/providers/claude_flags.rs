//! The Claude Code CLI's tool flags, from an agent's allow-list.
//!
//! With the MCP transport (the default, [`claude_mcp_flags`]) the CLI gets no
//! built-in tool at all (`--tools ""`, or only WebSearch when web.search is
//! granted), chorus-tools' MCP server as its only MCP server
//! (`--mcp-config`, `--strict-mcp-config`), and exactly the run's granted
//! tools allowed (`mcp__chorus__file_read`, ...): there is no shell to fence.
//!
//! With the shell transport ([`claude_tool_flags`]):
//! The CLI only ever gets what maps from the allow-list: every Chorus tool runs
//! through chorus-tools, so it maps to the Bash tool restricted to
//! `Bash(<chorus-tools path> *)`; web.search maps to the CLI's own WebSearch;
//! names the catalog does not know are dropped (passing them through let the CLI
//! fall back to all of its built-in tools). Every list gets the chorus-tools
//! rule, first: completion-report is always granted and goes through
//! chorus-tools, so an agent granted only web.search still reports
//! (`--tools "Bash WebSearch" --allowedTools "Bash(<chorus-tools> *) WebSearch"`). The CLI's own sub-agent tools are
//! always disallowed. These flags are a second fence: tool-exec and the
//! orchestrator check every call against the run's allow-list anyway.

use std::path::Path;

use chorus_catalog::Executor;

/// Values of `--tools`, `--allowedTools` and `--disallowedTools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeToolFlags {
    pub tools: String,
    pub allowed_tools: String,
    pub disallowed_tools: String,
}

/// The CLI's built-in tools that start sub-agents outside Chorus's control.
const SUB_AGENT_TOOLS: &str = "Agent Task";

/// Values of `--tools`, `--allowedTools` and `--mcp-config` for the MCP
/// transport (`--strict-mcp-config` and the sub-agent tools' denial go with
/// them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeMcpFlags {
    pub tools: String,
    pub allowed_tools: String,
    pub mcp_config: String,
}

/// Maps the run's granted tools (profiles expanded, the always-granted ones
/// included) to the MCP transport's flags: each tool Chorus executes becomes
/// `mcp__chorus__<wire name>`, web.search the CLI's own WebSearch. The MCP
/// server inherits the CLI's environment (its run token and the services'
/// addresses), so the configuration holds no secret.
pub fn claude_mcp_flags(chorus_tools: &Path, granted: &[String]) -> ClaudeMcpFlags {
    let server = chorus_catalog::MCP_SERVER;
    let mut tools = Vec::new();
    let mut allowed = Vec::new();
    for spec in chorus_catalog::named_tools(granted) {
        match spec.executor {
            Executor::ToolExec | Executor::Orchestrator => allowed.push(format!(
                "mcp__{server}__{}",
                chorus_catalog::wire_name(spec.name)
            )),
            Executor::AgentCli if spec.name == "web.search" => {
                tools.push("WebSearch".to_owned());
                allowed.push("WebSearch".to_owned());
            }
            Executor::AgentCli => {}
        }
    }
    let config = serde_json::json!({"mcpServers": {server: {
        "type": "stdio",
        "command": chorus_tools.display().to_string(),
        "args": ["mcp"],
    }}});
    ClaudeMcpFlags {
        tools: tools.join(" "),
        allowed_tools: allowed.join(" "),
        mcp_config: config.to_string(),
    }
}

/// The CLI's built-in tools that start sub-agents, denied with either transport.
pub const DISALLOWED_TOOLS: &str = SUB_AGENT_TOOLS;

/// Maps an allow-list (tool names and `@profile` references) to the CLI's flags.
pub fn claude_tool_flags(chorus_tools: &Path, allow_list: &[String]) -> ClaudeToolFlags {
    let bash_rule = format!("Bash({} *)", chorus_tools.display());
    let mut allowed: Vec<String> = vec![bash_rule.clone()];
    for spec in chorus_catalog::named_tools(allow_list) {
        let rule = match spec.executor {
            Executor::ToolExec | Executor::Orchestrator => bash_rule.clone(),
            Executor::AgentCli if spec.name == "web.search" => "WebSearch".to_owned(),
            Executor::AgentCli => continue,
        };
        if !allowed.contains(&rule) {
            allowed.push(rule);
        }
    }
    let tools: Vec<&str> = allowed
        .iter()
        .map(|rule| rule.split('(').next().unwrap_or(rule))
        .collect();
    ClaudeToolFlags {
        tools: tools.join(" "),
        allowed_tools: allowed.join(" "),
        disallowed_tools: SUB_AGENT_TOOLS.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The acceptance table of the user's tool-restriction document, plus the
    /// cases our catalog adds.
    #[test]
    fn allow_lists_map_to_exactly_these_flags() {
        let path = Path::new("/opt/chorus/bin/chorus-tools");
        let bash = "Bash(/opt/chorus/bin/chorus-tools *)";
        let cases: &[(&[&str], &str, String)] = &[
            (&["file.read", "file.write"], "Bash", bash.to_owned()),
            // Reporting goes through chorus-tools: the rule is always there.
            (
                &["web.search"],
                "Bash WebSearch",
                format!("{bash} WebSearch"),
            ),
            (
                &["file.read", "web.search"],
                "Bash WebSearch",
                format!("{bash} WebSearch"),
            ),
            (&["handoff", "file.read"], "Bash", bash.to_owned()),
            (&[], "Bash", bash.to_owned()),
            (&["Read", "Edit", "Task", "Grep"], "Bash", bash.to_owned()),
            (
                &["task.comment", "completion-report"],
                "Bash",
                bash.to_owned(),
            ),
            (&["@researcher"], "Bash", bash.to_owned()),
            (
                &["web.search", "@reviewer"],
                "Bash WebSearch",
                format!("{bash} WebSearch"),
            ),
        ];
        for (allow_list, tools, allowed) in cases {
            let list: Vec<String> = allow_list.iter().map(|s| (*s).to_owned()).collect();
            let flags = claude_tool_flags(path, &list);
            assert_eq!(
                (flags.tools.as_str(), &flags.allowed_tools),
                (*tools, allowed),
                "{allow_list:?}"
            );
            assert_eq!(flags.disallowed_tools, "Agent Task");
        }
    }

    #[test]
    fn over_mcp_exactly_the_granted_tools_are_allowed_and_no_built_in_one() {
        let path = Path::new("/opt/chorus/bin/chorus-tools");
        let granted: Vec<String> = ["file.read", "handoff", "completion-report", "help", "Bash"]
            .map(str::to_owned)
            .to_vec();
        let flags = claude_mcp_flags(path, &granted);
        assert_eq!(flags.tools, "", "no built-in tool");
        assert_eq!(
            flags.allowed_tools,
            "mcp__chorus__file_read mcp__chorus__handoff mcp__chorus__completion-report mcp__chorus__help"
        );
        let config: serde_json::Value = serde_json::from_str(&flags.mcp_config).expect("JSON");
        assert_eq!(
            config["mcpServers"]["chorus"],
            serde_json::json!({"type": "stdio", "command": "/opt/chorus/bin/chorus-tools", "args": ["mcp"]})
        );
        let with_search = claude_mcp_flags(path, &["web.search".to_owned()]);
        assert_eq!(with_search.tools, "WebSearch");
        assert_eq!(with_search.allowed_tools, "WebSearch");
    }

    /// The rows of the table in docs/operations.md whose header starts
    /// with `header`: (allow-list, `--tools`, `--allowedTools`).
    fn documented(header: &str) -> Vec<(Vec<String>, String, String)> {
        let doc = include_str!("../../../../docs/operations.md");
        let plain = |cell: &str| cell.trim().trim_matches('`').replace("\"\"", "");
        doc.lines()
            .skip_while(|l| !l.starts_with(header))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|row| {
                let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
                let entries = cells[0]
                    .split(',')
                    .map(|e| e.trim().trim_matches('`').to_owned())
                    .filter(|e| !e.is_empty() && e != "nothing")
                    .collect();
                (entries, plain(cells[1]), plain(cells[2]))
            })
            .collect()
    }

    /// The operations guide's tables say what the CLI receives.
    #[test]
    fn the_documented_flags_are_the_flags_passed() {
        let path = Path::new("<chorus-tools>");
        let mcp = documented("| allow-list (MCP)");
        let shell = documented("| allow-list (shell)");
        assert!(mcp.len() >= 3 && shell.len() >= 3, "{mcp:?} {shell:?}");
        for (entries, tools, allowed) in mcp {
            let granted: Vec<String> = chorus_catalog::expand_allow_list(&entries)
                .expect("a valid allow-list")
                .into_iter()
                .map(str::to_owned)
                .collect();
            let flags = claude_mcp_flags(path, &granted);
            assert_eq!(
                (flags.tools, flags.allowed_tools),
                (tools, allowed),
                "MCP {entries:?}"
            );
        }
        for (entries, tools, allowed) in shell {
            let flags = claude_tool_flags(path, &entries);
            assert_eq!(
                (flags.tools, flags.allowed_tools),
                (tools, allowed),
                "shell {entries:?}"
            );
        }
    }

    #[test]
    fn built_in_tools_are_never_passed_through() {
        let list: Vec<String> = ["Task", "Edit", "Write", "Read", "Grep", "Glob", "Bash"]
            .map(str::to_owned)
            .to_vec();
        let flags = claude_tool_flags(Path::new("chorus-tools"), &list);
        for built_in in ["Task", "Edit", "Write", "Read", "Grep", "Glob"] {
            assert!(
                !flags.tools.split(' ').any(|t| t == built_in),
                "{built_in} in {}",
                flags.tools
            );
        }
        assert_eq!(flags.allowed_tools, "Bash(chorus-tools *)");
    }
}
