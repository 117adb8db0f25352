//! tool-exec served in this process on 127.0.0.1:0, with a run gate that tells
//! the test what happens: which calls it authorized and what it recorded.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::json;
use chorus_proto::tools::v1 as pb;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_run_token::{RunGrant, RunTokenSigner};
use chorus_tool_exec::gate::{RunGate, ToolCallRecord};
use chorus_tool_exec::{Limits, ToolError, ToolExecConfig};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::metadata::MetadataValue;
use tonic::{Response, Status};

/// Longer than anything here may take; past it the test fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// What the gate saw, in order.
#[derive(Debug)]
pub enum GateEvent {
    Authorized(String),
    /// A record arrived and waits for [`Service::release_record`].
    Recording(String),
    Recorded(ToolCallRecord),
    /// A record was given up before it was kept: its future was dropped.
    RecordDropped(String),
}

/// Reports a record whose future is dropped before it was kept.
struct DropWatch<'a> {
    events: &'a mpsc::UnboundedSender<GateEvent>,
    tool: Option<String>,
}

impl Drop for DropWatch<'_> {
    fn drop(&mut self) {
        if let Some(tool) = self.tool.take() {
            let _ = self.events.send(GateEvent::RecordDropped(tool));
        }
    }
}

#[derive(Debug)]
struct RecordingGate {
    events: mpsc::UnboundedSender<GateEvent>,
    /// When set, a record is kept only once the test gives a permit.
    hold: Option<Arc<Semaphore>>,
}

#[tonic::async_trait]
impl RunGate for RecordingGate {
    async fn authorize(
        &self,
        _token: &str,
        tool: &str,
        _question: chorus_tool_exec::gate::Question<'_>,
    ) -> Result<chorus_tool_exec::gate::Authorized, ToolError> {
        let _ = self.events.send(GateEvent::Authorized(tool.to_owned()));
        Ok(chorus_tool_exec::gate::Authorized::default())
    }

    async fn record(
        &self,
        _token: &str,
        call: ToolCallRecord,
        _call_id: Option<&str>,
    ) -> Result<(), ToolError> {
        let mut watch = DropWatch {
            events: &self.events,
            tool: Some(call.tool.clone()),
        };
        if let Some(hold) = &self.hold {
            let _ = self.events.send(GateEvent::Recording(call.tool.clone()));
            hold.acquire()
                .await
                .map_err(|e| ToolError::Internal(e.to_string()))?
                .forget();
        }
        watch.tool = None;
        let _ = self.events.send(GateEvent::Recorded(call));
        Ok(())
    }

    async fn authenticate_key(&self, _key: &str) -> Result<chorus_auth::Principal, ToolError> {
        Err(ToolError::Internal("no API keys in this test".to_owned()))
    }
}

/// A client's call in flight; abort it to leave.
pub type Call = JoinHandle<Result<Response<pb::ExecuteToolResponse>, Status>>;

pub struct Service {
    pub root: PathBuf,
    addr: SocketAddr,
    token: String,
    events: mpsc::UnboundedReceiver<GateEvent>,
    record_permits: Arc<Semaphore>,
    shutdown: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Serves with `limits`; the gate records every call at once.
    pub async fn start(limits: Limits) -> Self {
        Self::serve(limits, false).await
    }

    /// Serves with `limits`; the gate keeps each record only once the test
    /// calls [`Service::release_record`].
    pub async fn start_with_held_records(limits: Limits) -> Self {
        Self::serve(limits, true).await
    }

    async fn serve(limits: Limits, hold_records: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical root");
        let signer = RunTokenSigner::generate();
        let grant = RunGrant {
            run_id: "run-stops".to_owned(),
            task_id: "task-stops".to_owned(),
            agent: "stopper".to_owned(),
            tools: ["file.read", "file.create", "file.write", "file.patch"]
                .map(str::to_owned)
                .to_vec(),
            root: root.clone(),
            egress: Vec::new(),
            epoch: 0,
        };
        let token = signer.mint(&grant, Duration::from_secs(3600));
        let (events_tx, events) = mpsc::unbounded_channel();
        let record_permits = Arc::new(Semaphore::new(0));
        let gate = RecordingGate {
            events: events_tx,
            hold: hold_records.then(|| Arc::clone(&record_permits)),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let config = ToolExecConfig {
            limits,
            gate: Some(Arc::new(gate)),
            ..ToolExecConfig::new(
                signer.verifier(),
                chorus_sandbox::Sandbox::refusing("file tools start no process"),
            )
        };
        let (shutdown, stop) = oneshot::channel::<()>();
        let served = tokio::spawn(chorus_tool_exec::run(listener, config, async move {
            let _ = stop.await;
        }));
        Self {
            root,
            addr,
            token,
            events,
            record_permits,
            shutdown: Some(shutdown),
            served: Some(served),
            _dir: dir,
        }
    }

    /// Starts `tool(arguments)` as a client on a connection of its own.
    pub fn call(&self, tool: &str, arguments: Value) -> Call {
        self.call_within(tool, arguments, None)
    }

    /// Starts `tool(arguments)` as a client that gives the call `deadline`
    /// (`grpc-timeout`): when it passes, the client gives up and tonic's server
    /// drops the call's handler, as when a client leaves.
    pub fn call_within(&self, tool: &str, arguments: Value, deadline: Option<Duration>) -> Call {
        let Value::Object(arguments) = arguments else {
            panic!("arguments must be an object");
        };
        let mut request = tonic::Request::new(pb::ExecuteToolRequest {
            tool: tool.to_owned(),
            arguments: Some(json::to_struct(arguments)),
        });
        let bearer = MetadataValue::try_from(format!("Bearer {}", self.token)).expect("metadata");
        request.metadata_mut().insert("authorization", bearer);
        if let Some(deadline) = deadline {
            request.set_timeout(deadline);
        }
        let url = format!("http://{}", self.addr);
        tokio::spawn(async move {
            let mut client = ToolExecClient::connect(url).await.expect("connect");
            client.execute_tool(request).await
        })
    }

    /// The gate's next event.
    pub async fn event(&mut self) -> GateEvent {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("the gate heard of the call in time")
            .expect("the service holds the gate")
    }

    /// Waits until the gate authorized a call of `tool`: it is about to run.
    pub async fn authorized(&mut self, tool: &str) {
        match self.event().await {
            GateEvent::Authorized(authorized) => assert_eq!(authorized, tool),
            other => panic!("expected {tool} to be authorized, got {other:?}"),
        }
    }

    /// Waits for the next record the gate kept.
    pub async fn recorded(&mut self) -> ToolCallRecord {
        match self.event().await {
            GateEvent::Recorded(record) => record,
            GateEvent::RecordDropped(tool) => {
                panic!("the record of {tool} was dropped before it was kept")
            }
            other => panic!("expected a record, got {other:?}"),
        }
    }

    /// Lets one held record through.
    pub fn release_record(&self) {
        self.record_permits.add_permits(1);
    }

    /// Shuts the service down and waits until it stopped.
    pub async fn shut_down(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(served) = self.served.take() {
            tokio::time::timeout(WAIT, served)
                .await
                .expect("the service stopped in time")
                .expect("the service task")
                .expect("the service ran");
        }
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        std::fs::write(self.root.join(rel), content).expect("write fixture");
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root.join(rel)).expect("read fixture")
    }

    /// Names in the workspace root, sorted (a temporary file would show up here).
    pub fn names(&self) -> Vec<String> {
        names_in(&self.root)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An 8 MB text of 100,000 numbered lines of 80 bytes.
pub fn big_text() -> String {
    let filler = "x".repeat(67);
    (0..100_000)
        .map(|i| format!("line {i:06} {filler}\n"))
        .collect()
}

/// 10,000 patches, each changing one line of [`big_text`]: each has to scan the
/// whole file, so together they run far longer than a client waits here.
pub fn many_patches() -> Value {
    let patches: Vec<Value> = (0..10_000)
        .map(|i| {
            serde_json::json!({
                "find": format!("line {i:06} "),
                "replace": format!("LINE {i:06} "),
            })
        })
        .collect();
    serde_json::json!({ "path": "big.txt", "patches": patches })
}
