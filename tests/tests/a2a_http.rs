//! The A2A face's HTTP bindings on the wire, as any HTTP client meets them
//! (the SDK scenarios on every binding are in a2a_sdk.rs): each refusal in
//! the binding's own terms — JSON-RPC's codes, HTTP+JSON's statuses and
//! `google.rpc.Status`, A2A's reasons — saying why, never INTERNAL for a
//! body that is not JSON or not of the method's shape; the card where SDKs
//! look for it, with and without a trailing slash; and nothing changed by a
//! refused request.

use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::a2a::{A2aSetup, TOOLS};
use chorus_tests::fake_openai::FakeOpenAi;
use reqwest::StatusCode;
use serde_json::{Value, json};

struct Http {
    client: reqwest::Client,
    base: String,
    operator: String,
    viewer: String,
}

impl Http {
    fn of(setup: &A2aSetup) -> Self {
        let console = setup.orchestrator.console_addr.expect("the console serves");
        let key = |role: &str| setup.keys[role].as_str().expect("key").to_owned();
        Self {
            client: reqwest::Client::new(),
            base: format!("http://{console}/a2a/{}", setup.workspace.name),
            operator: key("operator"),
            viewer: key("viewer"),
        }
    }

    /// A JSON-RPC request's body, sent with `key` and `headers`: the HTTP
    /// status and the JSON answer.
    async fn rpc(
        &self,
        key: Option<&str>,
        body: String,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .post(&self.base)
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        answer(request).await
    }

    /// A request of the HTTP+JSON binding: `verb` on `path` under the base.
    async fn rest(
        &self,
        verb: reqwest::Method,
        path: &str,
        body: Option<String>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(verb, format!("{}{path}", self.base))
            .bearer_auth(&self.operator);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        answer(request).await
    }
}

async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("the console answers");
    let status = response.status();
    let text = response.text().await.expect("a body");
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, json)
}

fn send(text: &str) -> Value {
    json!({
        "message": { "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": text }] }
    })
}

fn rpc(method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params }).to_string()
}

/// The `ErrorInfo` reason of a JSON-RPC error's data or a `google.rpc.Status`'s details.
fn reason(details: &Value) -> &str {
    details[0]["reason"].as_str().unwrap_or_default()
}

/// A JSON-RPC request refused: sent with `key` and `header`, answered with
/// `status`, the JSON-RPC `code`, A2A's `reason` and a message that `says`.
struct Refused<'a> {
    key: Option<&'a str>,
    body: String,
    header: Option<(&'a str, &'a str)>,
    status: StatusCode,
    code: i64,
    reason: &'a str,
    says: &'a str,
}

fn refused<'a>(
    key: Option<&'a str>,
    body: String,
    code: i64,
    reason: &'a str,
    says: &'a str,
) -> Refused<'a> {
    Refused {
        key,
        body,
        header: None,
        status: StatusCode::OK,
        code,
        reason,
        says,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_refusals_carry_its_codes_and_a2a_reasons_and_say_why() {
    let model = FakeOpenAi::start(vec![]).await;
    let mut setup = A2aSetup::start(&model, TOOLS, None).await;
    let http = Http::of(&setup);
    let op = Some(http.operator.as_str());
    let cases = [
        // Not JSON; not a request; not of the method's shape: the caller's, never INTERNAL.
        refused(
            op,
            "{ not json".into(),
            -32700,
            "INVALID_REQUEST",
            "not JSON",
        ),
        refused(op, "[1, 2]".into(), -32600, "INVALID_REQUEST", "batches"),
        refused(
            op,
            rpc("GetTask", json!({ "id": 5 })),
            -32602,
            "INVALID_PARAMS",
            "GetTaskRequest",
        ),
        refused(
            op,
            rpc("SendMessage", json!([])),
            -32602,
            "INVALID_PARAMS",
            "params",
        ),
        refused(
            op,
            rpc("Frobnicate", json!({})),
            -32601,
            "METHOD_NOT_FOUND",
            "Frobnicate",
        ),
        refused(
            op,
            rpc("message/send", send("x")),
            -32009,
            "VERSION_NOT_SUPPORTED",
            "SendMessage",
        ),
        // A version this agent does not serve, on the request's header.
        Refused {
            header: Some(("a2a-version", "9.9")),
            ..refused(
                op,
                rpc("SendMessage", send("x")),
                -32009,
                "VERSION_NOT_SUPPORTED",
                "A2A 1.0",
            )
        },
        // A2A's opaque ids: one that is no task's is not found.
        refused(
            op,
            rpc("GetTask", json!({ "id": "not-a-task" })),
            -32001,
            "TASK_NOT_FOUND",
            "not-a-task",
        ),
        refused(
            op,
            rpc(
                "SendMessage",
                json!({ "tenant": "elsewhere", "message": send("x")["message"] }),
            ),
            -32602,
            "INVALID_PARAMS",
            "tenant",
        ),
        // Who calls: at the HTTP level, the body saying why.
        Refused {
            status: StatusCode::UNAUTHORIZED,
            ..refused(None, rpc("SendMessage", send("x")), -32000, "", "key")
        },
        Refused {
            status: StatusCode::FORBIDDEN,
            ..refused(
                Some(http.viewer.as_str()),
                rpc("SendMessage", send("x")),
                -32000,
                "",
                "operator",
            )
        },
    ];
    for case in cases {
        let shown = case.body.chars().take(80).collect::<String>();
        let headers: Vec<_> = case.header.into_iter().collect();
        let (got, answer) = http.rpc(case.key, case.body, &headers).await;
        assert_eq!(got, case.status, "{shown}: {answer}");
        assert_eq!(answer["jsonrpc"], "2.0", "{shown}: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], case.code, "{shown}: {answer}");
        assert_eq!(reason(&error["data"]), case.reason, "{shown}: {answer}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(case.says), "{shown}: {message}");
        if case.code != -32700 && case.code != -32600 {
            assert_eq!(answer["id"], 7, "{shown}: the request's id: {answer}");
        }
    }
    // A message over the port's 16 MiB limit: refused at the HTTP level, saying the limit.
    let huge = rpc("SendMessage", send(&"z".repeat(17 * 1024 * 1024)));
    let (got, answer) = http.rpc(op, huge, &[]).await;
    assert_eq!(got, StatusCode::TOO_MANY_REQUESTS, "{}", answer["error"]);
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("16 MiB"), "{message}");

    let tasks = setup
        .client
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .expect("tasks")
        .into_inner()
        .tasks;
    assert!(tasks.is_empty(), "a refused request made a task: {tasks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_json_refusals_are_google_rpc_statuses_with_a2a_reasons() {
    use reqwest::Method;
    let model = FakeOpenAi::start(vec![]).await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let http = Http::of(&setup);
    let cases = [
        (
            Method::POST,
            "/message:send",
            Some("{ not json"),
            400,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            "not JSON",
        ),
        (
            Method::POST,
            "/message:send",
            Some(r#"{"message": 5}"#),
            400,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "SendMessageRequest",
        ),
        (
            Method::POST,
            "/message:send",
            Some("[]"),
            400,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "JSON object",
        ),
        (
            Method::GET,
            "/tasks/not-a-task",
            None,
            404,
            "NOT_FOUND",
            "TASK_NOT_FOUND",
            "not-a-task",
        ),
        (
            Method::GET,
            "/tasks?includeArtifacts=maybe",
            None,
            400,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "includeArtifacts",
        ),
        (
            Method::GET,
            "/tasks?pageSize=1000",
            None,
            400,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "page_size",
        ),
        (
            Method::DELETE,
            "/message:send",
            None,
            405,
            "NOT_FOUND",
            "METHOD_NOT_FOUND",
            "POST",
        ),
        (
            Method::GET,
            "/agents",
            None,
            404,
            "NOT_FOUND",
            "METHOD_NOT_FOUND",
            "message:send",
        ),
    ];
    for (verb, path, body, status, code, why, says) in cases {
        let (got, answer) = http.rest(verb.clone(), path, body.map(str::to_owned)).await;
        let error = &answer["error"];
        assert_eq!(got.as_u16(), status, "{verb} {path}: {answer}");
        assert_eq!(error["code"], status, "{verb} {path}: {answer}");
        assert_eq!(error["status"], code, "{verb} {path}: {answer}");
        assert_eq!(reason(&error["details"]), why, "{verb} {path}: {answer}");
        assert_eq!(
            error["details"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{verb} {path}"
        );
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{verb} {path}: {message}");
    }
    // A viewer's write: 403, the body saying which role writes.
    let response = http
        .client
        .post(format!("{}/message:send", http.base))
        .bearer_auth(&http.viewer)
        .json(&send("x"))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("operator"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_is_where_sdks_look_with_and_without_a_trailing_slash() {
    let model = FakeOpenAi::start(vec![]).await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let http = Http::of(&setup);
    for url in [
        format!("{}/.well-known/agent-card.json", http.base),
        // A base URL given with its trailing slash, joined as Python's SDK does.
        format!("{}//.well-known/agent-card.json", http.base),
    ] {
        let card: Value = http
            .client
            .get(&url)
            .send()
            .await
            .expect("answer")
            .json()
            .await
            .expect("a card");
        assert_eq!(
            card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC",
            "{url}: {card}"
        );
        assert_eq!(
            card["supportedInterfaces"][0]["url"],
            http.base.as_str(),
            "{url}: {card}"
        );
    }
    // A base URL without its trailing slash, resolved as a URL (the JS SDK
    // does): the workspace is lost, and the answer says how to give it.
    let console = setup.orchestrator.console_addr.expect("console");
    let response = http
        .client
        .get(format!("http://{console}/a2a/.well-known/agent-card.json"))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let text = response.text().await.expect("text");
    assert!(text.contains("trailing slash"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_the_grpc_binding_cannot_read_are_invalid_params_with_an_a2a_reason() {
    use chorus_tests::raw::{call, methods};
    use tonic_types::StatusExt as _;
    let model = FakeOpenAi::start(vec![]).await;
    let setup = A2aSetup::start(&model, TOOLS, None).await;
    let operator = setup.keys["operator"].as_str().expect("key").to_owned();
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", setup.orchestrator.addr))
            .expect("address")
            .connect()
            .await
            .expect("connect");
    let a2a = methods("lf.a2a.v1");
    assert_eq!(a2a.len(), 11, "{a2a:?}");
    // Field 1 (every request's first string) with bytes that are not UTF-8;
    // then bytes that are no protobuf at all.
    let garbage: [&[u8]; 2] = [&[0x0a, 0x03, 0xff, 0xfe, 0xfd], &[0xff; 8]];
    for method in &a2a {
        for body in garbage {
            let status = call(channel.clone(), method, Some(&operator), body.to_vec())
                .await
                .expect_err("refused");
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{}: {status:?}",
                method.name
            );
            assert_eq!(
                status
                    .get_error_details()
                    .error_info()
                    .map(|i| i.reason.clone()),
                Some("INVALID_PARAMS".to_owned()),
                "{}: {status:?}",
                method.name
            );
            assert!(
                status.message().contains("A2A 1.0"),
                "{}: {}",
                method.name,
                status.message()
            );
        }
    }
}
