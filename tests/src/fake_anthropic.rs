//! A scripted fake of the Anthropic Messages API, standing in for the model
//! behind the real Claude Code CLI (`ANTHROPIC_BASE_URL=<base_url>`).
//!
//! The script is stateless, so retried requests are harmless: a main-conversation
//! request (one that declares tools) is answered with `replies[i]`, where `i` is the
//! number of `tool_result` blocks in the user messages it carries. Past the end of
//! the script the answer is the text "done". One fake may hold several scripts,
//! each for the conversations whose messages hold its marker (a planner's second
//! conversation, which carries the answers, plans instead of asking). Requests without tools (side requests)
//! get a short text and do not consume the script.
//!
//! `POST /v1/messages` answers SSE when the body says `"stream": true` (the CLI
//! always streams) and plain JSON otherwise; `POST /v1/messages/count_tokens`
//! answers `{"input_tokens": 42}`; anything else is a 404 Anthropic-style error.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

use crate::fake_http::{HttpServer, json_response, lock, parse_body, sse_response};

/// One scripted model turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A short text block plus a `tool_use` of `Bash` running `command`
    /// (stop_reason `tool_use`).
    Bash { command: String },
    /// A `tool_use` of the tool `name` (an MCP tool: `mcp__chorus__file_read`)
    /// with `input` (stop_reason `tool_use`).
    Tool { name: String, input: Value },
    /// A text block (stop_reason `end_turn`).
    Text(String),
}

impl Reply {
    /// `Reply::Bash` running `command`.
    pub fn bash(command: impl Into<String>) -> Self {
        Reply::Bash {
            command: command.into(),
        }
    }

    /// `Reply::Tool`.
    pub fn tool(name: impl Into<String>, input: Value) -> Self {
        Reply::Tool {
            name: name.into(),
            input,
        }
    }

    /// `Reply::Text`.
    pub fn text(text: impl Into<String>) -> Self {
        Reply::Text(text.into())
    }
}

/// Text of the answer past the end of the script.
pub const DONE_TEXT: &str = "done";
/// Text of the answer to requests that declare no tools.
pub const SIDE_TEXT: &str = "fake side reply";

/// Input and output tokens each answer reports (`message_start`, `message_delta`).
pub const INPUT_TOKENS: u64 = 10;
pub const OUTPUT_TOKENS: u64 = 5;

/// How the fake serves its main calls (those that declare tools), counted
/// from 0 in arrival order over all its conversations.
#[derive(Debug, Clone, Copy)]
pub struct Serving {
    /// The output tokens the `n`th call reports in its `message_delta`.
    pub output_tokens: fn(usize) -> u64,
    /// The call held open: its `message_start` and a text block
    /// ([`HELD_TEXT`]) are sent, then nothing more until the client goes (a
    /// call in flight when its run is stopped).
    pub hold: Option<usize>,
}

impl Default for Serving {
    fn default() -> Self {
        Self {
            output_tokens: |_| OUTPUT_TOKENS,
            hold: None,
        }
    }
}

/// What the fake served: the calls answered whole, their tokens, and the
/// input tokens of the call it holds open (if it holds one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub held_input_tokens: u64,
}

struct Shared {
    /// (marker, script): a conversation follows the first script whose marker
    /// its messages hold.
    scripts: Vec<(String, Vec<Reply>)>,
    serving: Serving,
    main_calls: std::sync::atomic::AtomicUsize,
    served: Mutex<Served>,
    /// Set once the held call's first events are sent.
    holding: tokio::sync::watch::Sender<bool>,
    requests: Mutex<Vec<Value>>,
    /// (tool_use_id, text, is_error), first sighting order.
    tool_results: Mutex<Vec<(String, String, bool)>>,
}

/// A fresh id with `prefix`, unique across every fake in this process and (by a
/// per-process tag) across processes: a resumed session's history must never hold
/// two tool_use blocks with the same id, or the CLI merges them.
fn unique_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    static TAG: OnceLock<String> = OnceLock::new();
    let tag = TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{:x}{:x}", std::process::id(), nanos)
    });
    format!("{prefix}{tag}_{:04}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The fake Messages API; serves until dropped.
pub struct FakeAnthropic {
    server: HttpServer,
    shared: Arc<Shared>,
}

impl FakeAnthropic {
    /// Serves on 127.0.0.1:0 until dropped.
    pub async fn start(replies: Vec<Reply>) -> FakeAnthropic {
        Self::start_scripts(vec![("", replies)]).await
    }

    /// Serves on 127.0.0.1:0 until dropped: each conversation follows the
    /// first script whose marker the text of its messages holds (`""` holds
    /// for every conversation).
    pub async fn start_scripts(scripts: Vec<(&str, Vec<Reply>)>) -> FakeAnthropic {
        Self::start_serving(scripts, Serving::default()).await
    }

    /// [`FakeAnthropic::start_scripts`], serving as `serving` says.
    pub async fn start_serving(
        scripts: Vec<(&str, Vec<Reply>)>,
        serving: Serving,
    ) -> FakeAnthropic {
        let shared = Arc::new(Shared {
            serving,
            main_calls: std::sync::atomic::AtomicUsize::new(0),
            served: Mutex::new(Served::default()),
            holding: tokio::sync::watch::Sender::new(false),
            scripts: scripts
                .into_iter()
                .map(|(marker, replies)| (marker.to_owned(), replies))
                .collect(),
            requests: Mutex::new(Vec::new()),
            tool_results: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        let server = HttpServer::start(router).await;
        FakeAnthropic { server, shared }
    }

    /// `http://127.0.0.1:PORT`, the value for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Every JSON body POSTed to /v1/messages, in arrival order (a body that is not
    /// JSON is kept as a JSON string).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }

    /// Every `tool_result` block seen in the user messages of main-conversation
    /// requests, as (text content, is_error), once per `tool_use_id` (the CLI resends
    /// the whole history each turn), in the order first seen.
    pub fn tool_results(&self) -> Vec<(String, bool)> {
        lock(&self.shared.tool_results)
            .iter()
            .map(|(_, text, is_error)| (text.clone(), *is_error))
            .collect()
    }

    /// What it has served so far.
    pub fn served(&self) -> Served {
        *lock(&self.shared.served)
    }

    /// Waits until the held call's first events are sent.
    pub async fn holding(&self) {
        let mut rx = self.shared.holding.subscribe();
        rx.wait_for(|held| *held)
            .await
            .expect("the fake is serving");
    }

    /// Main-conversation requests (those that declare tools), in arrival order.
    pub fn main_requests(&self) -> Vec<Value> {
        self.requests().into_iter().filter(declares_tools).collect()
    }
}

/// The real Claude Code CLI for a test that needs it; `None` (with a notice) to
/// skip the test when none is named (see [`real_cli_or_skip`]).
pub fn claude_cli_or_skip() -> Option<PathBuf> {
    real_cli_or_skip("CHORUS_TEST_CLAUDE_BIN", "the Claude Code CLI")
}

/// The real CLI that `variable` names, for a test that needs it; `None` (with a
/// notice) to skip the test when it names none, which fails instead under
/// `CHORUS_TEST_REQUIRE_REAL_CLIS=1` (as in CI, where `.ci/run` installs them).
pub fn real_cli_or_skip(variable: &str, what: &str) -> Option<PathBuf> {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .filter(|p| p.exists());
    if path.is_none() {
        assert!(
            !require_real_clis(),
            "CHORUS_TEST_REQUIRE_REAL_CLIS=1 but {variable} names no {what} (.ci/run installs it)"
        );
        eprintln!("skipped: set {variable} to {what} to run this test");
    }
    path
}

/// True when `CHORUS_TEST_REQUIRE_REAL_CLIS=1`: tests that need a real CLI must
/// fail instead of skipping when it is missing (`.ci/run` sets it).
pub fn require_real_clis() -> bool {
    std::env::var("CHORUS_TEST_REQUIRE_REAL_CLIS").is_ok_and(|v| v == "1")
}

fn declares_tools(body: &Value) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty())
}

/// The `tool_result` blocks of all user messages: (tool_use_id, text, is_error).
fn tool_result_blocks(body: &Value) -> Vec<(String, String, bool)> {
    let messages = body.get("messages").and_then(Value::as_array);
    messages
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| {
            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
            let is_error = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            (id.to_owned(), content_text(b.get("content")), is_error)
        })
        .collect()
}

/// A tool_result's content: a string, or the text blocks of a list joined by "\n".
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

async fn messages(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let body = match parse_body(&body) {
        Ok(body) => body,
        Err(raw) => {
            lock(&shared.requests).push(raw);
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "fake: body is not JSON",
            );
        }
    };
    lock(&shared.requests).push(body.clone());

    let (blocks, stop_reason) = if declares_tools(&body) {
        let results = tool_result_blocks(&body);
        {
            let mut seen = lock(&shared.tool_results);
            for result in &results {
                if !seen.iter().any(|(id, ..)| *id == result.0) {
                    seen.push(result.clone());
                }
            }
        }
        let said = body
            .get("messages")
            .map(Value::to_string)
            .unwrap_or_default();
        let script = shared
            .scripts
            .iter()
            .find(|(marker, _)| said.contains(marker.as_str()))
            .map(|(_, replies)| replies.as_slice())
            .unwrap_or_default();
        match script.get(results.len()) {
            Some(Reply::Bash { command }) => {
                let id = unique_id("toolu_fake");
                (
                    vec![
                        json!({"type": "text", "text": "I will run the command."}),
                        json!({"type": "tool_use", "id": id, "name": "Bash",
                               "input": {"command": command, "description": "Run the scripted command"}}),
                    ],
                    "tool_use",
                )
            }
            Some(Reply::Tool { name, input }) => {
                let id = unique_id("toolu_fake");
                (
                    vec![
                        json!({"type": "text", "text": "I will use the tool."}),
                        json!({"type": "tool_use", "id": id, "name": name, "input": input}),
                    ],
                    "tool_use",
                )
            }
            Some(Reply::Text(text)) => (vec![json!({"type": "text", "text": text})], "end_turn"),
            None => (vec![json!({"type": "text", "text": DONE_TEXT})], "end_turn"),
        }
    } else {
        (vec![json!({"type": "text", "text": SIDE_TEXT})], "end_turn")
    };

    let id = unique_id("msg_fake");
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model");
    let (output_tokens, hold) = if declares_tools(&body) {
        let n = shared.main_calls.fetch_add(1, Ordering::SeqCst);
        (
            (shared.serving.output_tokens)(n),
            shared.serving.hold == Some(n),
        )
    } else {
        (OUTPUT_TOKENS, false)
    };
    {
        let mut served = lock(&shared.served);
        if hold {
            served.held_input_tokens += INPUT_TOKENS;
        } else {
            served.calls += 1;
            served.input_tokens += INPUT_TOKENS;
            served.output_tokens += output_tokens;
        }
    }
    if hold {
        return held_response(&shared, &id, model);
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        sse_response(sse_events(&id, model, &blocks, stop_reason, output_tokens))
    } else {
        let usage = json!({
            "input_tokens": INPUT_TOKENS, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        });
        json_response(
            StatusCode::OK,
            &json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": blocks, "stop_reason": stop_reason, "stop_sequence": null,
                "usage": usage,
            }),
        )
    }
}

/// The text block the call held open sends whole (the CLI prints it as
/// the agent's text) before it holds.
pub const HELD_TEXT: &str = "Thinking about it at length.";

/// The answer held open: `message_start` and a whole text block, then
/// nothing until the client goes.
fn held_response(shared: &Shared, id: &str, model: &str) -> Response {
    let mut first = message_start(id, model);
    first.push_str(&sse_event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    first.push_str(&sse_event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": HELD_TEXT}}),
    ));
    first.push_str(&sse_event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    let stream = tokio_stream::StreamExt::chain(
        tokio_stream::once(Ok::<_, std::convert::Infallible>(Bytes::from(first))),
        tokio_stream::pending(),
    );
    let mut response = sse_response(String::new());
    *response.body_mut() = axum::body::Body::from_stream(stream);
    shared.holding.send_replace(true);
    response
}

fn sse_event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start(id: &str, model: &str) -> String {
    sse_event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }}),
    )
}

/// The SSE body of one streamed message: message_start, per block
/// content_block_start/delta/stop, message_delta (with usage), message_stop.
fn sse_events(
    id: &str,
    model: &str,
    blocks: &[Value],
    stop_reason: &str,
    output_tokens: u64,
) -> String {
    let mut out = message_start(id, model);
    let mut event = |name: &str, data: Value| out.push_str(&sse_event(name, &data));
    for (index, block) in blocks.iter().enumerate() {
        let (start, delta) = if block["type"] == "tool_use" {
            (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
            )
        } else {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            )
        };
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": output_tokens}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    out
}

async fn count_tokens() -> Response {
    json_response(StatusCode::OK, &json!({"input_tokens": 42}))
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found_error", "fake: not found")
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}
