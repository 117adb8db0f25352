//! The Claude Code CLI: `claude -p <message> --verbose --output-format stream-json`
//! with the system prompt appended, the tool flags mapped from the allow-list,
//! `--model` when one is set and `--resume <session>` for a second attempt. Its
//! stream-json lines become progress, session id, usage and the final result.

use serde_json::{Value, json};

use super::claude_flags::{DISALLOWED_TOOLS, claude_mcp_flags, claude_tool_flags};
use super::cli::CliSetup;
use super::provider::{CliOutput, CliProvider};
use super::{Attempt, AttemptEnd, PROGRESS_TEXT_BYTES, Progress, RunContext, cut};
use crate::domain::{ToolTransport, Usage};
use crate::runner::process::CliCommand;

/// The command line and environment of one attempt.
/// Claude Code as a provider.
#[derive(Debug)]
pub struct Claude;

impl CliProvider for Claude {
    const NAME: &'static str = "claude";
    type Output = Stream;

    fn program(config: &crate::runner::RunnerConfig) -> &std::path::Path {
        &config.claude_bin
    }

    fn command(setup: &CliSetup, ctx: &RunContext, attempt: &Attempt) -> CliCommand {
        command(setup, ctx, attempt)
    }

    /// Anthropic's API.
    fn default_hosts(_model: Option<&str>) -> Vec<&'static str> {
        vec!["api.anthropic.com"]
    }
}

impl CliOutput for Stream {
    fn line(&mut self, line: &str) -> Vec<Progress> {
        Stream::line(self, line)
    }

    fn end(self) -> (AttemptEnd, Option<String>) {
        (
            AttemptEnd {
                output: self.result,
                session_id: self.session_id,
                usage: self.usage,
            },
            self.error,
        )
    }
}

pub fn command(setup: &CliSetup, ctx: &RunContext, attempt: &Attempt) -> CliCommand {
    let mut args = vec![
        "-p".to_owned(),
        attempt.message.clone(),
        "--verbose".to_owned(),
        "--output-format".to_owned(),
        "stream-json".to_owned(),
        "--append-system-prompt".to_owned(),
        ctx.system_prompt.clone(),
    ];
    match ctx.provider.tool_transport {
        ToolTransport::Mcp => {
            let flags = claude_mcp_flags(&setup.chorus_tools, &ctx.tools);
            args.extend([
                "--tools".to_owned(),
                flags.tools,
                "--mcp-config".to_owned(),
                flags.mcp_config,
                "--strict-mcp-config".to_owned(),
                "--allowedTools".to_owned(),
                flags.allowed_tools,
                "--disallowedTools".to_owned(),
                DISALLOWED_TOOLS.to_owned(),
            ]);
        }
        ToolTransport::Shell => {
            let flags = claude_tool_flags(&setup.chorus_tools, &ctx.tools);
            args.extend([
                "--tools".to_owned(),
                flags.tools,
                "--allowedTools".to_owned(),
                flags.allowed_tools,
                "--disallowedTools".to_owned(),
                flags.disallowed_tools,
            ]);
        }
    }
    if let Some(model) = &ctx.model {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    if let Some(session) = &attempt.resume {
        args.extend(["--resume".to_owned(), session.clone()]);
    }
    let mut env = setup.base_env(ctx);
    // No update checks, telemetry or other calls home from an agent run.
    env.push((
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
        "1".to_owned(),
    ));
    env.push(("DISABLE_AUTOUPDATER".to_owned(), "1".to_owned()));
    // A tool call (its Bash tool's, or an MCP tool's) must wait as long as a
    // handoff may take.
    let bash_ms = setup.bash_timeout.as_millis().to_string();
    env.push(("BASH_DEFAULT_TIMEOUT_MS".to_owned(), bash_ms.clone()));
    env.push(("BASH_MAX_TIMEOUT_MS".to_owned(), bash_ms.clone()));
    env.push(("MCP_TOOL_TIMEOUT".to_owned(), bash_ms));
    if let Some(url) = &ctx.provider.base_url {
        env.push(("ANTHROPIC_BASE_URL".to_owned(), url.clone()));
    }
    if let Some(key) = &ctx.provider.api_key {
        env.push(("ANTHROPIC_API_KEY".to_owned(), key.clone()));
    }
    setup.command(ctx, args, env)
}

/// What the stream said so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stream {
    /// Tool calls announced and not answered yet: id → (tool, input).
    calls: std::collections::HashMap<String, (String, Value)>,
    pub session_id: Option<String>,
    pub usage: Usage,
    /// The `result` line's text.
    pub result: Option<String>,
    /// The `result` line reported an error (its subtype and text).
    pub error: Option<String>,
}

impl Stream {
    /// Reads one stream-json line; returns what it shows the agent doing. Lines
    /// that are not JSON (the CLI's own warnings) are ignored.
    pub fn line(&mut self, line: &str) -> Vec<Progress> {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            return Vec::new();
        };
        let mut progress = Vec::new();
        super::note_session(
            &mut self.session_id,
            event.get("session_id").and_then(Value::as_str),
            &mut progress,
        );
        match event.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let blocks = event
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                            if !text.trim().is_empty() {
                                progress.push(Progress::Text(cut(text, PROGRESS_TEXT_BYTES)));
                            }
                        }
                        Some("tool_use") => {
                            let tool = super::catalog_name(
                                block.get("name").and_then(Value::as_str).unwrap_or("?"),
                                "mcp__chorus__",
                            );
                            let input = block.get("input").cloned().unwrap_or(json!({}));
                            if let Some(id) = block.get("id").and_then(Value::as_str) {
                                self.calls
                                    .insert(id.to_owned(), (tool.clone(), input.clone()));
                            }
                            progress.push(Progress::ToolUse { tool, input });
                        }
                        _ => {}
                    }
                }
            }
            Some("user") => progress.extend(self.refusals(&event)),
            Some("result") => {
                let text = event
                    .get("result")
                    .and_then(Value::as_str)
                    .map(ToOwned::to_owned);
                let usage = event.get("usage").cloned().unwrap_or(Value::Null);
                let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
                self.usage = Usage {
                    input_tokens: count("input_tokens")
                        + count("cache_creation_input_tokens")
                        + count("cache_read_input_tokens"),
                    output_tokens: count("output_tokens"),
                    cost_micro_usd: Usage::micro_usd(
                        event
                            .get("total_cost_usd")
                            .and_then(Value::as_f64)
                            .unwrap_or(0.0),
                    ),
                };
                if event.get("is_error").and_then(Value::as_bool) == Some(true) {
                    let subtype = event
                        .get("subtype")
                        .and_then(Value::as_str)
                        .unwrap_or("error");
                    self.error = Some(match &text {
                        Some(t) if !t.is_empty() => format!("{subtype}: {t}"),
                        _ => subtype.to_owned(),
                    });
                }
                self.result = text;
            }
            _ => {}
        }
        progress
    }
}

impl Stream {
    /// The answered calls of a `user` line that the CLI's own permission rules
    /// rejected (`tool_result_meta[].permission_decision.decision == "reject"`).
    fn refusals(&mut self, event: &Value) -> Vec<Progress> {
        let results: Vec<Value> = event
            .pointer("/message/content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let meta: Vec<Value> = event
            .get("tool_result_meta")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut denied = Vec::new();
        for result in results {
            let Some(id) = result.get("tool_use_id").and_then(Value::as_str) else {
                continue;
            };
            let call = self.calls.remove(id);
            let rejected = meta.iter().any(|m| {
                m.get("id").and_then(Value::as_str) == Some(id)
                    && m.pointer("/permission_decision/decision")
                        .and_then(Value::as_str)
                        == Some("reject")
            });
            if !rejected {
                continue;
            }
            let (tool, input) = call.unwrap_or_else(|| ("?".to_owned(), json!({})));
            let reason = match result.get("content") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => "refused by the CLI's permission rules".to_owned(),
            };
            denied.push(Progress::Denied {
                tool,
                input,
                reason: cut(&reason, PROGRESS_TEXT_BYTES),
                by: "cli",
            });
        }
        denied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the real CLI (2.1.330) prints them, trimmed.
    const LINES: [&str; 6] = [
        r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"5f1c-sess","tools":["Bash"],"model":"claude-x","permissionMode":"default"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"I will read it."}]},"session_id":"5f1c-sess"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"/bin/chorus-tools '{}'"}}]},"session_id":"5f1c-sess"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]},"session_id":"5f1c-sess"}"#,
        r#"not json: a warning"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"All done.","session_id":"5f1c-sess","num_turns":2,"total_cost_usd":0.0123,"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7}}"#,
    ];

    #[test]
    fn a_stream_becomes_progress_session_usage_and_result() {
        let mut stream = Stream::default();
        let progress: Vec<Progress> = LINES.iter().flat_map(|l| stream.line(l)).collect();
        assert_eq!(
            progress,
            [
                Progress::Session("5f1c-sess".to_owned()),
                Progress::Text("I will read it.".to_owned()),
                Progress::ToolUse {
                    tool: "Bash".to_owned(),
                    input: json!({"command": "/bin/chorus-tools '{}'"}),
                },
            ]
        );
        assert_eq!(stream.session_id.as_deref(), Some("5f1c-sess"));
        assert_eq!(stream.result.as_deref(), Some("All done."));
        assert_eq!(stream.error, None);
        assert_eq!(
            stream.usage,
            Usage {
                input_tokens: 15,
                output_tokens: 7,
                cost_micro_usd: 12_300
            }
        );
    }

    #[test]
    fn a_call_the_cli_rejected_is_a_denial_and_one_it_accepted_is_not() {
        let mut stream = Stream::default();
        for line in [
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cat /etc/passwd"}}]},"session_id":"s"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"/x/chorus-tools '{}'"}}]},"session_id":"s"}"#,
        ] {
            stream.line(line);
        }
        let denied = stream.line(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"cat in '/etc/passwd' was blocked.","is_error":true,"tool_use_id":"t1"}]},"session_id":"s","tool_result_meta":[{"id":"t1","non_execution_kind":"user-rejected","permission_decision":{"decision":"reject","source":"config"}}]}"#,
        );
        assert_eq!(
            denied,
            [Progress::Denied {
                tool: "Bash".to_owned(),
                input: json!({"command": "cat /etc/passwd"}),
                reason: "cat in '/etc/passwd' was blocked.".to_owned(),
                by: "cli",
            }]
        );
        let accepted = stream.line(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"Exit code 3","is_error":true,"tool_use_id":"t2"}]},"session_id":"s","tool_result_meta":[{"id":"t2","permission_decision":{"decision":"accept","source":"config"}}]}"#,
        );
        assert!(accepted.is_empty(), "{accepted:?}");
    }

    #[test]
    fn an_error_result_is_kept_with_its_subtype() {
        let mut stream = Stream::default();
        stream.line(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s"}"#,
        );
        assert_eq!(stream.error.as_deref(), Some("error_max_turns"));
    }
}
