//! chorus-tools honours pushback: a call its service refused unrun at its
//! limit (RESOURCE_EXHAUSTED with a `grpc-retry-pushback-ms` hint) is sent
//! again after the hint, with jitter, within `CHORUS_TOOLS_RETRY_SECS`; a call
//! that ran is never sent twice. Before, the first refusal ended the call
//! (exit 5), and 69 of 1,000 concurrent tasks never got their report.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chorus_proto::tools::v1::tool_exec_server::{ToolExec, ToolExecServer};
use chorus_proto::tools::v1::{
    ExecuteToolRequest, ExecuteToolResponse, GetStatusRequest, GetStatusResponse, ListToolsRequest,
    ListToolsResponse,
};
use chorus_tests::{ToolsEnv, chorus_tools};
use tonic::{Request, Response, Status};

/// A tool-exec that refuses its first `busy` calls at its limit, then answers;
/// counts the calls.
#[derive(Clone)]
struct Busy {
    busy: usize,
    calls: Arc<AtomicUsize>,
    /// The code of the refusals: RESOURCE_EXHAUSTED with a hint, or another.
    code: tonic::Code,
}

#[tonic::async_trait]
impl ToolExec for Busy {
    async fn execute_tool(
        &self,
        _: Request<ExecuteToolRequest>,
    ) -> Result<Response<ExecuteToolResponse>, Status> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.busy {
            let mut metadata = tonic::metadata::MetadataMap::new();
            metadata.insert("grpc-retry-pushback-ms", "50".parse().expect("ascii"));
            return Err(Status::with_metadata(
                self.code,
                "tool-exec is serving its limit of 1 calls of agents at once; nothing of this call was done",
                metadata,
            ));
        }
        Ok(Response::new(ExecuteToolResponse {
            output: Some(chorus_proto::json::to_value(serde_json::json!("done"))),
            ..Default::default()
        }))
    }

    async fn list_tools(
        &self,
        _: Request<ListToolsRequest>,
    ) -> Result<Response<ListToolsResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn get_status(
        &self,
        _: Request<GetStatusRequest>,
    ) -> Result<Response<GetStatusResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }
}

/// Serves `busy` on 127.0.0.1; the env of a chorus-tools calling it.
async fn serve(busy: Busy) -> ToolsEnv {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ToolExecServer::new(busy))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    ToolsEnv {
        token: Some("a-token".into()),
        tools_addr: Some(addr.to_string()),
        orchestrator_addr: None,
    }
}

const CALL: &str = r#"{"tool":"file.read","path":"notes.txt"}"#;

#[tokio::test]
async fn a_call_refused_unrun_is_sent_again_until_it_is_served() {
    let calls = Arc::new(AtomicUsize::new(0));
    let env = serve(Busy {
        busy: 3,
        calls: calls.clone(),
        code: tonic::Code::ResourceExhausted,
    })
    .await;
    let run = chorus_tools(&env, &[CALL]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("done"), "{run:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "three refusals, then served"
    );
}

#[tokio::test]
async fn retries_end_within_their_time_with_the_services_answer() {
    let calls = Arc::new(AtomicUsize::new(0));
    let env = serve(Busy {
        busy: usize::MAX,
        calls: calls.clone(),
        code: tonic::Code::ResourceExhausted,
    })
    .await;
    // The harness gives chorus-tools one second of retries.
    let run = chorus_tools(&env, &[CALL]).await;
    let message = run.expect_failure(5, "resource_exhausted");
    assert!(
        message.contains("nothing of this call was done")
            && message.contains("CHORUS_TOOLS_RETRY_SECS"),
        "{message}"
    );
    let attempts = calls.load(Ordering::SeqCst);
    assert!(attempts > 1, "it retried ({attempts} attempts)");
}

#[tokio::test]
async fn a_call_that_ran_is_never_sent_twice() {
    let calls = Arc::new(AtomicUsize::new(0));
    // UNAVAILABLE from the service itself: the call may have run.
    let env = serve(Busy {
        busy: 1,
        calls: calls.clone(),
        code: tonic::Code::Unavailable,
    })
    .await;
    let run = chorus_tools(&env, &[CALL]).await;
    run.expect_failure(5, "unavailable");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
