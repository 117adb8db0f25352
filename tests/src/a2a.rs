//! The A2A tests' client: the official Python SDK (`a2a-sdk[grpc]`, pinned
//! by `.ci/run`) running `tests/a2a/client.py`, and an orchestrator set up
//! for it: a workspace whose planner and agent `worker` run on the fake
//! OpenAI-compatible model, keys of each role, the card's URL.

use std::path::{Path, PathBuf};

use chorus_proto::orchestrator::v1 as pb;
use serde_json::{Value, json};

use crate::fake_openai::{FakeOpenAi, Step};
use crate::orchestrator::OrchestratorProcess;

/// The Python holding the SDK (`CHORUS_TEST_A2A_PYTHON`), for a test that
/// needs it; `None` (with a notice) to skip it when none is named, which
/// fails instead under `CHORUS_TEST_REQUIRE_A2A=1`.
pub fn python_or_skip() -> Option<PathBuf> {
    let python = std::env::var_os("CHORUS_TEST_A2A_PYTHON").map(PathBuf::from);
    if python.is_none() {
        assert!(
            !std::env::var("CHORUS_TEST_REQUIRE_A2A").is_ok_and(|v| v == "1"),
            "CHORUS_TEST_REQUIRE_A2A=1 but CHORUS_TEST_A2A_PYTHON names no Python with the A2A SDK \
             (.ci/run makes one: python3 -m venv DIR && DIR/bin/pip install 'a2a-sdk[grpc]==1.3.0', \
             then CHORUS_TEST_A2A_PYTHON=DIR/bin/python)"
        );
        eprintln!("skipped: set CHORUS_TEST_A2A_PYTHON to a Python with a2a-sdk[grpc] 1.3.0");
    }
    python
}

/// The `node_modules` holding the official A2A JavaScript SDK
/// (`@a2a-js/sdk`, in `CHORUS_TEST_NODE_MODULES`), or None (with a notice) to
/// skip a test that needs it — which fails instead under
/// `CHORUS_TEST_REQUIRE_A2A=1`.
pub fn js_sdk_or_skip() -> Option<PathBuf> {
    let modules = std::env::var_os("CHORUS_TEST_NODE_MODULES")
        .map(PathBuf::from)
        .filter(|m| m.join("@a2a-js/sdk/package.json").exists());
    if modules.is_none() {
        assert!(
            !std::env::var("CHORUS_TEST_REQUIRE_A2A").is_ok_and(|v| v == "1"),
            "CHORUS_TEST_REQUIRE_A2A=1 but CHORUS_TEST_NODE_MODULES names no node_modules holding \
             @a2a-js/sdk (.ci/run installs it: npm install --prefix DIR @a2a-js/sdk@1.3.0, then \
             CHORUS_TEST_NODE_MODULES=DIR/node_modules)"
        );
        eprintln!(
            "skipped: set CHORUS_TEST_NODE_MODULES to a node_modules holding @a2a-js/sdk 1.3.0"
        );
    }
    modules
}

/// Runs the JavaScript SDK's client (`tests/a2a/client.mjs`) with `plan`
/// (the format of [`run_client`]'s): one result per operation.
pub async fn run_js_client(modules: &Path, plan: &Value) -> Vec<Value> {
    let mut node = tokio::process::Command::new("node");
    node.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("a2a/client.mjs"))
        .env("CHORUS_TEST_NODE_MODULES", modules);
    // On its input: the keys stay out of process listings.
    let results = printed_json(node, "client.mjs (node)", plan.to_string().as_bytes()).await;
    serde_json::from_value(results).expect("one result per operation")
}

/// Runs the SDK client with `plan` (see `tests/a2a/client.py`): one result
/// per operation.
pub async fn run_client(python: &Path, plan: &Value) -> Vec<Value> {
    // On its input, not in arguments: the keys stay out of process
    // listings, and a plan may be larger than an argument can be.
    let results = run_script(python, "client.py", plan.to_string().as_bytes()).await;
    serde_json::from_value(results).expect("one result per operation")
}

/// Runs `tests/a2a/<script>` with `input` on its standard input; what it
/// printed, as JSON.
pub async fn run_script(python: &Path, script: &str, input: &[u8]) -> Value {
    let mut command = tokio::process::Command::new(python);
    command.arg(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("a2a")
            .join(script),
    );
    printed_json(command, script, input).await
}

/// Runs `command` (`what`, for messages) with `input` on its standard
/// input; what it printed, as JSON.
async fn printed_json(mut command: tokio::process::Command, what: &str, input: &[u8]) -> Value {
    use tokio::io::AsyncWriteExt as _;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).await.expect("the input is written");
    drop(stdin);
    let output = child.wait_with_output().await.expect("it ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed: {}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// An orchestrator (the binary) serving A2A for workspace `team`.
pub struct A2aSetup {
    pub orchestrator: OrchestratorProcess,
    pub client: crate::agents::Client,
    pub workspace: pb::Workspace,
    pub root: tempfile::TempDir,
    pub data: tempfile::TempDir,
    /// Secrets of an operator and a viewer key, by role name.
    pub keys: Value,
}

impl A2aSetup {
    /// The orchestrator on `database_url` (SQLite in its data directory
    /// when None), the planner and `worker` (granted `tools`) on `model`.
    pub async fn start(model: &FakeOpenAi, tools: &[&str], database_url: Option<&str>) -> Self {
        Self::start_with(model, tools, database_url, &[]).await
    }

    /// [`Self::start`] with `extra` arguments for the orchestrator.
    pub async fn start_with(
        model: &FakeOpenAi,
        tools: &[&str],
        database_url: Option<&str>,
        extra: &[&str],
    ) -> Self {
        let data = tempfile::tempdir().expect("data");
        let root = tempfile::tempdir().expect("root");
        let sqlite = data.path().join("chorus.db").display().to_string();
        let orchestrator =
            OrchestratorProcess::spawn(data.path(), database_url.unwrap_or(&sqlite), extra).await;
        let mut client = orchestrator.client().await;
        let team =
            crate::agents::api_team(&mut client, root.path(), model, tools, "You work.").await;
        let workspace = client
            .update_workspace(pb::UpdateWorkspaceRequest {
                id: team.workspace.id.clone(),
                system_provider: Some("model".into()),
                ..Default::default()
            })
            .await
            .expect("system provider")
            .into_inner();
        let mut keys = serde_json::Map::new();
        for (name, role) in [
            ("operator", pb::Role::Operator),
            ("viewer", pb::Role::Viewer),
        ] {
            let key = client
                .create_api_key(pb::CreateApiKeyRequest {
                    name: format!("a2a-{name}"),
                    role: role.into(),
                })
                .await
                .expect("key")
                .into_inner();
            keys.insert(name.to_owned(), json!(key.secret));
        }
        Self {
            orchestrator,
            client,
            workspace,
            root,
            data,
            keys: Value::Object(keys),
        }
    }

    /// The base URL of the workspace's agent card (with the trailing slash
    /// a client resolving `.well-known/agent-card.json` against it needs).
    pub fn card_url(&self) -> String {
        let console = self.orchestrator.console_addr.expect("the console serves");
        format!("http://{console}/a2a/{}/", self.workspace.name)
    }

    /// A plan of `ops` for [`run_client`], over gRPC.
    pub fn plan(&self, ops: Value) -> Value {
        self.plan_on("GRPC", ops)
    }

    /// A plan of `ops` for [`run_client`] over `binding` (one of
    /// [`BINDINGS`]).
    pub fn plan_on(&self, binding: &str, ops: Value) -> Value {
        json!({ "card_url": self.card_url(), "binding": binding, "keys": self.keys, "ops": ops })
    }
}

/// The A2A payload kind of a stream response ("task", "statusUpdate", ...)
/// and its body.
pub fn payload(response: &Value) -> (&str, &Value) {
    let (kind, body) = response
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("a stream response has a payload");
    (kind.as_str(), body)
}

/// The state of a stream response (its task's or its update's).
pub fn state(response: &Value) -> &str {
    let (_, body) = payload(response);
    body["status"]["state"].as_str().unwrap_or_default()
}

/// The Chorus sequences a stream response carries: its task's history, or
/// the update's event (none for an artifact derived from an event whose own
/// update follows it).
pub fn sequences(response: &Value) -> Vec<u64> {
    let (kind, body) = payload(response);
    if body["metadata"]["chorus"]["derived"] == true {
        return Vec::new();
    }
    if kind == "task" {
        return body["history"]
            .as_array()
            .map(|h| {
                h.iter()
                    .filter_map(|m| number(&m["metadata"]["chorus"]["sequence"]))
                    .collect()
            })
            .unwrap_or_default();
    }
    number(&body["metadata"]["chorus"]["sequence"])
        .into_iter()
        .collect()
}

/// A whole number as protobuf's Struct carries it (a double).
pub fn number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// A remote A2A agent made with the SDK's server side
/// (`tests/a2a/remote_agent.py`), in `mode` ("work", "ask", "hang"),
/// taking calls with `key`. Killed when dropped.
pub struct RemoteAgent {
    _child: tokio::process::Child,
    /// Its card's base URL.
    pub url: String,
    /// Where it logs what it takes ("remote got: ...", "remote canceled").
    log: tempfile::NamedTempFile,
}

impl RemoteAgent {
    pub async fn start(python: &Path, mode: &str, key: &str) -> Self {
        use tokio::io::AsyncBufReadExt as _;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/a2a/remote_agent.py");
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let mut child = tokio::process::Command::new(python)
            .args([script, mode, key])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log.reopen().expect("the log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("the remote agent starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
            .await
            .expect("the remote agent says it is ready within a minute")
            .expect("its output reads")
            .expect("it says ready");
        let url = ready
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("the remote agent said {ready:?}"))
            .to_owned();
        Self {
            _child: child,
            url,
            log,
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

/// The planner's plan for the worker.
pub fn plan() -> Step {
    Step::tool_call(
        "planner-output",
        json!({
            "type": "plan",
            "summary": "Write the files",
            "requirements": ["the files"],
            "acceptanceCriteria": ["they exist"],
            "plan": ["write them", "report"],
            "assignedAgent": "worker",
        }),
    )
}

/// The worker creating `path`.
pub fn create(path: &str) -> Step {
    Step::tool_call("file_create", json!({ "path": path, "content": "hello\n" }))
}

/// The worker's completion report.
pub fn report(summary: &str) -> Step {
    Step::tool_call(
        "completion-report",
        json!({ "status": "complete", "summary": summary, "output": format!("{summary}: done") }),
    )
}

/// The worker's tools.
pub const TOOLS: &[&str] = &["file.create", "bash", "completion-report"];

/// The events of a streaming result.
pub fn events(result: &Value) -> &Vec<Value> {
    result["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events: {result}"))
}

/// A planner that asks "Which greeting?", then plans when answered, and an
/// agent that writes greeting.txt and reports.
pub fn questions_then_greeting() -> Vec<Step> {
    vec![
        Step::tool_call(
            "planner-output",
            json!({"type": "questions", "questions": ["Which greeting?"]}),
        ),
        plan(),
        create("greeting.txt"),
        report("greeted"),
    ]
}

/// A model answering every planner with a plan for `worker` and every agent
/// with its report, at once, as many times as asked (for many tasks).
pub async fn answering_at_once() -> FakeOpenAi {
    FakeOpenAi::start_answering(vec![
        (
            "planner-output",
            Step::tool_call(
                "planner-output",
                json!({"type": "plan", "summary": "report", "requirements": [], "acceptanceCriteria": [], "plan": ["report"], "assignedAgent": "worker"}),
            ),
        ),
        (
            "completion-report",
            Step::tool_call(
                "completion-report",
                json!({"status": "complete", "summary": "done", "output": "done"}),
            ),
        ),
    ])
    .await
}

/// The bindings an A2A scenario runs on: "default" is the Python SDK's
/// default client factory and configuration (which choose JSON-RPC from
/// the card); the others are the client told the one binding it supports.
pub const BINDINGS: [&str; 3] = ["default", "HTTP+JSON", "GRPC"];

/// The SDK transport a client of `binding` uses.
pub fn transport(binding: &str) -> &'static str {
    match binding {
        "GRPC" => "GrpcTransport",
        "HTTP+JSON" => "RestTransport",
        _ => "JsonRpcTransport",
    }
}

/// What a client of `binding` sees of a refusal the gRPC face answers with
/// `grpc_code`: that code over gRPC; the HTTP status over HTTP+JSON; over
/// JSON-RPC, the HTTP status of a refusal of who calls or of their rate,
/// and nothing (an error in a 200 answer) for one of what they asked.
pub fn refusal(binding: &str, grpc_code: &str) -> String {
    let http = match grpc_code {
        "UNAUTHENTICATED" => "401",
        "PERMISSION_DENIED" => "403",
        "RESOURCE_EXHAUSTED" => "429",
        "NOT_FOUND" => "404",
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => "400",
        other => panic!("no HTTP status for {other} here"),
    };
    match binding {
        "GRPC" => grpc_code.to_owned(),
        "HTTP+JSON" => http.to_owned(),
        _ if matches!(http, "401" | "403" | "429") => http.to_owned(),
        _ => String::new(),
    }
}

/// The SDK's error type and gRPC code (or HTTP status) of a failed operation.
pub fn error(result: &Value) -> (&str, &str) {
    let e = &result["error"];
    assert!(e.is_object(), "the operation succeeded: {result}");
    (
        e["type"].as_str().unwrap_or_default(),
        e["code"].as_str().unwrap_or_default(),
    )
}
