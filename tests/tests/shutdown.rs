//! Graceful shutdown with a tool call in flight: health goes NOT_SERVING, the
//! running bash command and every process it started (setsid and daemons
//! included) are killed, and the caller gets an answer instead of a hung call.

use chorus_proto::json;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_sandbox::testing::{ESCAPEES, escapees, eventually, give_to_test_user, survivors};
use chorus_tests::ToolExec;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_running_commands_and_answers_the_caller() {
    let service = ToolExec::start().await;
    let workspace = tempfile::tempdir().expect("workspace");
    give_to_test_user(workspace.path());
    let marker = "chorus-escapee-tool-exec-shutdown";

    let channel = tonic::transport::Endpoint::from_shared(service.url())
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = ToolExecClient::new(channel);
    let mut request = tonic::Request::new(ExecuteToolRequest {
        tool: "bash".into(),
        arguments: Some(json::to_struct(
            json!({"command": format!("{} wait", escapees(marker)), "timeout_secs": 600})
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
    eventually("the command's children run before shutdown", || {
        survivors(marker).len() == ESCAPEES
    })
    .await;

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
    assert_eq!(
        survivors(marker),
        Vec::<i32>::new(),
        "the command's children were killed with it"
    );
}
