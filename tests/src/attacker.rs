//! What a hostile client does at the HTTP/2 level, which a gRPC client
//! library will not: requests whose message never comes, answers it never
//! reads, connections that never say a word.

use std::net::SocketAddr;

use bytes::Bytes;
use tokio::net::TcpStream;

/// An HTTP/2 connection driven by its own task; the task ends (with the
/// connection's error) when the server closes it.
pub struct H2 {
    pub send: h2::client::SendRequest<Bytes>,
    pub driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

/// An HTTP/2 connection to `addr`; with `window` 0, the server can send
/// headers but no byte of any answer until the client reads, which it never
/// does.
pub async fn connect(addr: SocketAddr, window: Option<u32>) -> H2 {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let mut builder = h2::client::Builder::new();
    if let Some(window) = window {
        builder.initial_window_size(window);
    }
    let (send, connection) = builder.handshake(tcp).await.expect("HTTP/2 handshake");
    let driver = tokio::spawn(connection);
    let send = send.ready().await.expect("ready");
    H2 { send, driver }
}

/// The HEADERS of a gRPC call to `path` with `bearer` as its credential.
fn headers(path: &str, bearer: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://chorus{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {bearer}"))
        .body(())
        .expect("request")
}

/// A call whose headers are sent and whose message never is: the answer's
/// future, and the stream that must stay alive for the message to stay
/// missing.
pub fn bodiless(
    h2: &mut H2,
    path: &str,
    bearer: &str,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    h2.send
        .send_request(headers(path, bearer), false)
        .expect("send headers")
}

/// A whole gRPC call of `message` (encoded protobuf) whose answer is never
/// read: the answer's future.
pub fn unread(h2: &mut H2, path: &str, bearer: &str, message: &[u8]) -> h2::client::ResponseFuture {
    let (answer, mut body) = h2
        .send
        .send_request(headers(path, bearer), false)
        .expect("send headers");
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .expect("a small message")
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    body.send_data(Bytes::from(framed), true)
        .expect("send the message");
    answer
}

/// The gRPC status of an answer that came as headers only, or in trailers
/// read from its body.
pub async fn status(answer: h2::client::ResponseFuture) -> Result<tonic::Status, h2::Error> {
    let response = answer.await?;
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return Ok(status);
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        let data = data?;
        let _ = body.flow_control().release_capacity(data.len());
    }
    let trailers = body.trailers().await?.unwrap_or_default();
    Ok(tonic::Status::from_header_map(&trailers)
        .unwrap_or_else(|| tonic::Status::unknown("an answer without a status")))
}

/// The resident memory of process `pid` now and at its peak, in MiB.
pub fn memory_mib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kb| kb / 1024)
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The request of a tool call: `tool` with `arguments` (a JSON object).
pub fn tool_call(
    tool: &str,
    arguments: &serde_json::Value,
) -> chorus_proto::tools::v1::ExecuteToolRequest {
    chorus_proto::tools::v1::ExecuteToolRequest {
        tool: tool.to_owned(),
        arguments: Some(chorus_proto::json::to_struct(
            arguments.as_object().cloned().unwrap_or_default(),
        )),
    }
}

/// chorus-tools started as an agent's CLI would start it: `call` with the
/// run's token and tool-exec address only, its output piped.
pub fn agent_call(
    run: &chorus_proto::orchestrator::v1::OpenRunResponse,
    call: &str,
) -> tokio::process::Child {
    tokio::process::Command::new(crate::chorus_tools_bin())
        .arg(call)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CHORUS_RUN_TOKEN", &run.token)
        .env("CHORUS_TOOLS_ADDR", &run.tools_addr)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start chorus-tools")
}
