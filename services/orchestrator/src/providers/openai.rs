//! OpenAI-compatible chat completions: `POST {base}/chat/completions` with the
//! run's tools declared from the catalog's JSON Schemas. The tool loop runs here:
//! each tool call the model makes goes through the same executor path as a CLI
//! agent's chorus-tools call ([`ToolRouter`]), its result goes back as a `tool`
//! message, until the model answers without tool calls, submits its completion
//! report, or the turn limit is reached. Every message is stored as it is added,
//! so the conversation can be resumed. 429 and 5xx answers (and connection
//! failures) are retried with exponential backoff, honouring `Retry-After`.

use std::time::Duration;

use chorus_catalog::Executor;
use serde_json::{Value, json};
use tokio::time::sleep;
use tracing::{Instrument as _, debug, warn};

use super::{Attempt, AttemptEnd, AttemptError, PROGRESS_TEXT_BYTES, Progress, RunContext, cut};
use crate::domain::{AgentKind, ModelCall, Usage};
use crate::execution::ApiLimits;
use crate::execution::tools::{ToolCallError, ToolRouter};
use crate::state::AppState;
use crate::store::Store;

/// Longest wait a `Retry-After` header may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The function name a tool gets: OpenAI allows `[a-zA-Z0-9_-]` only.
pub use chorus_catalog::wire_name as function_name;

/// The `tools` array of a run: its granted tools that Chorus executes (native
/// CLI tools such as web.search have no API equivalent), in catalog order.
pub fn tool_definitions(granted: &[String], kind: AgentKind) -> Vec<Value> {
    chorus_catalog::TOOLS
        .iter()
        .filter(|t| t.executor != Executor::AgentCli)
        .filter(|t| t.always_granted || granted.iter().any(|g| g == t.name))
        .filter(|t| match kind {
            AgentKind::UserDefined => t.name != "planner-output",
            AgentKind::Internal => t.name != "completion-report",
        })
        .map(|t| {
            let mut parameters = t.input_schema().clone();
            if let Some(object) = parameters.as_object_mut() {
                object.remove("$schema");
                object.remove("title");
            }
            json!({
                "type": "function",
                "function": {
                    "name": function_name(t.name),
                    "description": t.description,
                    "parameters": parameters,
                }
            })
        })
        .collect()
}

/// The catalog tool a function name stands for. Whether the run may call it is
/// for the services to decide (and record), as for any other agent.
fn tool_of(function: &str) -> Option<&'static str> {
    chorus_catalog::by_wire_name(function).map(|t| t.name)
}

/// Runs one attempt: a fresh conversation (system prompt, message), or, when
/// `attempt.resume` is set, the stored one followed by the message. Each
/// turn asks the model, stores what it said, and answers its tool calls,
/// until it answers without calls or submits its report.
pub async fn attempt(
    client: &reqwest::Client,
    limits: &ApiLimits,
    state: &AppState,
    router: &ToolRouter,
    ctx: &RunContext,
    attempt: &Attempt,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<AttemptEnd, AttemptError> {
    let store = &state.store;
    let mut end = AttemptEnd::default();
    let (url, model) = endpoint(ctx).map_err(|reason| failed(reason, &end))?;
    let mut messages = opening(store, ctx, attempt, &end).await?;
    let tools = tool_definitions(&ctx.tools, ctx.agent_kind);
    for turn in 1..=limits.max_turns {
        let request = Turn {
            client,
            limits,
            url: &url,
            model,
            tools: &tools,
            turn,
        };
        let message = request
            .ask(state, ctx, &messages, &mut end, progress)
            .await?;
        let text = message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if !text.trim().is_empty() {
            progress(Progress::Text(cut(&text, PROGRESS_TEXT_BYTES)));
            end.output = Some(text.clone());
        }
        let calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // Keep only the fields the next request needs.
        let mut stored = json!({ "role": "assistant", "content": text });
        if !calls.is_empty() {
            stored["tool_calls"] = Value::Array(calls.clone());
        }
        persist(store, ctx, &mut messages, vec![stored], &end).await?;
        if calls.is_empty() {
            return Ok(end);
        }
        let mut reported = false;
        for call in &calls {
            let (content, report) = answer_call(router, ctx, call, progress, &end).await?;
            reported |= report;
            let id = call.get("id").and_then(Value::as_str).unwrap_or("");
            let result = json!({ "role": "tool", "tool_call_id": id, "content": content });
            persist(store, ctx, &mut messages, vec![result], &end).await?;
        }
        if reported {
            // The report is the agent's last action: no further model call.
            return Ok(end);
        }
    }
    Err(failed(
        format!(
            "the model used all {} turns of this attempt without finishing",
            limits.max_turns
        ),
        &end,
    ))
}

/// The attempt failed with `reason`, after what `end` holds.
fn failed(reason: String, end: &AttemptEnd) -> AttemptError {
    AttemptError::Failed {
        reason,
        partial: end.clone(),
    }
}

/// The chat-completions URL and the model of the run's provider.
fn endpoint(ctx: &RunContext) -> Result<(String, &str), String> {
    let Some(base_url) = ctx.provider.base_url.as_deref() else {
        return Err(format!("provider '{}' has no base URL", ctx.provider.name));
    };
    let Some(model) = ctx.model.as_deref() else {
        return Err(format!(
            "no model: set one on agent '{}' or provider '{}'",
            ctx.agent, ctx.provider.name
        ));
    };
    Ok((
        format!("{}/chat/completions", base_url.trim_end_matches('/')),
        model,
    ))
}

/// The conversation an attempt begins with, stored: the stored one when it
/// resumes (every call it left unanswered answered as interrupted), else the
/// system prompt; then the attempt's message.
async fn opening(
    store: &Store,
    ctx: &RunContext,
    attempt: &Attempt,
    end: &AttemptEnd,
) -> Result<Vec<Value>, AttemptError> {
    let mut messages = if attempt.resume.is_some() {
        store
            .run_messages(ctx.run_id)
            .await
            .map_err(|e| failed(format!("cannot load the stored conversation: {e}"), end))?
    } else {
        Vec::new()
    };
    let mut new = Vec::new();
    if messages.is_empty() {
        new.push(json!({ "role": "system", "content": ctx.system_prompt }));
    }
    // A conversation taken over from a replica that stopped mid-call: every
    // call the model made gets an answer before the next message.
    new.extend(unanswered_calls(&messages));
    new.push(json!({ "role": "user", "content": attempt.message }));
    persist(store, ctx, &mut messages, new, end).await?;
    Ok(messages)
}

/// One model request of an attempt.
struct Turn<'a> {
    client: &'a reqwest::Client,
    limits: &'a ApiLimits,
    url: &'a str,
    model: &'a str,
    tools: &'a [Value],
    turn: u32,
}

impl Turn<'_> {
    /// Asks the model what comes after `messages`; its message (usage added
    /// to `end`).
    async fn ask(
        &self,
        state: &AppState,
        ctx: &RunContext,
        messages: &[Value],
        end: &mut AttemptEnd,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Value, AttemptError> {
        let body = json!({
            "model": self.model,
            "messages": messages,
            "tools": self.tools,
            "tool_choice": "auto",
            "stream": false,
        });
        debug!(run_id = %ctx.run_id, turn = self.turn, "model request");
        let span = model_span(ctx, self.model);
        // Recorded as it is sent: a stop, or a crash of this replica, before
        // its answer is read leaves it counted (estimated from its size).
        let sent_chars = body.to_string().len();
        let estimate = ModelCall::estimate(self.model, sent_chars, 0);
        let sent = super::ledger::record_call_sent(state, ctx, estimate).await;
        let answer = match post(
            self.client,
            self.limits,
            ctx,
            (self.url, &body),
            end,
            progress,
        )
        .instrument(span.clone())
        .await
        {
            Ok(answer) => answer,
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                // Refused by the API (an error status): nothing was billed.
                // Stopped or timed out on the way: it stays as estimated.
                if matches!(e, AttemptError::Failed { .. }) {
                    super::ledger::withdraw_call(state, ctx, sent).await;
                }
                return Err(e);
            }
        };
        let call = call_of(&answer, self.model, sent_chars);
        answered(&span, &answer, &call);
        // Recorded before any tool call it asks for runs: a call that
        // reaches a limit of the task's budget stops the run here.
        if super::ledger::record_call_answered(state, ctx, sent, call).await {
            return Err(AttemptError::Stopped {
                partial: end.clone(),
            });
        }
        answer
            .pointer("/choices/0/message")
            .cloned()
            .ok_or_else(|| {
                failed(
                    format!(
                        "the model API answered without choices[0].message: {}",
                        cut(&answer.to_string(), 500)
                    ),
                    end,
                )
            })
    }
}

/// Makes one tool call the model asked for (or refuses it: an unknown tool,
/// arguments that are not a JSON object), through the services with the
/// run's token; what the model is told, and whether it was the run's report.
/// The run's end (timeout, cancel) stops the call at once: the dropped
/// request stops the tool in tool-exec too.
async fn answer_call(
    router: &ToolRouter,
    ctx: &RunContext,
    call: &Value,
    progress: &mut (dyn FnMut(Progress) + Send),
    end: &AttemptEnd,
) -> Result<(String, bool), AttemptError> {
    let function = call
        .pointer("/function/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let raw = call
        .pointer("/function/arguments")
        .and_then(Value::as_str)
        .unwrap_or("{}");
    // A call that cannot be made is answered to the model and recorded.
    let mut invalid = |reason: String| {
        progress(Progress::Denied {
            tool: cut(function, 200),
            input: Value::String(cut(raw, 2048)),
            reason: reason.clone(),
            by: "chorus",
        });
        Ok((error_content("invalid_argument", &reason), false))
    };
    let (tool, arguments) = match (tool_of(function), serde_json::from_str::<Value>(raw)) {
        (None, _) => return invalid(format!("unknown tool '{function}'")),
        (Some(_), Err(e)) => return invalid(format!("the arguments are not valid JSON: {e}")),
        (Some(_), Ok(other)) if !other.is_object() && !other.is_null() => {
            return invalid(format!("the arguments must be a JSON object, not {other}"));
        }
        (Some(tool), Ok(arguments)) => (tool, arguments),
    };
    progress(Progress::ToolUse {
        tool: tool.to_owned(),
        input: arguments.clone(),
    });
    let called = tokio::select! {
        r = router.call(tool, arguments) => r,
        () = ctx.clock.expired() => return Err(timed_out(ctx, end)),
        () = ctx.stop.cancelled() => return Err(AttemptError::Stopped { partial: end.clone() }),
    };
    Ok(match called {
        Ok(output) => (
            output.to_string(),
            matches!(tool, "completion-report" | "planner-output"),
        ),
        Err(ToolCallError { code, message }) => (error_content(&code, &message), false),
    })
}

/// Answers to the tool calls of the conversation's last assistant message
/// that have none (the run's replica stopped while they ran): each says it
/// was interrupted.
fn unanswered_calls(messages: &[Value]) -> Vec<Value> {
    let Some(at) = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
    else {
        return Vec::new();
    };
    let answered: Vec<&str> = messages[at + 1..]
        .iter()
        .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
        .collect();
    messages[at]
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|call| call.get("id").and_then(Value::as_str))
        .filter(|id| !answered.contains(id))
        .map(|id| {
            json!({
                "role": "tool",
                "tool_call_id": id,
                "content": error_content(
                    "unavailable",
                    "interrupted: the orchestrator running you stopped before this call finished; it may or may not have taken effect, so check before repeating it",
                ),
            })
        })
        .collect()
}

fn error_content(code: &str, message: &str) -> String {
    json!({ "error": { "code": code, "message": message } }).to_string()
}

/// A model request's span, with the GenAI conventions' attributes.
fn model_span(ctx: &RunContext, model: &str) -> tracing::Span {
    tracing::info_span!(
        "chat",
        otel.name = %format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %ctx.provider.kind.as_str(),
        gen_ai.request.model = %model,
        gen_ai.agent.name = %ctx.agent,
        gen_ai.response.id = tracing::field::Empty,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// What the answer says about itself, on its span.
fn answered(span: &tracing::Span, answer: &Value, usage: &ModelCall) {
    let text = |pointer: &str| answer.pointer(pointer).and_then(Value::as_str);
    if let Some(id) = text("/id") {
        span.record("gen_ai.response.id", id);
    }
    if let Some(model) = text("/model") {
        span.record("gen_ai.response.model", model);
    }
    if let Some(reason) = text("/choices/0/finish_reason") {
        span.record("gen_ai.response.finish_reasons", reason);
    }
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
}

/// The model call an answer reports: its tokens (`prompt_tokens` counts the
/// cached ones too), and its cost when the API says it (`usage.cost`, as
/// OpenRouter does). An answer with no usage is a call of unknown usage: its
/// tokens are estimated from the `sent_chars` of the request and what the
/// answer holds, and it is never priced.
fn call_of(answer: &Value, asked: &str, sent_chars: usize) -> ModelCall {
    let model = answer
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(asked);
    let Some(usage) = answer.get("usage").filter(|u| {
        u.get("prompt_tokens").and_then(Value::as_u64).is_some()
            || u.get("completion_tokens").and_then(Value::as_u64).is_some()
    }) else {
        let said = answer
            .pointer("/choices/0/message")
            .map_or(0, |m| m.to_string().len());
        return ModelCall::estimate(model, sent_chars, said);
    };
    let count = |path: &str| {
        usage
            .pointer(&format!("/{path}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let cost = usage
        .get("cost")
        .and_then(Value::as_f64)
        .map(Usage::pico_usd);
    ModelCall {
        model: model.to_owned(),
        input_tokens: count("prompt_tokens"),
        output_tokens: count("completion_tokens"),
        cache_read_tokens: count("prompt_tokens_details/cached_tokens"),
        cache_write_tokens: 0,
        reported_pico_usd: cost,
        estimated: false,
    }
}

async fn persist(
    store: &Store,
    ctx: &RunContext,
    messages: &mut Vec<Value>,
    new: Vec<Value>,
    end: &AttemptEnd,
) -> Result<(), AttemptError> {
    store
        .append_run_messages(ctx.run_id, ctx.epoch, new.clone())
        .await
        .map_err(|e| AttemptError::Failed {
            reason: format!("cannot store the conversation: {e}"),
            partial: end.clone(),
        })?;
    messages.extend(new);
    Ok(())
}

/// One model call with retries, each told as progress (the run's history
/// shows why and how long it waited); obeys the run's deadline and stop token.
async fn post(
    client: &reqwest::Client,
    limits: &ApiLimits,
    ctx: &RunContext,
    (url, body): (&str, &Value),
    end: &AttemptEnd,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Value, AttemptError> {
    let mut backoff = limits.backoff;
    let mut last_error = String::new();
    for try_number in 0..=limits.max_retries {
        let mut request = client.post(url).timeout(limits.request_timeout).json(body);
        if let Some(key) = &ctx.provider.api_key {
            request = request.bearer_auth(key);
        }
        let response = tokio::select! {
            r = request.send() => r,
            () = ctx.clock.expired() => return Err(timed_out(ctx, end)),
            () = ctx.stop.cancelled() => return Err(AttemptError::Stopped { partial: end.clone() }),
        };
        let mut wait = backoff;
        match response {
            Ok(response) if response.status().is_success() => {
                return response
                    .json::<Value>()
                    .await
                    .map_err(|e| AttemptError::Failed {
                        reason: format!(
                            "the model API at {url} answered with a body that is not JSON: {e}"
                        ),
                        partial: end.clone(),
                    });
            }
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(&response);
                let text = response.text().await.unwrap_or_default();
                last_error = format!(
                    "the model API at {url} answered {status}: {}",
                    cut(text.trim(), 500)
                );
                if !(status.as_u16() == 429 || status.is_server_error()) {
                    return Err(AttemptError::Failed {
                        reason: last_error,
                        partial: end.clone(),
                    });
                }
                if let Some(after) = retry_after {
                    wait = after;
                }
            }
            Err(e) => {
                last_error = format!("cannot reach the model API at {url}: {e}");
            }
        }
        if try_number == limits.max_retries {
            break;
        }
        warn!(run_id = %ctx.run_id, error = %last_error, retry_in = ?wait, "model call failed; retrying");
        progress(Progress::Retry {
            reason: last_error.clone(),
            retry: try_number + 1,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        });
        tokio::select! {
            () = sleep(wait) => {}
            () = ctx.clock.expired() => return Err(timed_out(ctx, end)),
            () = ctx.stop.cancelled() => return Err(AttemptError::Stopped { partial: end.clone() }),
        }
        backoff = backoff.saturating_mul(2);
    }
    Err(AttemptError::Failed {
        reason: format!(
            "{last_error} (gave up after {} retries)",
            limits.max_retries
        ),
        partial: end.clone(),
    })
}

/// The wait a `Retry-After` header in seconds asks for, at most
/// [`MAX_RETRY_AFTER`].
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|secs| Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

fn timed_out(ctx: &RunContext, end: &AttemptEnd) -> AttemptError {
    AttemptError::TimedOut {
        reason: format!("timed out after {} s", ctx.timeout.as_secs()),
        partial: end.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_cut_off_by_a_stopped_replica_are_answered_as_interrupted() {
        let call = |id: &str| json!({ "id": id, "type": "function", "function": { "name": "bash", "arguments": "{}" } });
        let conversation = [
            json!({ "role": "system", "content": "s" }),
            json!({ "role": "user", "content": "u" }),
            json!({ "role": "assistant", "content": "", "tool_calls": [call("a")] }),
            json!({ "role": "tool", "tool_call_id": "a", "content": "ok" }),
            json!({ "role": "assistant", "content": "", "tool_calls": [call("b"), call("c")] }),
            json!({ "role": "tool", "tool_call_id": "b", "content": "ok" }),
        ];
        let answers = unanswered_calls(&conversation);
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0]["tool_call_id"], "c");
        assert!(
            answers[0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("interrupted"))
        );
        // Every call answered, or none made: nothing to add.
        assert!(unanswered_calls(&conversation[..4]).is_empty());
        assert!(unanswered_calls(&conversation[..2]).is_empty());
    }

    #[test]
    fn tools_are_the_granted_ones_with_api_safe_names() {
        let granted = vec!["file.read".to_owned(), "web.search".to_owned()];
        let tools = tool_definitions(&granted, AgentKind::UserDefined);
        let names: Vec<&str> = tools
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, ["file_read", "help", "completion-report"]);
        let read = &tools[0]["function"];
        assert_eq!(read["parameters"]["type"], "object");
        assert!(
            read["parameters"]["properties"]["path"].is_object(),
            "{read}"
        );
        assert!(read["parameters"].get("$schema").is_none());
        let planner = tool_definitions(&["planner-output".to_owned()], AgentKind::Internal);
        let names: Vec<&str> = planner
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, ["help", "planner-output"]);
    }

    /// Every function an API agent can be given (a user's agent granted
    /// everything, and the planner) has an object schema by the MCP rules.
    #[test]
    fn every_function_definition_is_an_object_schema() {
        let everything: Vec<String> = chorus_catalog::TOOLS
            .iter()
            .map(|t| t.name.to_owned())
            .collect();
        for kind in [AgentKind::UserDefined, AgentKind::Internal] {
            for tool in tool_definitions(&everything, kind) {
                let parameters = &tool["function"]["parameters"];
                let problems = chorus_catalog::mcp_rules::problems(parameters);
                assert!(
                    problems.is_empty(),
                    "{}: {problems:?}",
                    tool["function"]["name"]
                );
            }
        }
    }
}
