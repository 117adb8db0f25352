//! A scripted fake of an OpenAI-compatible chat completions API.
//!
//! Each `POST /v1/chat/completions` that declares tools consumes the next [`Step`]
//! in order; past the end the answer is the text "done". One that declares none
//! (a CLI's side request, e.g. for a title) gets [`SIDE_TEXT`] and consumes nothing. Answers are JSON, or SSE chunks ending with
//! `data: [DONE]` when the request says `"stream": true`. `GET /v1/models` lists one
//! model; anything else is a 404 OpenAI-style error.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::fake_http::{HttpServer, json_response, lock, parse_body, sse_response, unix_now};

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Answer one request with these tool calls (function name, arguments JSON
    /// object); finish_reason "tool_calls".
    ToolCalls(Vec<(String, Value)>),
    /// Answer with assistant text; finish_reason "stop".
    Text(String),
    /// Answer with this HTTP status and an OpenAI-style error body.
    Status(u16),
    /// One tool call whose arguments are this text as the model wrote it (not
    /// necessarily JSON).
    RawToolCall(String, String),
    /// Never answered: the request is held until the client goes (a call in
    /// flight when its orchestrator is killed). [`FakeOpenAi::holding`]
    /// tells when it came.
    Hold,
}

impl Step {
    /// `Step::ToolCalls` with a single call.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Step::ToolCalls(vec![(name.into(), arguments)])
    }

    /// `Step::Text`.
    pub fn text(text: impl Into<String>) -> Self {
        Step::Text(text.into())
    }
}

/// Text of the answer past the end of the script.
pub const DONE_TEXT: &str = "done";
/// Text of the answer to requests that declare no tools.
pub const SIDE_TEXT: &str = "fake side reply";
/// The model `GET /v1/models` lists and answers name when a request names none.
pub const FAKE_MODEL: &str = "fake-model";

/// Ids of answers and tool calls count up across every fake in this process, so a
/// conversation that outlives one fake never holds two tool calls with the same id.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The usage every answer reports: prompt tokens (of which cached), and
/// completion tokens.
pub const PROMPT_TOKENS: u64 = 11;
pub const CACHED_TOKENS: u64 = 4;
pub const COMPLETION_TOKENS: u64 = 7;

struct Shared {
    steps: Vec<Step>,
    /// When set, each request is answered by the first rule whose tool it
    /// declares (the script is not used): for many runs at once.
    rules: Vec<(String, Step)>,
    cursor: AtomicUsize,
    /// Answers carry no `usage` (as some local servers answer).
    no_usage: bool,
    /// Set once a request is held ([`Step::Hold`]).
    holding: tokio::sync::watch::Sender<bool>,
    /// `steps` are turns: a request is answered by the step of its
    /// conversation's turn (how many answers it already holds; past the
    /// last, the last), so that many conversations follow one script side
    /// by side.
    by_turn: bool,
    /// While closed, requests wait at the gate; how many came to it.
    gate_closed: tokio::sync::watch::Sender<bool>,
    at_gate: tokio::sync::watch::Sender<usize>,
    /// (body, Authorization header), in arrival order.
    log: Mutex<Vec<(Value, Option<String>)>>,
}

/// How a fake answers (see `Shared`).
#[derive(Debug, Default)]
struct Options {
    no_usage: bool,
    by_turn: bool,
    gated: bool,
}

/// The fake chat completions API; serves until dropped.
pub struct FakeOpenAi {
    server: HttpServer,
    shared: Arc<Shared>,
}

impl FakeOpenAi {
    /// Serves on 127.0.0.1:0 until dropped.
    pub async fn start(steps: Vec<Step>) -> FakeOpenAi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        Self::start_on(listener, steps)
    }

    /// Serves on `listener` until dropped.
    pub fn start_on(listener: tokio::net::TcpListener, steps: Vec<Step>) -> FakeOpenAi {
        Self::serve(listener, steps, Vec::new())
    }

    /// Serves on 127.0.0.1:0, answering each request by the first of
    /// `rules` (tool name, answer) whose tool it declares, as many times as
    /// asked, in any order (runs side by side: a planner's requests declare
    /// `planner-output`, an agent's do not); past them, "done".
    pub async fn start_answering(rules: Vec<(&str, Step)>) -> FakeOpenAi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let rules = rules.into_iter().map(|(t, s)| (t.to_owned(), s)).collect();
        Self::serve(listener, Vec::new(), rules)
    }

    /// [`FakeOpenAi::start`], its answers carrying no `usage` at all.
    pub async fn start_without_usage(steps: Vec<Step>) -> FakeOpenAi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let options = Options {
            no_usage: true,
            ..Options::default()
        };
        Self::serve_as(listener, steps, Vec::new(), options)
    }

    /// Serves on 127.0.0.1:0 with its gate closed: each request waits at
    /// the gate until [`FakeOpenAi::open_gate`], then is answered by the
    /// step of its conversation's turn (`turns[0]` for a conversation's
    /// first request, `turns[1]` once it holds one answer, ...); past them,
    /// the last again. Many runs follow one script side by side.
    pub async fn start_gated_by_turn(turns: Vec<Step>) -> FakeOpenAi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let options = Options {
            by_turn: true,
            gated: true,
            ..Options::default()
        };
        Self::serve_as(listener, turns, Vec::new(), options)
    }

    /// Waits until `n` requests have come to the gate.
    pub async fn at_gate(&self, n: usize) {
        let mut rx = self.shared.at_gate.subscribe();
        rx.wait_for(|came| *came >= n)
            .await
            .expect("the fake is serving");
    }

    /// Lets every request waiting at the gate, and every later one, through.
    pub fn open_gate(&self) {
        self.shared.gate_closed.send_replace(false);
    }

    fn serve(
        listener: tokio::net::TcpListener,
        steps: Vec<Step>,
        rules: Vec<(String, Step)>,
    ) -> FakeOpenAi {
        Self::serve_as(listener, steps, rules, Options::default())
    }

    fn serve_as(
        listener: tokio::net::TcpListener,
        steps: Vec<Step>,
        rules: Vec<(String, Step)>,
        options: Options,
    ) -> FakeOpenAi {
        let shared = Arc::new(Shared {
            steps,
            rules,
            no_usage: options.no_usage,
            holding: tokio::sync::watch::Sender::new(false),
            by_turn: options.by_turn,
            gate_closed: tokio::sync::watch::Sender::new(options.gated),
            at_gate: tokio::sync::watch::Sender::new(0),
            cursor: AtomicUsize::new(0),
            log: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        let server = HttpServer::start_on(listener, router);
        FakeOpenAi { server, shared }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// Every request body POSTed to /v1/chat/completions, in order (a body that is
    /// not JSON is kept as a JSON string).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.log)
            .iter()
            .map(|(body, _)| body.clone())
            .collect()
    }

    /// The tool results the model was last sent, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.requests()
            .last()
            .and_then(|r| r["messages"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits until a request is held ([`Step::Hold`]).
    pub async fn holding(&self) {
        let mut rx = self.shared.holding.subscribe();
        rx.wait_for(|held| *held)
            .await
            .expect("the fake is serving");
    }

    /// The Authorization header of each request, in order.
    pub fn authorization(&self) -> Vec<Option<String>> {
        lock(&self.shared.log)
            .iter()
            .map(|(_, auth)| auth.clone())
            .collect()
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let body = parse_body(&body).unwrap_or_else(|raw| raw);
    if *shared.gate_closed.borrow() {
        let mut closed = shared.gate_closed.subscribe();
        shared.at_gate.send_modify(|came| *came += 1);
        let _ = closed.wait_for(|closed| !*closed).await;
    }
    // Log and take the step under one lock, so the log order is the script order.
    // A body that is not a JSON object is logged but consumes no step.
    let step = {
        let mut log = lock(&shared.log);
        log.push((body.clone(), auth));
        if !body.is_object() {
            return error(StatusCode::BAD_REQUEST, "fake: body is not a JSON object");
        }
        // A request that declares no tools is a side request (a CLI asking for
        // a session title): answered with text, it consumes no step.
        let declares_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty());
        if declares_tools && !shared.rules.is_empty() {
            let declared = |name: &str| {
                body["tools"]
                    .as_array()
                    .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == name))
            };
            shared
                .rules
                .iter()
                .find(|(tool, _)| declared(tool))
                .map_or_else(
                    || Step::Text(DONE_TEXT.to_owned()),
                    |(_, step)| step.clone(),
                )
        } else if declares_tools && shared.by_turn {
            let answered = body["messages"].as_array().map_or(0, |messages| {
                messages.iter().filter(|m| m["role"] == "assistant").count()
            });
            shared
                .steps
                .get(answered)
                .or(shared.steps.last())
                .cloned()
                .unwrap_or_else(|| Step::Text(DONE_TEXT.to_owned()))
        } else if declares_tools {
            let index = shared.cursor.fetch_add(1, Ordering::SeqCst);
            shared
                .steps
                .get(index)
                .cloned()
                .unwrap_or_else(|| Step::Text(DONE_TEXT.to_owned()))
        } else {
            Step::Text(SIDE_TEXT.to_owned())
        }
    };

    let id = format!(
        "chatcmpl-fake{:04}",
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    );
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(FAKE_MODEL);
    let (content, calls, finish_reason) = match step {
        Step::Hold => {
            shared.holding.send_replace(true);
            return std::future::pending().await;
        }
        Step::Status(code) => {
            let status = StatusCode::from_u16(code).expect("valid HTTP status in Step::Status");
            return error(status, &format!("fake: scripted status {code}"));
        }
        Step::Text(text) => (Some(text), Vec::new(), "stop"),
        Step::RawToolCall(name, raw) => {
            let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            (None, vec![(format!("call_{n}"), name, raw)], "tool_calls")
        }
        Step::ToolCalls(calls) => {
            let calls = calls
                .into_iter()
                .map(|(name, arguments)| {
                    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                    (format!("call_{n}"), name, arguments.to_string())
                })
                .collect();
            (None, calls, "tool_calls")
        }
    };

    let created = unix_now();
    let usage = json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS},
    });
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        let include_usage = body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true);
        let chunk = |delta: Value, finish_reason: Option<&str>| {
            let chunk = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            });
            format!("data: {chunk}\n\n")
        };
        let mut out = chunk(json!({"role": "assistant", "content": ""}), None);
        if let Some(text) = &content {
            out.push_str(&chunk(json!({"content": text}), None));
        }
        for (index, (call_id, name, arguments)) in calls.iter().enumerate() {
            out.push_str(&chunk(
                json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                None,
            ));
            out.push_str(&chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}),
                None,
            ));
        }
        out.push_str(&chunk(json!({}), Some(finish_reason)));
        if include_usage && !shared.no_usage {
            let chunk = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [], "usage": usage,
            });
            out.push_str(&format!("data: {chunk}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        return sse_response(out);
    }

    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|(call_id, name, arguments)| {
                json!({"id": call_id, "type": "function",
                       "function": {"name": name, "arguments": arguments}})
            })
            .collect();
    }
    let mut answer = json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if !shared.no_usage {
        answer["usage"] = usage;
    }
    json_response(StatusCode::OK, &answer)
}

async fn models() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [
            {"id": FAKE_MODEL, "object": "model", "created": 0, "owned_by": "chorus-tests"},
        ]}),
    )
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "fake: not found")
}

/// An OpenAI-style error body with `status`.
fn error(status: StatusCode, message: &str) -> Response {
    let (kind, code) = match status.as_u16() {
        429 => ("rate_limit_error", Some("rate_limit_exceeded")),
        401 => ("authentication_error", Some("invalid_api_key")),
        404 => ("not_found_error", None),
        s if s >= 500 => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}
