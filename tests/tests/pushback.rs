//! chorus-tools honours pushback: a call its service refused unrun at its
//! limit (RESOURCE_EXHAUSTED with a `grpc-retry-pushback-ms` hint) is sent
//! again after the hint, with jitter, within `CHORUS_TOOLS_RETRY_SECS`; a call
//! that ran is never sent twice. Before, the first refusal ended the call
//! (exit 5), and 69 of 1,000 concurrent tasks never got their report.
//!
//! A call whose connection the service closed with a GOAWAY that did not
//! count it (a connection evicted among one address's unproven ones, before
//! it took a call) is sent again too. Before, such calls failed with
//! "transport error": 83 of 4,000 in a burst of 1,000 runs.

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

/// Serves `busy` on 127.0.0.1 after closing its first `closed` connections as
/// a server does that took none of their calls (`taken` false: a GOAWAY with
/// last stream 0) or took the first (`taken`: last stream 1), each once it has
/// read the call; the env of a chorus-tools calling it, and the connections.
async fn serve_after_goodbyes(
    busy: Busy,
    closed: usize,
    taken: bool,
) -> (ToolsEnv, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let (served, to_serve) =
        tokio::sync::mpsc::channel::<std::io::Result<tokio::net::TcpStream>>(8);
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            if counted.fetch_add(1, Ordering::SeqCst) < closed {
                tokio::spawn(say_goodbye(tcp, u32::from(taken)));
            } else if served.send(Ok(tcp)).await.is_err() {
                return;
            }
        }
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ToolExecServer::new(busy))
            .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(to_serve)),
    );
    let env = ToolsEnv {
        token: Some("a-token".into()),
        tools_addr: Some(addr.to_string()),
        orchestrator_addr: None,
    };
    (env, connections)
}

/// Reads the client's preface and frames until it has opened stream 1, then
/// answers with the server's SETTINGS and a GOAWAY naming `last` as the last
/// stream taken, and closes.
async fn say_goodbye(mut tcp: tokio::net::TcpStream, last: u32) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut read = Vec::new();
    let mut at = 24;
    loop {
        let mut chunk = [0_u8; 1024];
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => read.extend_from_slice(&chunk[..n]),
        }
        let mut opened = false;
        while read.len() >= at + 9 {
            let length = usize::from(read[at]) << 16
                | usize::from(read[at + 1]) << 8
                | usize::from(read[at + 2]);
            opened |= read[at + 3] == 0x1;
            at += 9 + length;
        }
        if opened {
            break;
        }
    }
    let mut goodbye = vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    goodbye.extend_from_slice(&[0, 0, 8, 0x7, 0, 0, 0, 0, 0]);
    goodbye.extend_from_slice(&last.to_be_bytes());
    goodbye.extend_from_slice(&0_u32.to_be_bytes());
    let _ = tcp.write_all(&goodbye).await;
    let _ = tcp.shutdown().await;
    // Reads to the end, so that the close is not a reset.
    let _ = tokio::io::copy(&mut tcp, &mut tokio::io::sink()).await;
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

#[tokio::test]
async fn a_call_its_service_closed_the_connection_before_taking_is_sent_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let busy = Busy {
        busy: 0,
        calls: calls.clone(),
        code: tonic::Code::ResourceExhausted,
    };
    let (env, connections) = serve_after_goodbyes(busy, 2, false).await;
    let run = chorus_tools(&env, &[CALL]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("done"), "{run:?}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        3,
        "two goodbyes, then served"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_its_service_may_have_taken_before_closing_is_never_sent_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let busy = Busy {
        busy: 0,
        calls: calls.clone(),
        code: tonic::Code::ResourceExhausted,
    };
    let (env, connections) = serve_after_goodbyes(busy, 1, true).await;
    let run = chorus_tools(&env, &[CALL]).await;
    assert_ne!(run.code, 0, "{run:?}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "the call was sent again though its service may have run it: {run:?}"
    );
}
