//! The fake model servers themselves, over plain HTTP; and the fake Anthropic
//! server with the real Claude Code CLI when `CHORUS_TEST_CLAUDE_BIN` names it.

use std::time::Duration;

use chorus_tests::fake_anthropic::{self, FakeAnthropic, Reply};
use chorus_tests::fake_openai::{self, FakeOpenAi, Step};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Status, content type and body of one HTTP exchange.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `data:` payloads of an SSE body, with the `event:` name (if any).
    fn sse(&self) -> Vec<(Option<String>, String)> {
        assert_eq!(self.content_type, "text/event-stream", "{}", self.body);
        self.body
            .split("\n\n")
            .filter(|event| !event.trim().is_empty())
            .map(|event| {
                let mut name = None;
                let mut data = String::new();
                for line in event.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    }
                }
                (name, data)
            })
            .collect()
    }
}

async fn http(method: &str, url: &str, body: Option<&Value>, auth: Option<&str>) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = hyper::Request::builder().method(method).uri(url);
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = request
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = client.request(request).await.expect("HTTP exchange");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        content_type,
        body: String::from_utf8(body.to_vec()).expect("utf-8"),
    }
}

async fn post(url: &str, body: &Value) -> Answer {
    http("POST", url, Some(body), None).await
}

fn bash_tool() -> Value {
    json!({"name": "Bash", "description": "Run a command",
           "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}})
}

fn tool_result(id: &str, content: Value, is_error: bool) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
}

/// A main-conversation request carrying `results` in its last user message.
fn main_request(results: Vec<Value>, stream: bool) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "do the task"}]}),
        json!({"role": "system", "content": "cwd: /tmp"}),
    ];
    if !results.is_empty() {
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}));
        messages.push(json!({"role": "user", "content": results}));
    }
    json!({"model": "claude-test", "max_tokens": 1000, "stream": stream,
           "system": [{"type": "text", "text": "sys"}], "tools": [bash_tool()], "messages": messages})
}

#[tokio::test]
async fn anthropic_follows_the_script_by_tool_result_count() {
    let fake = FakeAnthropic::start(vec![Reply::bash("echo one"), Reply::text("finished")]).await;
    let url = format!("{}/v1/messages?beta=true", fake.base_url());

    let first = post(&url, &main_request(vec![], false)).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    assert_eq!(first["type"], "message");
    assert_eq!(first["model"], "claude-test");
    assert_eq!(first["stop_reason"], "tool_use");
    assert_eq!(first["usage"]["input_tokens"], 10);
    assert_eq!(first["usage"]["output_tokens"], 5);
    assert_eq!(first["content"][0]["type"], "text");
    let tool_use = &first["content"][1];
    assert_eq!(tool_use["type"], "tool_use");
    assert_eq!(tool_use["name"], "Bash");
    assert_eq!(tool_use["input"]["command"], "echo one");
    assert!(tool_use["input"]["description"].is_string());
    let tool_use_id = tool_use["id"].as_str().expect("tool_use id").to_owned();

    // A side request (no tools) does not consume the script.
    let side = post(
        &url,
        &json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "title?"}]}),
    )
    .await
    .json();
    assert_eq!(side["content"][0]["text"], fake_anthropic::SIDE_TEXT);
    assert_eq!(side["stop_reason"], "end_turn");

    // One tool_result → reply 1; a retry of the same request gets the same answer.
    let with_result = main_request(
        vec![tool_result(
            &tool_use_id,
            json!([{"type": "text", "text": "exit 3"}, {"type": "text", "text": "boom"}]),
            true,
        )],
        false,
    );
    for _ in 0..2 {
        let answer = post(&url, &with_result).await.json();
        assert_eq!(answer["stop_reason"], "end_turn");
        assert_eq!(
            answer["content"],
            json!([{"type": "text", "text": "finished"}])
        );
    }

    // Past the end of the script: "done".
    let past_end = main_request(
        vec![
            tool_result(&tool_use_id, json!("exit 3\nboom"), true),
            tool_result("toolu_other", json!("plain output"), false),
        ],
        false,
    );
    let answer = post(&url, &past_end).await.json();
    assert_eq!(answer["content"][0]["text"], fake_anthropic::DONE_TEXT);
    assert_eq!(answer["stop_reason"], "end_turn");

    assert_eq!(fake.requests().len(), 5);
    assert_eq!(fake.main_requests().len(), 4);
    assert_eq!(fake.requests()[1]["messages"][0]["content"], "title?");
    assert_eq!(
        fake.tool_results(),
        vec![
            ("exit 3\nboom".to_owned(), true),
            ("plain output".to_owned(), false)
        ]
    );
}

#[tokio::test]
async fn anthropic_streams_server_sent_events() {
    let fake = FakeAnthropic::start(vec![Reply::bash(r#"printf '%s' "a b""#)]).await;
    let url = format!("{}/v1/messages", fake.base_url());
    let events = post(&url, &main_request(vec![], true)).await.sse();

    let names: Vec<&str> = events
        .iter()
        .map(|(name, _)| name.as_deref().expect("event name"))
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let data: Vec<Value> = events
        .iter()
        .map(|(name, data)| {
            let value: Value = serde_json::from_str(data).expect("event data is JSON");
            assert_eq!(value["type"].as_str(), name.as_deref());
            value
        })
        .collect();
    assert_eq!(data[0]["message"]["role"], "assistant");
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], 10);
    assert_eq!(data[2]["delta"]["type"], "text_delta");
    assert_eq!(data[4]["content_block"]["type"], "tool_use");
    assert_eq!(data[4]["content_block"]["name"], "Bash");
    assert_eq!(data[4]["index"], 1);
    assert_eq!(data[5]["delta"]["type"], "input_json_delta");
    let input: Value = serde_json::from_str(
        data[5]["delta"]["partial_json"]
            .as_str()
            .expect("partial_json"),
    )
    .expect("tool input JSON");
    assert_eq!(input["command"], r#"printf '%s' "a b""#);
    assert_eq!(data[7]["delta"]["stop_reason"], "tool_use");
    assert_eq!(data[7]["usage"]["output_tokens"], 5);

    // Past the end of the (one-reply) script, streamed.
    let events = post(
        &url,
        &main_request(vec![tool_result("toolu_x", json!("ok"), false)], true),
    )
    .await
    .sse();
    let deltas: Vec<Value> = events
        .iter()
        .filter(|(name, _)| name.as_deref() == Some("content_block_delta"))
        .map(|(_, data)| serde_json::from_str(data).expect("JSON"))
        .collect();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0]["delta"]["text"], "done");
}

#[tokio::test]
async fn anthropic_counts_tokens_and_rejects_other_paths() {
    let fake = FakeAnthropic::start(vec![]).await;
    let base = fake.base_url();
    let count = post(
        &format!("{base}/v1/messages/count_tokens?beta=true"),
        &json!({"messages": []}),
    )
    .await;
    assert_eq!(count.status, 200);
    assert_eq!(count.json(), json!({"input_tokens": 42}));

    for (method, path) in [("GET", "/v1/models"), ("POST", "/v1/complete")] {
        let answer = http(method, &format!("{base}{path}"), Some(&json!({})), None).await;
        assert_eq!(answer.status, 404, "{method} {path}");
        assert_eq!(answer.json()["type"], "error");
        assert_eq!(answer.json()["error"]["type"], "not_found_error");
    }
    let bad = http("POST", &format!("{base}/v1/messages"), None, None).await;
    assert_eq!(bad.status, 400);
    assert!(fake.requests().len() == 1 && fake.tool_results().is_empty());
}

#[tokio::test]
async fn anthropic_ids_are_unique_across_fakes() {
    // A session resumed against a new fake must not get tool_use ids its history
    // already holds (the CLI merges duplicates).
    let mut ids = Vec::new();
    for _ in 0..2 {
        let fake = FakeAnthropic::start(vec![Reply::bash("true")]).await;
        let url = format!("{}/v1/messages", fake.base_url());
        let answer = post(&url, &main_request(vec![], false)).await.json();
        ids.push(answer["id"].as_str().expect("id").to_owned());
        ids.push(answer["content"][1]["id"].as_str().expect("id").to_owned());
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

fn chat(stream: bool) -> Value {
    json!({"model": "local-model", "stream": stream,
           "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]})
}

#[tokio::test]
async fn openai_answers_steps_in_order() {
    let fake = FakeOpenAi::start(vec![
        Step::ToolCalls(vec![
            ("read_file".to_owned(), json!({"path": "a.txt"})),
            (
                "write_file".to_owned(),
                json!({"path": "b.txt", "content": "x"}),
            ),
        ]),
        Step::Status(429),
        Step::Status(503),
        Step::text("all done"),
    ])
    .await;
    let base = fake.base_url();
    assert!(base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"));
    let url = format!("{base}/chat/completions");

    let answer = http("POST", &url, Some(&chat(false)), Some("Bearer key-1")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type, "application/json");
    let answer = answer.json();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["model"], "local-model");
    assert!(answer["id"].is_string() && answer["created"].is_u64());
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
               "prompt_tokens_details": {"cached_tokens": 4}})
    );
    let choice = &answer["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"]["content"].is_null());
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    assert_eq!(calls.len(), 2);
    let mut ids = Vec::new();
    for (call, (name, args)) in calls.iter().zip([
        ("read_file", json!({"path": "a.txt"})),
        ("write_file", json!({"path": "b.txt", "content": "x"})),
    ]) {
        let id = call["id"].as_str().expect("id");
        assert!(id.starts_with("call_"), "{id}");
        ids.push(id.to_owned());
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], name);
        let arguments = call["function"]["arguments"].as_str().expect("string");
        assert_eq!(
            serde_json::from_str::<Value>(arguments).expect("JSON"),
            args
        );
    }
    assert_ne!(ids[0], ids[1]);

    for (status, kind) in [(429, "rate_limit_error"), (503, "server_error")] {
        let answer = http("POST", &url, Some(&chat(false)), Some("Bearer key-2")).await;
        assert_eq!(answer.status, status);
        assert_eq!(answer.json()["error"]["type"], kind);
        assert!(answer.json()["error"]["message"].is_string());
    }

    let answer = post(&url, &chat(false)).await.json();
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["choices"][0]["message"]["content"], "all done");
    assert!(answer["choices"][0]["message"].get("tool_calls").is_none());

    let answer = post(&url, &chat(false)).await.json();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        fake_openai::DONE_TEXT
    );

    assert_eq!(fake.requests().len(), 5);
    assert_eq!(fake.requests()[0]["messages"][1]["content"], "hi");
    assert_eq!(
        fake.authorization(),
        vec![
            Some("Bearer key-1".to_owned()),
            Some("Bearer key-2".to_owned()),
            Some("Bearer key-2".to_owned()),
            None,
            None
        ]
    );

    let models = http("GET", &format!("{base}/models"), None, None).await;
    assert_eq!(models.json()["data"][0]["id"], fake_openai::FAKE_MODEL);
    let missing = http(
        "POST",
        &format!("{base}/completions"),
        Some(&json!({})),
        None,
    )
    .await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]["message"].is_string());
}

/// A streamed chat completion, reassembled.
struct Streamed {
    text: String,
    /// (id, name, arguments).
    calls: Vec<(String, String, String)>,
    finish_reason: String,
    usage: Option<Value>,
}

fn assemble(answer: &Answer) -> Streamed {
    let events = answer.sse();
    assert_eq!(events.last().map(|(_, d)| d.as_str()), Some("[DONE]"));
    let (mut text, mut calls, mut finish, mut usage) = (String::new(), Vec::new(), None, None);
    for (_, data) in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(data).expect("chunk JSON");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        if let Some(t) = choice["delta"]["content"].as_str() {
            text.push_str(t);
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = call["index"].as_u64().expect("index") as usize;
            if index == calls.len() {
                calls.push((String::new(), String::new(), String::new()));
            }
            let entry: &mut (String, String, String) = &mut calls[index];
            if let Some(id) = call["id"].as_str() {
                entry.0 = id.to_owned();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                entry.1 = name.to_owned();
            }
            if let Some(args) = call["function"]["arguments"].as_str() {
                entry.2.push_str(args);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = Some(reason.to_owned());
        }
    }
    Streamed {
        text,
        calls,
        finish_reason: finish.expect("finish_reason"),
        usage,
    }
}

#[tokio::test]
async fn openai_streams_chunks_when_asked() {
    let fake = FakeOpenAi::start(vec![
        Step::tool_call("bash", json!({"command": "echo hi"})),
        Step::text("streamed text"),
    ])
    .await;
    let url = format!("{}/chat/completions", fake.base_url());

    let mut request = chat(true);
    request["stream_options"] = json!({"include_usage": true});
    let Streamed {
        text,
        calls,
        finish_reason: finish,
        usage,
    } = assemble(&post(&url, &request).await);
    assert_eq!(text, "");
    assert_eq!(finish, "tool_calls");
    assert_eq!(calls.len(), 1);
    assert!(calls[0].0.starts_with("call_"));
    assert_eq!(calls[0].1, "bash");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].2).expect("JSON"),
        json!({"command": "echo hi"})
    );
    assert_eq!(usage.expect("usage chunk")["total_tokens"], 18);

    let Streamed {
        text,
        calls,
        finish_reason: finish,
        usage,
    } = assemble(&post(&url, &chat(true)).await);
    assert_eq!((text.as_str(), finish.as_str()), ("streamed text", "stop"));
    assert!(calls.is_empty() && usage.is_none());
}

/// Runs the real Claude Code CLI against `fake` in `home`/`cwd`; returns the
/// stream-json events.
async fn run_claude(
    claude: &std::path::Path,
    fake: &FakeAnthropic,
    home: &std::path::Path,
    cwd: &std::path::Path,
    args: &[&str],
) -> Vec<Value> {
    let run = tokio::process::Command::new(claude)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .args(args)
        .args(["--verbose", "--output-format", "stream-json"])
        .args(["--tools", "Bash", "--allowedTools", "Bash(echo *)"])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("claude finished within 120 s")
        .expect("claude ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn result_event(events: &[Value]) -> &Value {
    let result = events.last().expect("events");
    assert_eq!(result["type"], "result", "{events:?}");
    result
}

/// The real Claude Code CLI runs a scripted Bash command through the fake, then
/// resumes the session against a second fake.
#[tokio::test]
async fn real_claude_cli_runs_a_scripted_bash_command_and_resumes() {
    let Some(claude) = fake_anthropic::claude_cli_or_skip() else {
        return;
    };
    let home = tempfile::tempdir().expect("home");
    let cwd = tempfile::tempdir().expect("cwd");

    let fake = FakeAnthropic::start(vec![
        Reply::bash("echo fake-tool-ran"),
        Reply::text("finished"),
    ])
    .await;
    let events = run_claude(
        &claude,
        &fake,
        home.path(),
        cwd.path(),
        &["-p", "do the task"],
    )
    .await;
    assert_eq!(events[0]["type"], "system");
    assert_eq!(events[0]["subtype"], "init");
    let session_id = events[0]["session_id"].as_str().expect("session_id");
    let result = result_event(&events);
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], "finished", "{result}");
    assert_eq!(result["session_id"], session_id);
    assert_eq!(result["num_turns"], 2);
    assert_eq!(result["usage"]["input_tokens"], 20);
    assert_eq!(result["usage"]["output_tokens"], 10);
    assert_eq!(
        fake.tool_results(),
        vec![("fake-tool-ran".to_owned(), false)]
    );
    assert!(fake.requests().iter().all(|r| r["tools"].is_array()));

    // The history holds one tool_result, so the resumed turn gets replies[1].
    let resumed = FakeAnthropic::start(vec![
        Reply::text("unused"),
        Reply::bash("echo after-resume"),
        Reply::text("resumed"),
    ])
    .await;
    let args = ["-p", "--resume", session_id, "reminder text"];
    let events = run_claude(&claude, &resumed, home.path(), cwd.path(), &args).await;
    let result = result_event(&events);
    assert_eq!(result["result"], "resumed", "{result}");
    assert_eq!(result["session_id"], session_id);
    assert_eq!(
        resumed.tool_results(),
        vec![
            ("fake-tool-ran".to_owned(), false),
            ("after-resume".to_owned(), false)
        ]
    );
    let first = &resumed.requests()[0];
    let last = first["messages"]
        .as_array()
        .expect("messages")
        .last()
        .expect("message");
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["text"], "reminder text", "{last}");
}

#[tokio::test]
async fn openai_side_requests_without_tools_do_not_consume_the_script() {
    let fake = FakeOpenAi::start(vec![Step::text("the first step")]).await;
    let url = format!("{}/chat/completions", fake.base_url());
    let mut title = chat(false);
    title.as_object_mut().expect("object").remove("tools");
    let side = post(&url, &title).await.json();
    assert_eq!(
        side["choices"][0]["message"]["content"],
        chorus_tests::fake_openai::SIDE_TEXT
    );
    let main = post(&url, &chat(false)).await.json();
    assert_eq!(main["choices"][0]["message"]["content"], "the first step");
    assert_eq!(fake.requests().len(), 2, "both are logged");
}
