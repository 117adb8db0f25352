//! The A2A face on each of its bindings, side by side in one run, against
//! the release orchestrator binary (SQLite): gRPC on the orchestrator's
//! port, JSON-RPC and HTTP+JSON (server-sent events) on the console's.
//!
//! - SendStreamingMessage → its first event: a message sent, read until the
//!   task's first event arrives (the task is then left to run); the bindings
//!   alternated, p50/p99.
//! - A 200-event stream: SubscribeToTask replaying a finished task of over
//!   200 events from its start (`chorus-after-sequence: 0`) to the stream's
//!   end; alternated, p50/p99.
//! - 200 such streams at once per binding: the time until all ended, p50/p99
//!   of each, and the orchestrator's peak memory.
//!
//! `cargo build --release --bins && cargo bench -p chorus-tests --bench a2a_bindings`
//! (`CHORUS_BENCH_SENDS` changes the 100 sends per binding,
//! `CHORUS_BENCH_REPLAYS` the 50 replays, `CHORUS_BENCH_STREAMS` the 200).

use std::time::{Duration, Instant};

use chorus_proto::a2a::v1 as a2a;
use chorus_proto::orchestrator::v1 as pb;
use chorus_tests::agents::api_team;
use chorus_tests::fake_openai::{FakeOpenAi, Step};
use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::stats::{PeakSampler, Samples, env_number, ms};
use serde_json::{Value, json};
use tokio_stream::StreamExt as _;
use tonic::metadata::MetadataValue;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

type A2aClient = a2a::a2a_service_client::A2aServiceClient<tonic::transport::Channel>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    Grpc,
    JsonRpc,
    HttpJson,
}

const BINDINGS: [Binding; 3] = [Binding::Grpc, Binding::JsonRpc, Binding::HttpJson];

impl Binding {
    fn name(self) -> &'static str {
        match self {
            Self::Grpc => "gRPC",
            Self::JsonRpc => "JSON-RPC",
            Self::HttpJson => "HTTP+JSON",
        }
    }
}

/// What every call needs: both clients, the key, the workspace.
#[derive(Clone)]
struct Face {
    grpc: A2aClient,
    http: reqwest::Client,
    /// `http://<console>/a2a/<workspace>`.
    base: String,
    key: String,
    tenant: String,
}

fn message_json(n: usize, skill: Option<&str>) -> Value {
    let mut message = json!({
        "messageId": format!("bench-{}-{n}", std::process::id()),
        "role": "ROLE_USER",
        "parts": [{ "text": format!("Task {n}: report done") }],
    });
    if let Some(skill) = skill {
        message["metadata"] = json!({ "skill": skill });
    }
    message
}

fn grpc_message(n: usize, skill: Option<&str>) -> a2a::Message {
    let mut message = a2a::Message {
        message_id: format!("bench-{}-{n}", std::process::id()),
        role: a2a::Role::User as i32,
        parts: vec![a2a::Part {
            content: Some(a2a::part::Content::Text(format!("Task {n}: report done"))),
            ..Default::default()
        }],
        ..Default::default()
    };
    if let Some(skill) = skill {
        let mut metadata = serde_json::Map::new();
        metadata.insert("skill".to_owned(), json!(skill));
        message.metadata = Some(chorus_proto::json::to_struct(metadata));
    }
    message
}

impl Face {
    fn grpc_request<T>(&self, message: T, after: Option<u64>) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        let bearer = MetadataValue::try_from(format!("Bearer {}", self.key)).expect("ascii");
        request.metadata_mut().insert("authorization", bearer);
        if let Some(after) = after {
            request
                .metadata_mut()
                .insert("chorus-after-sequence", after.into());
        }
        request
    }

    /// A streaming call of an HTTP binding: the SSE answer.
    async fn sse(
        &self,
        binding: Binding,
        method: &str,
        path: &str,
        params: Value,
        after: Option<u64>,
    ) -> reqwest::Response {
        let (url, body) = match binding {
            Binding::JsonRpc => (
                self.base.clone(),
                json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }),
            ),
            _ => (format!("{}{path}", self.base), params),
        };
        let mut request = self
            .http
            .post(url)
            .bearer_auth(&self.key)
            .header("accept", "text/event-stream")
            .json(&body);
        if let Some(after) = after {
            request = request.header("chorus-after-sequence", after.to_string());
        }
        let response = request.send().await.expect("the console answers");
        assert!(
            response.status().is_success(),
            "{method}: {}",
            response.status()
        );
        response
    }

    /// Sends a message; the time until the stream's first event.
    async fn first_event(&self, binding: Binding, n: usize) -> Duration {
        let started = Instant::now();
        match binding {
            Binding::Grpc => {
                let request = a2a::SendMessageRequest {
                    tenant: self.tenant.clone(),
                    message: Some(grpc_message(n, None)),
                    ..Default::default()
                };
                let mut stream = self
                    .grpc
                    .clone()
                    .send_streaming_message(self.grpc_request(request, None))
                    .await
                    .expect("send")
                    .into_inner();
                stream.message().await.expect("stream").expect("an event");
            }
            http => {
                let params = json!({ "message": message_json(n, None) });
                let response = self
                    .sse(
                        http,
                        "SendStreamingMessage",
                        "/message:stream",
                        params,
                        None,
                    )
                    .await;
                let mut body = response.bytes_stream();
                let mut seen = Vec::new();
                while !contains_event(&seen) {
                    let chunk = body.next().await.expect("an event").expect("bytes");
                    seen.extend_from_slice(&chunk);
                }
            }
        }
        started.elapsed()
    }

    /// Replays task `id` from its start to the stream's end: the time, and
    /// the events.
    async fn replay(&self, binding: Binding, id: &str) -> (Duration, usize) {
        let started = Instant::now();
        let events = match binding {
            Binding::Grpc => {
                let request = a2a::SubscribeToTaskRequest {
                    tenant: self.tenant.clone(),
                    id: id.to_owned(),
                };
                let mut stream = self
                    .grpc
                    .clone()
                    .subscribe_to_task(self.grpc_request(request, Some(0)))
                    .await
                    .expect("subscribe")
                    .into_inner();
                let mut n = 0;
                while stream.message().await.expect("stream").is_some() {
                    n += 1;
                }
                n
            }
            http => {
                let path = format!("/tasks/{id}:subscribe");
                let response = self
                    .sse(http, "SubscribeToTask", &path, json!({ "id": id }), Some(0))
                    .await;
                let text = response.text().await.expect("the stream");
                assert!(
                    !text.contains("event: error") && !text.contains("\"error\""),
                    "{text}"
                );
                text.matches("data: ").count()
            }
        };
        (started.elapsed(), events)
    }
}

fn contains_event(seen: &[u8]) -> bool {
    seen.windows(2).any(|w| w == b"\n\n")
}

fn row(what: &str, samples: &[Samples; 3]) {
    let grpc = samples[0].median().as_secs_f64();
    let mut line = format!("| {what} |");
    for s in samples {
        let ratio = s.median().as_secs_f64() / grpc;
        line.push_str(&format!(
            " {} / {} ({ratio:.2}×) |",
            ms(s.median()),
            ms(s.percentile(99.0))
        ));
    }
    println!("{line}");
}

async fn run() {
    let sends = env_number("CHORUS_BENCH_SENDS", 100);
    let replays = env_number("CHORUS_BENCH_REPLAYS", 50);
    let streams = env_number("CHORUS_BENCH_STREAMS", 200);
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("root");
    // Plans for every task, and a report at once for the worker's.
    let model = chorus_tests::a2a::answering_at_once().await;
    // One long task's agent: 100 files written, 10 a turn, then its report.
    let mut long = (0..10)
        .map(|turn| {
            Step::ToolCalls(
                (0..10)
                    .map(|i| {
                        let path = format!("f{}.txt", turn * 10 + i);
                        (
                            "file.create".to_owned(),
                            json!({ "path": path, "content": "x\n" }),
                        )
                    })
                    .collect(),
            )
        })
        .collect::<Vec<_>>();
    long.push(Step::tool_call(
        "completion-report",
        json!({"status": "complete", "summary": "wrote 100 files", "output": "done"}),
    ));
    let long_model = FakeOpenAi::start(long).await;

    let db = dir.path().join("chorus.db").display().to_string();
    let orchestrator = OrchestratorProcess::spawn(&dir.path().join("data"), &db, &[]).await;
    let mut client = orchestrator.client().await;
    let team = api_team(&mut client, &root, &model, &["file.create"], "You report.").await;
    client
        .update_workspace(pb::UpdateWorkspaceRequest {
            id: team.workspace.id.clone(),
            system_provider: Some("model".into()),
            ..Default::default()
        })
        .await
        .expect("system provider");
    client
        .create_provider(pb::CreateProviderRequest {
            workspace_id: team.workspace.id.clone(),
            name: "long".into(),
            kind: pb::ProviderKind::OpenaiCompatible.into(),
            base_url: long_model.base_url(),
            model: "fake-model".into(),
            api_key: "sk-test".into(),
            ..Default::default()
        })
        .await
        .expect("provider");
    client
        .create_agent(pb::CreateAgentRequest {
            workspace_id: team.workspace.id.clone(),
            name: "scribe".into(),
            instructions: "You write files.".into(),
            allowed_tools: vec!["file.create".into(), "completion-report".into()],
            provider: "long".into(),
            ..Default::default()
        })
        .await
        .expect("agent");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", orchestrator.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let console = orchestrator.console_addr.expect("the console serves");
    let face = Face {
        grpc: A2aClient::new(channel),
        http: reqwest::Client::new(),
        base: format!("http://{console}/a2a/{}", team.workspace.name),
        key: orchestrator.admin_key.clone(),
        tenant: team.workspace.name.clone(),
    };

    // The long task, run to its end over gRPC (a blocking send).
    let request = a2a::SendMessageRequest {
        tenant: face.tenant.clone(),
        message: Some(grpc_message(0, Some("scribe"))),
        ..Default::default()
    };
    let mut long_task = face
        .grpc
        .clone()
        .send_message(face.grpc_request(request, None))
        .await
        .expect("the long task")
        .into_inner();
    let (id, status) = match long_task.payload.take() {
        Some(a2a::send_message_response::Payload::Task(task)) => (task.id, task.status),
        other => panic!("no task: {other:?}"),
    };
    let (_, events) = face.replay(Binding::Grpc, &id).await;
    assert!(
        events > 200,
        "the long task has {events} events: {status:?}"
    );

    // Warm each binding up.
    for (n, binding) in BINDINGS.iter().enumerate() {
        face.first_event(*binding, 1 + n).await;
        face.replay(*binding, &id).await;
    }
    let mut first: [Vec<Duration>; 3] = Default::default();
    for n in 0..sends {
        for (i, binding) in BINDINGS.iter().enumerate() {
            first[i].push(face.first_event(*binding, 100 + n * 3 + i).await);
        }
    }
    let mut replayed: [Vec<Duration>; 3] = Default::default();
    for _ in 0..replays {
        for (i, binding) in BINDINGS.iter().enumerate() {
            let (took, seen) = face.replay(*binding, &id).await;
            assert!(seen > 200, "{}: {seen} events", binding.name());
            replayed[i].push(took);
        }
    }
    println!("| p50 / p99 ms (× gRPC at p50) | gRPC | JSON-RPC | HTTP+JSON |");
    println!("|---|---|---|---|");
    row(
        "SendStreamingMessage → first event",
        &first.map(Samples::new),
    );
    row(
        &format!("SubscribeToTask, a {events}-event replay to its end"),
        &replayed.map(Samples::new),
    );

    // Many streams at once, one binding after the other.
    println!(
        "\n| {streams} replays at once | all ended ms | each p50 / p99 ms | orchestrator peak MiB |"
    );
    println!("|---|---|---|---|");
    let binary = std::fs::canonicalize(chorus_tests::built_bin(
        "chorus-orchestrator",
        "chorus-orchestrator",
    ))
    .expect("the binary");
    for binding in BINDINGS {
        let sampler = PeakSampler::start(binary.clone());
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..streams {
            let (face, id) = (face.clone(), id.clone());
            set.spawn(async move { face.replay(binding, &id).await.0 });
        }
        let each = Samples::new(set.join_all().await);
        let all = started.elapsed();
        let (_, peak) = sampler.finish().await;
        println!(
            "| {} | {} | {} / {} | {peak:.1} |",
            binding.name(),
            all.as_millis(),
            ms(each.median()),
            ms(each.percentile(99.0))
        );
    }
}
