//! tool-exec with an orchestrator as its run gate: a call runs only when the
//! orchestrator says the run is active and allowed, and every call it runs is
//! recorded; tool-exec presents its service key and passes the agent's token in
//! the request. The orchestrator here is a fake `AgentTools` server that plays
//! the orchestrator's policy from a table; tool-exec and chorus-tools are real.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use chorus_proto::orchestrator::v1 as pb;
use chorus_proto::orchestrator::v1::agent_tools_server::{AgentTools, AgentToolsServer};
use chorus_run_token::{RunTokenSigner, RunTokenVerifier};
use chorus_tests::balancer::Balancer;
use chorus_tests::{ToolExec, ToolsEnv, chorus_tools};
use chorus_tool_exec::Limits;
use chorus_tool_exec::gate::{OrchestratorGate, RunGate};
use serde_json::json;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// The fake as a tonic service (the orphan rule forbids implementing it for Arc).
#[derive(Debug, Clone)]
struct Shared(Arc<FakeOrchestrator>);

impl std::ops::Deref for Shared {
    type Target = FakeOrchestrator;
    fn deref(&self) -> &FakeOrchestrator {
        &self.0
    }
}

#[derive(Debug)]
struct FakeOrchestrator {
    verifier: RunTokenVerifier,
    keys: Vec<pb::RunTokenKey>,
    ended_runs: HashSet<String>,
    recorded: Mutex<Vec<(String, pb::RecordToolCallRequest)>>,
    /// Told of each record taken.
    took_record: tokio::sync::Notify,
    /// Takes no record and never answers one (a replica paused or cut off
    /// after it authorized the call).
    hangs_on_records: bool,
}

impl FakeOrchestrator {
    /// The run of `token`, for a call that presented tool-exec's service key.
    fn run_of<T>(&self, request: &Request<T>, token: &str) -> Result<String, Status> {
        self.service(request)?;
        let grant = self
            .verifier
            .verify(token)
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        Ok(grant.run_id)
    }

    fn service<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if header != format!("Bearer {SERVICE_KEY}") {
            return Err(Status::unauthenticated("not tool-exec's service key"));
        }
        Ok(())
    }
}

/// The key tool-exec presents to the fake.
const SERVICE_KEY: &str = "chorus_0123456789abcdef_service";

#[tonic::async_trait]
impl AgentTools for Shared {
    async fn call_tool(
        &self,
        _request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        Err(Status::unimplemented("not part of this test"))
    }

    async fn authorize_tool_call(
        &self,
        request: Request<pb::AuthorizeToolCallRequest>,
    ) -> Result<Response<pb::AuthorizeToolCallResponse>, Status> {
        let run = self.run_of(&request, &request.get_ref().run_token)?;
        if self.ended_runs.contains(&run) {
            return Err(Status::failed_precondition(format!(
                "run {run} has ended; it can do nothing"
            )));
        }
        Ok(Response::new(pb::AuthorizeToolCallResponse {
            fence_in_ms: None,
            network_asks: false,
        }))
    }

    async fn record_tool_call(
        &self,
        request: Request<pb::RecordToolCallRequest>,
    ) -> Result<Response<pb::RecordToolCallResponse>, Status> {
        let run = self.run_of(&request, &request.get_ref().run_token)?;
        if self.hangs_on_records {
            std::future::pending::<()>().await;
        }
        self.recorded
            .lock()
            .expect("lock")
            .push((run, request.into_inner()));
        self.took_record.notify_one();
        Ok(Response::new(pb::RecordToolCallResponse {}))
    }

    async fn get_run_token_keys(
        &self,
        request: Request<pb::GetRunTokenKeysRequest>,
    ) -> Result<Response<pb::RunTokenKeys>, Status> {
        self.service(&request)?;
        Ok(Response::new(pb::RunTokenKeys {
            keys: self.keys.clone(),
            current_kid: self.keys[0].kid.clone(),
        }))
    }

    async fn authenticate_key(
        &self,
        _request: Request<pb::AuthenticateKeyRequest>,
    ) -> Result<Response<pb::AuthenticateKeyResponse>, Status> {
        Err(Status::unimplemented("not part of this test"))
    }
}

async fn start_fake(signer: &RunTokenSigner) -> (String, Arc<FakeOrchestrator>) {
    start_fake_hanging(signer, false).await
}

async fn start_fake_hanging(
    signer: &RunTokenSigner,
    hangs_on_records: bool,
) -> (String, Arc<FakeOrchestrator>) {
    let fake = Arc::new(FakeOrchestrator {
        verifier: signer.verifier(),
        keys: vec![pb::RunTokenKey {
            kid: signer.current_kid(),
            public_key_pem: signer.public_pem(),
            ..Default::default()
        }],
        ended_runs: HashSet::from(["run-ended".to_owned()]),
        recorded: Mutex::new(Vec::new()),
        took_record: tokio::sync::Notify::new(),
        hangs_on_records,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let service = AgentToolsServer::new(Shared(Arc::clone(&fake)));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    (addr, fake)
}

#[tokio::test]
async fn calls_run_only_for_active_runs_and_every_call_is_recorded() {
    let signer = RunTokenSigner::generate();
    let (fake_addr, fake) = start_fake(&signer).await;
    let gate: Arc<dyn RunGate> = Arc::new(
        OrchestratorGate::new(&fake_addr, Some(SERVICE_KEY), &Default::default(), 1).expect("gate"),
    );
    let service = ToolExec::start_with_gate(Limits::default(), signer, Some(gate)).await;
    let workspace = tempfile::tempdir().expect("workspace");
    let env = |run: &str| ToolsEnv {
        token: Some(service.token_for_run(workspace.path(), &["@developer"], run)),
        tools_addr: Some(service.addr.to_string()),
        orchestrator_addr: None,
    };

    let created = chorus_tools(
        &env("run-active"),
        &[&json!({"tool": "file.create", "path": "a.txt", "content": "hi"}).to_string()],
    )
    .await;
    assert_eq!(created.output()["bytes_written"], 2);
    let missing = chorus_tools(
        &env("run-active"),
        &[&json!({"tool": "file.read", "path": "nope.txt"}).to_string()],
    )
    .await;
    missing.expect_failure(1, "not_found");

    let ended = chorus_tools(
        &env("run-ended"),
        &[&json!({"tool": "file.create", "path": "b.txt", "content": "x"}).to_string()],
    )
    .await;
    let message = ended.expect_failure(1, "failed_precondition");
    assert!(message.contains("has ended"), "{message}");
    assert!(
        !workspace.path().join("b.txt").exists(),
        "a refused call changes nothing"
    );

    let recorded = fake.recorded.lock().expect("lock").clone();
    let summary: Vec<(&str, &str, &str)> = recorded
        .iter()
        .map(|(run, r)| (run.as_str(), r.tool.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("run-active", "file.create", "ok"),
            ("run-active", "file.read", "not_found")
        ]
    );
    let input = chorus_proto::json::from_struct(recorded[0].1.input.clone().expect("input"));
    assert_eq!(input["path"], "a.txt");
    assert!(recorded[0].1.output_excerpt.contains("bytes_written"));
    assert!(recorded[1].1.output_excerpt.contains("does not exist"));
    service.stop().await;
}

/// A replica that authorized a call and then stopped answering (paused, cut
/// off) does not cost the call its record: tool-exec answers the agent once
/// its first attempt's deadline passed, and retries the record on another
/// connection, which the load balancer gave to another replica.
#[tokio::test]
async fn a_record_the_first_replica_never_took_is_delivered_to_another() {
    let signer = RunTokenSigner::generate();
    let (hung_addr, hung) = start_fake_hanging(&signer, true).await;
    let (good_addr, good) = start_fake(&signer).await;
    let balancer = Balancer::start(vec![
        hung_addr.parse().expect("addr"),
        good_addr.parse().expect("addr"),
    ])
    .await;
    // The gate's connections go round the balancer's two replicas: a record
    // sent to the hung one is retried on another connection.
    let gate: Arc<dyn RunGate> = Arc::new(
        OrchestratorGate::new(
            &balancer.addr.to_string(),
            Some(SERVICE_KEY),
            &Default::default(),
            chorus_tool_exec::gate::pool::DEFAULT_CONNECTIONS,
        )
        .expect("gate"),
    );
    let service = ToolExec::start_with_gate(Limits::default(), signer, Some(gate)).await;
    let workspace = tempfile::tempdir().expect("workspace");
    let env = ToolsEnv {
        token: Some(service.token_for_run(workspace.path(), &["@developer"], "run-active")),
        tools_addr: Some(service.addr.to_string()),
        orchestrator_addr: None,
    };
    let took = good.took_record.notified();
    let created = chorus_tools(
        &env,
        &[&json!({"tool": "file.create", "path": "a.txt", "content": "hi"}).to_string()],
    )
    .await;
    assert_eq!(created.output()["bytes_written"], 2);
    tokio::time::timeout(std::time::Duration::from_secs(120), took)
        .await
        .expect("the record never reached the replica that answers");
    let recorded = good.recorded.lock().expect("lock").clone();
    let summary: Vec<(&str, &str, &str)> = recorded
        .iter()
        .map(|(run, r)| (run.as_str(), r.tool.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(summary, [("run-active", "file.create", "ok")]);
    assert!(hung.recorded.lock().expect("lock").is_empty());
    service.stop().await;
}

#[tokio::test]
async fn an_unreachable_orchestrator_means_nothing_runs() {
    let signer = RunTokenSigner::generate();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let gate: Arc<dyn RunGate> = Arc::new(
        OrchestratorGate::new(
            &closed.to_string(),
            Some(SERVICE_KEY),
            &Default::default(),
            1,
        )
        .expect("gate"),
    );
    let service = ToolExec::start_with_gate(Limits::default(), signer, Some(gate)).await;
    let workspace = tempfile::tempdir().expect("workspace");
    let env = ToolsEnv {
        token: Some(service.token(workspace.path(), &["@developer"])),
        tools_addr: Some(service.addr.to_string()),
        orchestrator_addr: None,
    };
    let run = chorus_tools(
        &env,
        &[&json!({"tool": "file.create", "path": "a.txt", "content": "hi"}).to_string()],
    )
    .await;
    let message = run.expect_failure(5, "unavailable");
    assert!(message.contains("orchestrator"), "{message}");
    assert!(!workspace.path().join("a.txt").exists());
    service.stop().await;
}
