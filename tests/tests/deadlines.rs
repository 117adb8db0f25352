//! The request timeout of unary calls: a unary call still running past
//! `--request-timeout-secs` (here: waiting on a database the test keeps
//! locked) is stopped and answered DEADLINE_EXCEEDED naming the limit and the
//! flag, while a WatchTask stream opened before it goes on delivering. A
//! client's shorter `grpc-timeout` is answered the same way, naming it.

use std::time::Duration;

use chorus_proto::orchestrator::v1 as pb;
use chorus_run_token::RunTokenSigner;
use chorus_tests::agents::workspace;
use chorus_tests::db::databases;
use chorus_tests::orchestrator::Orchestrator;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, SqliteConnection};
use tonic::Code;

/// A connection that keeps the tasks of `db` from being written until it is
/// dropped: SQLite's write lock (the orchestrator's writers wait for it, up
/// to their 5 s busy timeout), or PostgreSQL's EXCLUSIVE lock on `tasks`
/// (readers go on; writers wait).
enum Lock {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Lock {
    fn take(url: &str, backend: &str) -> Self {
        match backend {
            "sqlite" => {
                let mut conn = SqliteConnection::establish(url).expect("open SQLite");
                conn.batch_execute("BEGIN IMMEDIATE")
                    .expect("the write lock");
                Self::Sqlite(conn)
            }
            _ => {
                let mut conn = PgConnection::establish(url).expect("connect");
                conn.batch_execute("BEGIN; LOCK TABLE tasks IN EXCLUSIVE MODE")
                    .expect("lock tasks");
                Self::Postgres(conn)
            }
        }
    }

    fn release(self) {
        match self {
            Self::Sqlite(mut conn) => conn.batch_execute("ROLLBACK").expect("unlock"),
            Self::Postgres(mut conn) => conn.batch_execute("ROLLBACK").expect("unlock"),
        }
    }
}

fn new_task(workspace_id: &str, description: &str) -> pb::CreateTaskRequest {
    pb::CreateTaskRequest {
        budget: None,
        workspace_id: workspace_id.to_owned(),
        description: description.into(),
        source: None,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_past_the_request_timeout_is_stopped_while_a_stream_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    for db in databases(dir.path()) {
        let root = tempfile::tempdir().expect("root");
        // Shorter than SQLite's 5 s busy timeout: the deadline comes first.
        let orchestrator =
            Orchestrator::start_configured(&db.url, RunTokenSigner::generate(), true, |config| {
                config.serve.request_timeout = Duration::from_secs(1)
            })
            .await;
        let mut client = orchestrator.client().await;
        let ws = workspace(&mut client, "slow", root.path()).await;
        let task = client
            .create_task(new_task(&ws.id, "watched"))
            .await
            .expect("task")
            .into_inner();
        let mut stream = client
            .watch_task(pb::WatchTaskRequest {
                task_id: task.id.clone(),
                after_sequence: 0,
                follow: true,
                until_needed: false,
            })
            .await
            .expect("watch")
            .into_inner();
        assert_eq!(
            stream.message().await.expect("event").expect("one").kind,
            "task_created"
        );

        let (url, backend) = (db.url.clone(), db.backend);
        let lock = tokio::task::spawn_blocking(move || Lock::take(&url, backend))
            .await
            .expect("lock");
        let stopped = client
            .create_task(new_task(&ws.id, "waits on the lock"))
            .await
            .expect_err("stopped at its deadline");
        assert_eq!(
            stopped.code(),
            Code::DeadlineExceeded,
            "{}: {stopped:?}",
            db.backend
        );
        assert_eq!(
            stopped.message(),
            "the call ran past this service's limit of 1 s per call (--request-timeout-secs) and was stopped; a change it was making may have been made anyway: look before you retry",
            "{}",
            db.backend
        );
        tokio::task::spawn_blocking(move || lock.release())
            .await
            .expect("unlock");

        // The stream, older than the limit, still delivers.
        client
            .cancel_task(pb::CancelTaskRequest {
                id: task.id.clone(),
                reason: "seen enough".into(),
                ..Default::default()
            })
            .await
            .expect("cancel");
        let event = stream.message().await.expect("event").expect("one");
        assert_eq!(event.kind, "status_changed", "{}", db.backend);
        orchestrator.stop().await;
    }
}

/// A client that leaves its deadline to the server: one CreateTask over
/// plain HTTP/2 with `grpc-timeout` and no timer of its own (tonic's and
/// grpc-go's clients also stop at their deadline themselves).
async fn create_task_with_deadline(
    orchestrator: &Orchestrator,
    workspace_id: &str,
    grpc_timeout: &str,
) -> tonic::Status {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use prost::Message;

    let message = new_task(workspace_id, "in a hurry").encode_to_vec();
    let mut frame = vec![0_u8];
    frame.extend(u32::try_from(message.len()).expect("small").to_be_bytes());
    frame.extend(message);
    let request = hyper::Request::post(format!(
        "http://{}/chorus.orchestrator.v1.Orchestrator/CreateTask",
        orchestrator.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-timeout", grpc_timeout)
    .header(
        "authorization",
        format!("Bearer {}", orchestrator.admin_key),
    )
    .body(Full::new(Bytes::from(frame)))
    .expect("request");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let response = client.request(request).await.expect("an answer");
    // A refusal comes trailers-only: its status is in the headers.
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return status;
    }
    let trailers = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .trailers()
        .cloned()
        .unwrap_or_default();
    tonic::Status::from_header_map(&trailers).expect("a status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_shorter_deadline_is_answered_deadline_exceeded_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    let db = databases(dir.path()).remove(0);
    let root = tempfile::tempdir().expect("root");
    let orchestrator = Orchestrator::start(&db.url, dir.path()).await;
    let mut client = orchestrator.client().await;
    let ws = workspace(&mut client, "hurried", root.path()).await;

    let (url, backend) = (db.url.clone(), db.backend);
    let lock = tokio::task::spawn_blocking(move || Lock::take(&url, backend))
        .await
        .expect("lock");
    let stopped = create_task_with_deadline(&orchestrator, &ws.id, "300m").await;
    assert_eq!(stopped.code(), Code::DeadlineExceeded, "{stopped:?}");
    assert!(
        stopped
            .message()
            .starts_with("the call ran past the deadline its client set (300 ms in grpc-timeout)"),
        "{}",
        stopped.message()
    );
    tokio::task::spawn_blocking(move || lock.release())
        .await
        .expect("unlock");
    orchestrator.stop().await;
}
