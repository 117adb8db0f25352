//! Graceful shutdown with a tool call in flight: health goes NOT_SERVING, the
//! running bash command and every process it started are killed, and the caller
//! gets an answer instead of a hung call.

use std::path::Path;

use chorus_proto::json;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_tests::ToolExec;
use serde_json::json;

/// True while `pid` is a live process (a zombie waiting to be reaped is dead).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_running_commands_and_answers_the_caller() {
    let service = ToolExec::start().await;
    let workspace = tempfile::tempdir().expect("workspace");
    let fifo = workspace.path().join("ready.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");

    let channel = tonic::transport::Endpoint::from_shared(service.url())
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = ToolExecClient::new(channel);
    let mut request = tonic::Request::new(ExecuteToolRequest {
        tool: "bash".into(),
        arguments: Some(json::to_struct(
            json!({"command": "sleep 1000 & echo $! > ready.fifo; wait", "timeout_secs": 600})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        )),
    });
    let auth = format!("Bearer {}", service.token(workspace.path(), &["bash"]));
    request
        .metadata_mut()
        .insert("authorization", auth.parse().expect("ascii"));
    let call = tokio::spawn(async move { client.execute_tool(request).await });

    // The command signals that it is running by writing its child's pid to the fifo.
    let fifo_path = fifo.clone();
    let pid: i32 = tokio::task::spawn_blocking(move || read_pid(&fifo_path))
        .await
        .expect("reader");
    assert!(
        running(pid),
        "the command's child is running before shutdown"
    );

    service.stop().await;

    let answer = call
        .await
        .expect("call task")
        .expect("the in-flight call is answered")
        .into_inner();
    let error = answer
        .error
        .expect("an in-band error says the command was cut short");
    assert_eq!(error.code, "cancelled", "{error:?}");
    assert!(
        !running(pid),
        "the command's child {pid} was killed with its process group"
    );
}

fn read_pid(fifo: &Path) -> i32 {
    let text = std::fs::read_to_string(fifo).expect("read fifo");
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid from fifo {text:?}: {e}"))
}
