//! The OpenCode CLI: `opencode run --format json <message>` with a generated
//! configuration passed inline (`OPENCODE_CONFIG_CONTENT`, which overrides every
//! file OpenCode reads).
//!
//! With the MCP transport (the default) every built-in tool is off, bash
//! included, and `chorus-tools mcp` is the one MCP server (`chorus`, a local
//! server that inherits OpenCode's environment: the run token and the
//! services' addresses): the model's tools are the run's granted ones, as
//! `chorus_file_read` and so on, and nothing else.
//!
//! With the shell transport: only the bash tool, and bash allowed only for a plain
//! chorus-tools call — `<chorus-tools> '<json>'`, one single-quoted argument and
//! nothing else: OpenCode matches its rules against a command's text with its
//! redirections, and the last matching rule wins, so a call with a quote
//! anywhere but at its two ends (a redirection, a second argument) is denied.
//! Every other permission is `deny`, `external_directory` included (a headless
//! "ask" ends the session). A refusal is an error the agent reads, and is
//! recorded (`tool_denied`, by the CLI). The system prompt is the run's
//! instructions file. Its JSON events become progress, session id and usage.

use serde_json::{Value, json};

use super::cli::CliSetup;
use super::provider::{CliOutput, CliProvider};
use super::{Attempt, AttemptEnd, PROGRESS_TEXT_BYTES, Progress, RunContext, cut};
use crate::domain::{ModelCall, ToolTransport, Usage};
use crate::execution::process::CliCommand;

/// Name of the provider entry the generated config declares for a custom base URL.
const CUSTOM_PROVIDER: &str = "chorus";
/// OpenCode's built-in tools other than bash, all turned off.
const OTHER_TOOLS: [&str; 12] = [
    "edit",
    "write",
    "read",
    "grep",
    "glob",
    "list",
    "patch",
    "todowrite",
    "todoread",
    "webfetch",
    "task",
    "skill",
];

/// The tool OpenCode answers a call of an unknown tool with.
const INVALID_TOOL: &str = "invalid";

/// How OpenCode words a call its permission rules refused.
const REFUSAL: &str = "prevents you from using this specific tool call";

/// The instructions file in the run directory.
pub const INSTRUCTIONS_FILE: &str = "chorus-instructions.md";

/// The generated configuration of a run.
pub fn config(setup: &CliSetup, ctx: &RunContext) -> Value {
    let mcp = ctx.provider.tool_transport == ToolTransport::Mcp;
    let mut tools = serde_json::Map::new();
    tools.insert("bash".to_owned(), json!(!mcp));
    for tool in OTHER_TOOLS {
        tools.insert(tool.to_owned(), json!(false));
    }
    let chorus_tools = setup.chorus_tools.display().to_string();
    // In order, each longer than the one before (OpenCode ranks rules by
    // length in some versions, by order in others: the last match wins either way).
    let mut bash = serde_json::Map::new();
    bash.insert("*".to_owned(), json!("deny"));
    bash.insert(format!("{chorus_tools} '*'"), json!("allow"));
    bash.insert(format!("{chorus_tools} '*'*'*"), json!("deny"));
    let mut config = json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "instructions": [ctx.run_dir.join(INSTRUCTIONS_FILE).display().to_string()],
        "tools": tools,
        "permission": {
            "edit": "deny",
            "webfetch": "deny",
            "external_directory": "deny",
            "bash": bash,
        },
    });
    if mcp {
        config["permission"]["bash"] = json!("deny");
        config["mcp"] = json!({ chorus_catalog::MCP_SERVER: {
            "type": "local",
            "command": [chorus_tools, "mcp"],
            "enabled": true,
        }});
    }
    if let Some(base_url) = &ctx.provider.base_url {
        let model = ctx.model.clone().unwrap_or_else(|| "default".to_owned());
        let mut options = json!({ "baseURL": base_url });
        if let Some(key) = &ctx.provider.api_key {
            options["apiKey"] = json!(key);
        }
        config["provider"] = json!({
            CUSTOM_PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": format!("Chorus provider {}", ctx.provider.name),
                "options": options,
                "models": { model.clone(): { "name": model, "tool_call": true } },
            }
        });
    }
    if let Some(model) = model_flag(ctx) {
        config["model"] = json!(model);
    }
    config
}

/// `provider/model` for `--model` and the config.
fn model_flag(ctx: &RunContext) -> Option<String> {
    let model = ctx.model.as_ref()?;
    Some(if ctx.provider.base_url.is_some() {
        format!("{CUSTOM_PROVIDER}/{model}")
    } else {
        model.clone()
    })
}

/// The command line and environment of one attempt.
/// OpenCode as a provider.
#[derive(Debug)]
pub struct Opencode;

impl CliProvider for Opencode {
    const NAME: &'static str = "opencode";
    type Output = Stream;

    fn program(config: &crate::execution::RunnerConfig) -> &std::path::Path {
        &config.opencode_bin
    }

    fn command(setup: &CliSetup, ctx: &RunContext, attempt: &Attempt) -> CliCommand {
        command(setup, ctx, attempt)
    }

    /// The API its model names (`anthropic/...` without one), and its model
    /// list.
    fn default_hosts(model: Option<&str>) -> Vec<&'static str> {
        let named = match model.and_then(|m| m.split_once('/')).map(|(p, _)| p) {
            Some("anthropic") | None => "api.anthropic.com",
            Some("openai") => "api.openai.com",
            Some("openrouter") => "openrouter.ai",
            Some("google") => "generativelanguage.googleapis.com",
            Some("groq") => "api.groq.com",
            Some("mistral") => "api.mistral.ai",
            Some(_) => "api.anthropic.com",
        };
        vec![named, "models.dev"]
    }

    /// Its instructions: the system prompt, as a file its configuration names.
    fn run_file(ctx: &RunContext) -> Option<(&'static str, Vec<u8>)> {
        Some((INSTRUCTIONS_FILE, ctx.system_prompt.clone().into_bytes()))
    }
}

impl CliOutput for Stream {
    fn line(&mut self, line: &str) -> Vec<Progress> {
        Stream::line(self, line)
    }

    fn end(self) -> (AttemptEnd, Option<String>) {
        (
            AttemptEnd {
                output: self.last_text,
                session_id: self.session_id,
            },
            self.error,
        )
    }
}

pub fn command(setup: &CliSetup, ctx: &RunContext, attempt: &Attempt) -> CliCommand {
    let mut args = vec!["run".to_owned(), "--format".to_owned(), "json".to_owned()];
    if let Some(model) = model_flag(ctx) {
        args.extend(["--model".to_owned(), model]);
    }
    if let Some(session) = &attempt.resume {
        args.extend(["--session".to_owned(), session.clone()]);
    }
    args.push(attempt.message.clone());
    let mut env = setup.base_env(ctx);
    // Its bash tool must wait as long as a handoff through chorus-tools may take.
    env.push((
        "OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS".to_owned(),
        setup.bash_timeout.as_millis().to_string(),
    ));
    env.push((
        "OPENCODE_CONFIG_CONTENT".to_owned(),
        config(setup, ctx).to_string(),
    ));
    for flag in [
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_SHARE",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
    ] {
        env.push((flag.to_owned(), "1".to_owned()));
    }
    if ctx.provider.base_url.is_some() {
        env.push(("OPENCODE_DISABLE_MODELS_FETCH".to_owned(), "1".to_owned()));
    }
    setup.command(ctx, args, env)
}

/// What the event stream said so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stream {
    pub session_id: Option<String>,
    /// The last text the agent wrote.
    pub last_text: Option<String>,
    /// An `error` event's message.
    pub error: Option<String>,
    /// Characters the model wrote in the current step (its text and tool
    /// calls), and everything the conversation has carried so far: a step
    /// whose usage OpenCode does not know is estimated from them.
    step_chars: usize,
    seen_chars: usize,
}

impl Stream {
    /// Reads one JSON event line; returns what it shows the agent doing.
    pub fn line(&mut self, line: &str) -> Vec<Progress> {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            return Vec::new();
        };
        let mut progress = Vec::new();
        super::note_session(
            &mut self.session_id,
            event.get("sessionID").and_then(Value::as_str),
            &mut progress,
        );
        let part = event.get("part").cloned().unwrap_or(Value::Null);
        let said = ["/text", "/state/input", "/state/output"]
            .iter()
            .filter_map(|p| part.pointer(p))
            .map(|v| v.as_str().map_or_else(|| v.to_string().len(), str::len))
            .sum::<usize>();
        self.step_chars += said;
        self.seen_chars += said;
        match event.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                if !text.trim().is_empty() {
                    self.last_text = Some(text.to_owned());
                    progress.push(Progress::Text(cut(text, PROGRESS_TEXT_BYTES)));
                }
            }
            // A call of a tool OpenCode was not given: its `invalid` tool
            // answers it, naming the tool the model asked for.
            Some("tool_use") if part.get("tool").and_then(Value::as_str) == Some(INVALID_TOOL) => {
                let asked = part.pointer("/state/input/tool").and_then(Value::as_str);
                let tool = super::catalog_name(asked.unwrap_or("?"), "chorus_");
                let reason = part
                    .pointer("/state/input/error")
                    .or_else(|| part.pointer("/state/output"))
                    .and_then(Value::as_str)
                    .unwrap_or("no such tool");
                let input = json!({});
                progress.push(Progress::ToolUse {
                    tool: tool.clone(),
                    input: input.clone(),
                });
                progress.push(Progress::Denied {
                    tool,
                    input,
                    reason: cut(reason, PROGRESS_TEXT_BYTES),
                    by: "cli",
                });
            }
            Some("tool_use") => {
                let tool = super::catalog_name(
                    part.get("tool").and_then(Value::as_str).unwrap_or("?"),
                    "chorus_",
                );
                let input = part.pointer("/state/input").cloned().unwrap_or(json!({}));
                progress.push(Progress::ToolUse {
                    tool: tool.clone(),
                    input: input.clone(),
                });
                // Refused by the generated permission rules (not run at all).
                let error = part.pointer("/state/error").and_then(Value::as_str);
                if part.pointer("/state/status").and_then(Value::as_str) == Some("error")
                    && let Some(error) = error.filter(|e| e.contains(REFUSAL))
                {
                    let reason = error.split(" Here are").next().unwrap_or(error);
                    progress.push(Progress::Denied {
                        tool,
                        input,
                        reason: cut(reason, PROGRESS_TEXT_BYTES),
                        by: "cli",
                    });
                }
            }
            // A step is one model call. OpenCode says 0 for a model it has no
            // price of: that is no price, not a free call.
            Some("step_finish") => {
                let step_chars = std::mem::take(&mut self.step_chars);
                let tokens = |path: &str| part.pointer(path).and_then(Value::as_u64).unwrap_or(0);
                let model = part
                    .get("modelID")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if tokens("/tokens/input") + tokens("/tokens/output") == 0 {
                    // No usage known: estimated, never taken as free.
                    progress.push(Progress::ModelCall(ModelCall::estimate(
                        model,
                        self.seen_chars,
                        step_chars,
                    )));
                    return progress;
                }
                let (cache_read, cache_write) =
                    (tokens("/tokens/cache/read"), tokens("/tokens/cache/write"));
                let cost = Usage::pico_usd(part.get("cost").and_then(Value::as_f64).unwrap_or(0.0));
                progress.push(Progress::ModelCall(ModelCall {
                    model: model.to_owned(),
                    input_tokens: tokens("/tokens/input") + cache_read + cache_write,
                    output_tokens: tokens("/tokens/output") + tokens("/tokens/reasoning"),
                    cache_read_tokens: cache_read,
                    cache_write_tokens: cache_write,
                    reported_pico_usd: (cost > 0).then_some(cost),
                    estimated: false,
                }));
            }
            Some("error") => {
                let message = event
                    .pointer("/error/data/message")
                    .or_else(|| event.pointer("/error/message"))
                    .and_then(Value::as_str)
                    .map_or_else(|| event["error"].to_string(), ToOwned::to_owned);
                self.error = Some(message);
            }
            _ => {}
        }
        progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_progress_session_and_model_calls() {
        let mut stream = Stream::default();
        let lines = [
            r#"{"type":"step_start","timestamp":1,"sessionID":"ses_1","part":{"type":"step-start"}}"#,
            r#"{"type":"tool_use","timestamp":2,"sessionID":"ses_1","part":{"tool":"bash","state":{"status":"completed","input":{"command":"chorus-tools '{}'"},"output":"ok"}}}"#,
            r#"{"type":"step_finish","timestamp":3,"sessionID":"ses_1","part":{"reason":"tool-calls","cost":0.001,"tokens":{"input":100,"output":20,"reasoning":5,"cache":{"read":10,"write":0}}}}"#,
            r#"{"type":"text","timestamp":4,"sessionID":"ses_1","part":{"type":"text","text":"FINAL: done"}}"#,
            r#"{"type":"step_finish","timestamp":5,"sessionID":"ses_1","part":{"reason":"stop","cost":0,"modelID":"local","tokens":{"input":120,"output":10}}}"#,
        ];
        let progress: Vec<Progress> = lines.iter().flat_map(|l| stream.line(l)).collect();
        assert_eq!(
            progress,
            [
                Progress::Session("ses_1".to_owned()),
                Progress::ToolUse {
                    tool: "bash".to_owned(),
                    input: json!({"command": "chorus-tools '{}'"})
                },
                Progress::ModelCall(ModelCall {
                    model: String::new(),
                    input_tokens: 110,
                    output_tokens: 25,
                    cache_read_tokens: 10,
                    cache_write_tokens: 0,
                    reported_pico_usd: Some(1_000_000_000),
                    estimated: false,
                }),
                Progress::Text("FINAL: done".to_owned()),
                // A cost of 0 is no price: the table prices it, or it is unpriced.
                Progress::ModelCall(ModelCall {
                    model: "local".into(),
                    input_tokens: 120,
                    output_tokens: 10,
                    reported_pico_usd: None,
                    estimated: false,
                    ..ModelCall::default()
                }),
            ]
        );
        assert_eq!(stream.last_text.as_deref(), Some("FINAL: done"));
    }

    #[test]
    fn a_call_refused_by_the_permission_rules_is_a_denial() {
        let mut stream = Stream::default();
        let progress = stream.line(
            r#"{"type":"tool_use","sessionID":"s","part":{"tool":"bash","state":{"status":"error","input":{"command":"touch x"},"error":"The user has specified a rule which prevents you from using this specific tool call. Here are some of the relevant rules [...]"}}}"#,
        );
        assert_eq!(
            progress[2..],
            [Progress::Denied {
                tool: "bash".to_owned(),
                input: json!({"command": "touch x"}),
                reason: "The user has specified a rule which prevents you from using this specific tool call.".to_owned(),
                by: "cli",
            }]
        );
        // A command that ran and failed is no denial.
        let ran = stream.line(
            r#"{"type":"tool_use","sessionID":"s","part":{"tool":"bash","state":{"status":"error","input":{"command":"false"},"error":"exit 1"}}}"#,
        );
        assert!(!ran.iter().any(|p| matches!(p, Progress::Denied { .. })));
    }

    /// A call of a tool OpenCode was not given, as 1.18.33 prints it.
    #[test]
    fn a_call_of_a_tool_opencode_was_not_given_is_a_denial() {
        let mut stream = Stream::default();
        let progress = stream.line(
            r#"{"type":"tool_use","sessionID":"s","part":{"type":"tool","tool":"invalid","callID":"call_3","state":{"status":"completed","input":{"tool":"chorus_file_write","error":"Model tried to call unavailable tool 'chorus_file_write'. Available tools: chorus_file_read, invalid."},"output":"The arguments provided to the tool are invalid: Model tried to call unavailable tool 'chorus_file_write'. Available tools: chorus_file_read, invalid."}}}"#,
        );
        assert_eq!(
            progress[1..],
            [
                Progress::ToolUse {
                    tool: "file.write".to_owned(),
                    input: json!({}),
                },
                Progress::Denied {
                    tool: "file.write".to_owned(),
                    input: json!({}),
                    reason: "Model tried to call unavailable tool 'chorus_file_write'. Available tools: chorus_file_read, invalid.".to_owned(),
                    by: "cli",
                }
            ]
        );
    }

    /// A step whose usage OpenCode does not know is no free call: its tokens
    /// are estimated from what it carried.
    #[test]
    fn a_step_without_usage_is_estimated() {
        let mut stream = Stream::default();
        stream.line(r#"{"type":"text","sessionID":"s","part":{"type":"text","text":"12345678"}}"#);
        let progress = stream.line(
            r#"{"type":"step_finish","sessionID":"s","part":{"reason":"stop","cost":0,"modelID":"m","tokens":{"input":0,"output":0}}}"#,
        );
        assert_eq!(
            progress,
            [Progress::ModelCall(ModelCall {
                model: "m".into(),
                input_tokens: 2,
                output_tokens: 2,
                estimated: true,
                ..ModelCall::default()
            })]
        );
    }

    #[test]
    fn the_api_a_model_names_and_the_model_list_are_its_default_reach() {
        use super::super::provider::CliProvider as _;
        assert_eq!(
            Opencode::default_hosts(Some("openai/gpt-5")),
            ["api.openai.com", "models.dev"]
        );
        assert_eq!(
            Opencode::default_hosts(None),
            ["api.anthropic.com", "models.dev"]
        );
    }

    #[test]
    fn an_error_event_is_kept() {
        let mut stream = Stream::default();
        stream.line(r#"{"type":"error","sessionID":"s","error":{"name":"APIError","data":{"message":"rate limited"}}}"#);
        assert_eq!(stream.error.as_deref(), Some("rate limited"));
    }
}
