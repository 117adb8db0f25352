//! The Claude Code CLI: `claude -p <message> --verbose --output-format stream-json`
//! with the system prompt appended, the tool flags mapped from the allow-list,
//! `--model` when one is set and `--resume <session>` for a second attempt. Its
//! stream-json lines become progress, session id, usage and the final result.

use serde_json::{Value, json};

use super::claude_flags::{DISALLOWED_TOOLS, claude_mcp_flags, claude_tool_flags};
use super::cli::CliSetup;
use super::provider::{CliOutput, CliProvider};
use super::{Attempt, AttemptEnd, PROGRESS_TEXT_BYTES, Progress, RunContext, cut};
use crate::domain::{ModelCall, ToolTransport, Usage};
use crate::execution::process::CliCommand;

/// What to do when the CLI has no credential its API takes.
const NO_CREDENTIAL: &str = " (Claude Code has no API key its API accepts: give the provider one with `chorus provider update NAME -w WORKSPACE --key-stdin` (or --key-env, --key-file), or UpdateProvider's apiKey)";

/// How the CLI answers a call of a tool it was not given.
const NO_SUCH_TOOL: &str = "Error: No such tool available";

/// Claude Code as a provider.
#[derive(Debug)]
pub struct Claude;

impl CliProvider for Claude {
    const NAME: &'static str = "claude";
    type Output = Stream;

    fn program(config: &crate::execution::RunnerConfig) -> &std::path::Path {
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

    fn finish(&mut self) -> Vec<Progress> {
        self.flush().into_iter().chain(self.cut_off()).collect()
    }

    fn end(self) -> (AttemptEnd, Option<String>) {
        (
            AttemptEnd {
                output: self.result,
                session_id: self.session_id,
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
        // The API's own stream events: each call's real output tokens
        // (`message_delta`) as it ends, not only in the result line that a
        // stopped CLI never prints.
        "--include-partial-messages".to_owned(),
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
    // Its own second limit: what is left of the task's cost limit (the
    // server's check stops the task whatever the CLI does).
    if let Some(left) = ctx.cost_left_pico_usd {
        let dollars = crate::domain::usd(left);
        args.extend(["--max-budget-usd".to_owned(), format!("{dollars:.6}")]);
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
    /// The model message being read: its id and its call (the CLI prints a
    /// message's blocks on lines of their own, each with the message's usage).
    /// Read from `assistant` lines only when the CLI prints no stream events.
    reading: Option<(String, ModelCall)>,
    /// The CLI prints the API's stream events (`--include-partial-messages`):
    /// calls are read from them.
    streamed: bool,
    /// The call being streamed: its message id, its call as `message_start`
    /// told it, and the characters of output streamed so far.
    streaming: Option<(String, ModelCall, usize)>,
    /// The model calls of this attempt, as reported.
    pub model_calls: Vec<ModelCall>,
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
            Some("stream_event") => {
                self.streamed = true;
                progress.extend(self.stream_event(event.get("event").unwrap_or(&Value::Null)));
            }
            Some("assistant") => {
                if !self.streamed {
                    progress.extend(self.model_message(&event));
                }
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
            Some("user") => {
                progress.extend(self.flush());
                progress.extend(self.refusals(&event));
            }
            Some("result") => {
                progress.extend(self.flush());
                let text = event
                    .get("result")
                    .and_then(Value::as_str)
                    .map(ToOwned::to_owned);
                let cost = event.get("total_cost_usd").and_then(Value::as_f64);
                progress.push(Progress::AttemptTotal {
                    reported_pico_usd: Usage::pico_usd(cost.unwrap_or(0.0)),
                    tokens: tokens_of(event.get("usage").unwrap_or(&Value::Null), ""),
                    calls: self.model_calls.clone(),
                });
                if event.get("is_error").and_then(Value::as_bool) == Some(true) {
                    let subtype = event
                        .get("subtype")
                        .and_then(Value::as_str)
                        .unwrap_or("error");
                    let mut error = match &text {
                        Some(t) if !t.is_empty() => format!("{subtype}: {t}"),
                        _ => subtype.to_owned(),
                    };
                    if error.contains("Not logged in") || error.contains("Invalid API key") {
                        error.push_str(NO_CREDENTIAL);
                    }
                    self.error = Some(error);
                }
                self.result = text;
            }
            _ => {}
        }
        progress
    }
}

/// Anthropic's usage object as a call: its input tokens (uncached, read
/// from the cache and written to it) summed, the cached ones also apart.
fn tokens_of(usage: &Value, model: &str) -> ModelCall {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let (cache_read, cache_write) = (
        count("cache_read_input_tokens"),
        count("cache_creation_input_tokens"),
    );
    ModelCall {
        model: model.to_owned(),
        input_tokens: count("input_tokens") + cache_read + cache_write,
        output_tokens: count("output_tokens"),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        reported_pico_usd: None,
        estimated: false,
    }
}

impl Stream {
    /// An API stream event: `message_start` sends a call (its input tokens
    /// known), its deltas are counted, and `message_delta` answers it with
    /// its real output tokens.
    fn stream_event(&mut self, event: &Value) -> Vec<Progress> {
        let mut progress = Vec::new();
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                progress.extend(self.cut_off());
                let message = event.get("message").unwrap_or(&Value::Null);
                let id = message
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let model = message
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let call = tokens_of(message.get("usage").unwrap_or(&Value::Null), model);
                progress.push(Progress::CallSent {
                    key: id.to_owned(),
                    estimate: ModelCall {
                        estimated: true,
                        ..call.clone()
                    },
                });
                self.streaming = Some((id.to_owned(), call, 0));
            }
            Some("content_block_delta") => {
                if let Some((_, _, chars)) = &mut self.streaming {
                    let delta = event.get("delta").unwrap_or(&Value::Null);
                    *chars += ["text", "partial_json", "thinking"]
                        .iter()
                        .filter_map(|k| delta.get(*k).and_then(Value::as_str))
                        .map(str::len)
                        .sum::<usize>();
                }
            }
            Some("message_delta") => {
                if let Some((id, mut call, _)) = self.streaming.take() {
                    // The delta's usage is the call's whole usage so far: its
                    // output tokens, and the input again on newer APIs.
                    let usage = tokens_of(event.get("usage").unwrap_or(&Value::Null), "");
                    call.output_tokens = call.output_tokens.max(usage.output_tokens);
                    call.input_tokens = call.input_tokens.max(usage.input_tokens);
                    call.cache_read_tokens = call.cache_read_tokens.max(usage.cache_read_tokens);
                    call.cache_write_tokens = call.cache_write_tokens.max(usage.cache_write_tokens);
                    self.model_calls.push(call.clone());
                    progress.push(Progress::CallAnswered { key: id, call });
                }
            }
            _ => {}
        }
        progress
    }

    /// The call being streamed when the output stopped, answered with what
    /// was seen of it: its input, and its output estimated from the
    /// characters streamed (at least what `message_start` said).
    fn cut_off(&mut self) -> Option<Progress> {
        let (id, call, chars) = self.streaming.take()?;
        let seen = ModelCall::estimate(&call.model, 0, chars);
        Some(Progress::CallAnswered {
            key: id,
            call: ModelCall {
                output_tokens: call.output_tokens.max(seen.output_tokens),
                estimated: true,
                ..call
            },
        })
    }

    /// An `assistant` line: the model message it belongs to. A new message
    /// ends the one read before, whose call is then complete.
    fn model_message(&mut self, event: &Value) -> Option<Progress> {
        let message = event.get("message")?;
        let id = message.get("id").and_then(Value::as_str)?;
        let model = message
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let call = tokens_of(message.get("usage")?, model);
        match &mut self.reading {
            // The same message again: its latest usage is the fullest.
            Some((reading, known)) if reading == id => {
                known.output_tokens = known.output_tokens.max(call.output_tokens);
                None
            }
            _ => {
                let done = self.flush();
                self.reading = Some((id.to_owned(), call));
                done
            }
        }
    }

    /// The message being read, as a complete call.
    fn flush(&mut self) -> Option<Progress> {
        let (_, call) = self.reading.take()?;
        self.model_calls.push(call.clone());
        Some(Progress::ModelCall(call))
    }

    /// The answered calls of a `user` line that the CLI refused by itself:
    /// those its permission rules rejected
    /// (`tool_result_meta[].permission_decision.decision == "reject"`), and
    /// those naming a tool it was not given ("No such tool available", the
    /// answer to `mcp__chorus__file_write` or `Read` under MCP).
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
            let text = match result.get("content") {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let is_error = result.get("is_error").and_then(Value::as_bool) == Some(true);
            // The CLI's own answer, not a tool's error that quotes it.
            let unknown = is_error
                && text
                    .trim_start_matches("<tool_use_error>")
                    .starts_with(NO_SUCH_TOOL);
            if !rejected && !unknown {
                continue;
            }
            let (tool, input) = call.unwrap_or_else(|| ("?".to_owned(), json!({})));
            let reason = if text.is_empty() {
                "refused by the CLI's permission rules".to_owned()
            } else {
                // "<tool_use_error>Error: No such tool available: X</tool_use_error>"
                text.trim_start_matches("<tool_use_error>")
                    .trim_end_matches("</tool_use_error>")
                    .trim_start_matches("Error: ")
                    .to_owned()
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
    const LINES: [&str; 7] = [
        r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"5f1c-sess","tools":["Bash"],"model":"claude-x","permissionMode":"default"}"#,
        r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-x","content":[{"type":"text","text":"I will read it."}],"usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":1}},"session_id":"5f1c-sess"}"#,
        r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-x","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"/bin/chorus-tools '{}'"}}],"usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":7}},"session_id":"5f1c-sess"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]},"session_id":"5f1c-sess"}"#,
        r#"not json: a warning"#,
        r#"{"type":"assistant","message":{"id":"msg_2","model":"claude-x","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":30,"output_tokens":3}},"session_id":"5f1c-sess"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"All done.","session_id":"5f1c-sess","num_turns":2,"total_cost_usd":0.0123,"usage":{"input_tokens":40,"cache_read_input_tokens":5,"output_tokens":10}}"#,
    ];

    #[test]
    fn a_stream_becomes_progress_session_model_calls_cost_and_result() {
        let mut stream = Stream::default();
        let progress: Vec<Progress> = LINES.iter().flat_map(|l| stream.line(l)).collect();
        let first = ModelCall {
            model: "claude-x".into(),
            input_tokens: 17,
            output_tokens: 7,
            cache_read_tokens: 5,
            cache_write_tokens: 2,
            reported_pico_usd: None,
            estimated: false,
        };
        let second = ModelCall {
            model: "claude-x".into(),
            input_tokens: 30,
            output_tokens: 3,
            ..ModelCall::default()
        };
        assert_eq!(
            progress,
            [
                Progress::Session("5f1c-sess".to_owned()),
                Progress::Text("I will read it.".to_owned()),
                Progress::ToolUse {
                    tool: "Bash".to_owned(),
                    input: json!({"command": "/bin/chorus-tools '{}'"}),
                },
                // One call per message, with its last (fullest) usage.
                Progress::ModelCall(first.clone()),
                Progress::Text("Done.".to_owned()),
                Progress::ModelCall(second.clone()),
                Progress::AttemptTotal {
                    reported_pico_usd: 12_300_000_000,
                    tokens: ModelCall {
                        input_tokens: 45,
                        output_tokens: 10,
                        cache_read_tokens: 5,
                        ..ModelCall::default()
                    },
                    calls: vec![first, second],
                },
            ]
        );
        assert_eq!(stream.session_id.as_deref(), Some("5f1c-sess"));
        assert_eq!(stream.result.as_deref(), Some("All done."));
        assert_eq!(stream.error, None);
    }

    /// Stream events as 2.1.330 prints them with `--include-partial-messages`
    /// (trimmed): the call is sent at `message_start` and answered with its
    /// real output tokens at `message_delta`, though every `assistant` line
    /// says 1; a call cut off by the end keeps what was streamed of it.
    #[test]
    fn stream_events_count_each_call_as_it_ends_and_a_cut_off_one_as_estimated() {
        let start = |id: &str| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"message_start","message":{{"id":"{id}","model":"m","usage":{{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":4}}}}}},"session_id":"s"}}"#
            )
        };
        let lines = [
            start("msg_1"),
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}},"session_id":"s"}"#.to_owned(),
            r#"{"type":"assistant","message":{"id":"msg_1","model":"m","content":[{"type":"text","text":"Hello"}],"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"s"}"#.to_owned(),
            r#"{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":23}},"session_id":"s"}"#.to_owned(),
            start("msg_2"),
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"0123456789012345678901234567890123456789"}},"session_id":"s"}"#.to_owned(),
        ];
        let mut stream = Stream::default();
        let mut progress: Vec<Progress> = lines.iter().flat_map(|l| stream.line(l)).collect();
        progress.extend(stream.finish());
        let calls: Vec<&Progress> = progress
            .iter()
            .filter(|p| matches!(p, Progress::CallSent { .. } | Progress::CallAnswered { .. }))
            .collect();
        let sent = |id: &str| Progress::CallSent {
            key: id.to_owned(),
            estimate: ModelCall {
                model: "m".into(),
                input_tokens: 14,
                output_tokens: 1,
                cache_read_tokens: 4,
                estimated: true,
                ..ModelCall::default()
            },
        };
        let answered = |id: &str, output, estimated| Progress::CallAnswered {
            key: id.to_owned(),
            call: ModelCall {
                model: "m".into(),
                input_tokens: 14,
                output_tokens: output,
                cache_read_tokens: 4,
                estimated,
                ..ModelCall::default()
            },
        };
        assert_eq!(
            calls,
            [
                &sent("msg_1"),
                &answered("msg_1", 23, false),
                &sent("msg_2"),
                &answered("msg_2", 10, true),
            ]
        );
        assert_eq!(
            stream.model_calls.len(),
            1,
            "only answered calls are totalled"
        );
        assert!(progress.contains(&Progress::Text("Hello".to_owned())));
    }

    #[test]
    fn a_message_cut_off_by_the_end_is_still_a_call() {
        let mut stream = Stream::default();
        stream.line(LINES[1]);
        assert_eq!(
            stream.finish(),
            [Progress::ModelCall(ModelCall {
                model: "claude-x".into(),
                input_tokens: 17,
                output_tokens: 1,
                cache_read_tokens: 5,
                cache_write_tokens: 2,
                reported_pico_usd: None,
                estimated: false,
            })]
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

    /// A call of a tool the CLI was not given, as 2.1.330 answers it (lines
    /// captured from the real CLI over MCP).
    #[test]
    fn a_call_of_a_tool_the_cli_was_not_given_is_a_denial() {
        let mut stream = Stream::default();
        stream.line(
            r#"{"type":"assistant","message":{"id":"msg_2","model":"m","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__chorus__file_write","input":{"path":"a","content":"b"}}],"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"s"}"#,
        );
        let denied = stream.line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"<tool_use_error>Error: No such tool available: mcp__chorus__file_write</tool_use_error>","is_error":true,"tool_use_id":"toolu_1"}]},"session_id":"s","tool_use_result":"Error: No such tool available: mcp__chorus__file_write"}"#,
        );
        assert_eq!(
            denied.last(),
            Some(&Progress::Denied {
                tool: "file.write".to_owned(),
                input: json!({"path": "a", "content": "b"}),
                reason: "No such tool available: mcp__chorus__file_write".to_owned(),
                by: "cli",
            }),
            "{denied:?}"
        );
        // A tool's own error that quotes the words is no refusal of the CLI's.
        stream.line(
            r#"{"type":"assistant","message":{"id":"msg_3","model":"m","content":[{"type":"tool_use","id":"toolu_2","name":"mcp__chorus__file_read","input":{"path":"Error: No such tool available"}}],"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"s"}"#,
        );
        let quoted = stream.line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"not_found: Error: No such tool available does not exist","is_error":true,"tool_use_id":"toolu_2"}]},"session_id":"s"}"#,
        );
        assert!(
            !quoted.iter().any(|p| matches!(p, Progress::Denied { .. })),
            "{quoted:?}"
        );
    }

    #[test]
    fn a_cli_without_a_key_says_how_to_give_it_one() {
        let mut stream = Stream::default();
        stream.line(
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","session_id":"s"}"#,
        );
        let error = stream.error.unwrap_or_default();
        assert!(
            error.contains("chorus provider update NAME -w WORKSPACE --key-stdin"),
            "{error}"
        );
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
