//! The console's API: the orchestrator's own gRPC methods, called with JSON.
//! `POST /api/<Method>` takes the request as proto3 JSON (the shape grpcurl
//! prints) and answers the reply; `POST /api/stream/<Method>` answers a
//! server stream as one JSON document per line. Each call goes through the
//! port's layers in this process (authentication, roles, limits), so the
//! console can do nothing its key could not do with grpcurl.

use bytes::{Buf as _, BufMut as _, Bytes};
use chorus_serve::grpc::LocalService;
use chorus_serve::http::Standing;
use http::{HeaderMap, StatusCode};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor, SerializeOptions};
use serde_json::json;
use tokio::sync::mpsc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

/// The gRPC service the console's pages call.
pub const SERVICE: &str = "chorus.orchestrator.v1.Orchestrator";
/// The A2A service, whose agent card the console serves at its well-known path.
const A2A_SERVICE: &str = "lf.a2a.v1.A2AService";

/// The public agent card of a workspace (encoded `lf.a2a.v1.AgentCard`),
/// which needs no key: given by the orchestrator, for the workspace and the
/// host the client reached the console by.
pub type PublicCard = std::sync::Arc<
    dyn Fn(
            String,
            Option<String>,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, Status>> + Send>>
        + Send
        + Sync,
>;
/// How long a unary call may take before the gateway gives up.
pub(crate) const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// An answer: its status, and a JSON body or a stream of JSON lines.
pub enum Answer {
    Json(StatusCode, serde_json::Value),
    Lines(mpsc::Receiver<Bytes>),
}

/// The API, transcoded.
#[derive(Clone)]
pub struct Gateway {
    service: LocalService,
    pool: DescriptorPool,
    /// How long a stream's line may wait for the page to read it (the lines
    /// before it fill the buffer); then the stream and its connection end,
    /// as a gRPC answer left unread does (`--answer-send-secs`).
    unread: std::time::Duration,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gateway")
    }
}

impl Gateway {
    pub fn new(service: LocalService, unread: std::time::Duration) -> Result<Self, String> {
        let pool = DescriptorPool::decode(chorus_proto::FILE_DESCRIPTOR_SET)
            .map_err(|e| format!("the API's descriptors: {e}"))?;
        if pool.get_service_by_name(SERVICE).is_none() {
            return Err(format!("the descriptors have no {SERVICE}"));
        }
        Ok(Self {
            service,
            pool,
            unread,
        })
    }

    /// The contract's descriptors.
    pub(crate) fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// Calls the unary method at `path` with an encoded message: the
    /// answer's metadata and encoded message.
    pub(crate) async fn unary_raw(
        &self,
        request: tonic::Request<Vec<u8>>,
        path: http::uri::PathAndQuery,
    ) -> Result<(tonic::metadata::MetadataMap, Vec<u8>), Status> {
        let (metadata, reply, _) = unary(self.service.clone(), request, path)
            .await?
            .into_parts();
        Ok((metadata, reply))
    }

    /// Calls the server-streaming method at `path` with an encoded message.
    pub(crate) async fn stream_raw(
        &self,
        request: tonic::Request<Vec<u8>>,
        path: http::uri::PathAndQuery,
    ) -> Result<(tonic::metadata::MetadataMap, tonic::Streaming<Vec<u8>>), Status> {
        let (metadata, replies, _) = streaming(self.service.clone(), request, path)
            .await?
            .into_parts();
        Ok((metadata, replies))
    }

    /// How long a streamed answer may wait for its reader.
    pub(crate) fn unread(&self) -> std::time::Duration {
        self.unread
    }

    fn method(&self, service: &str, name: &str) -> Option<MethodDescriptor> {
        self.pool
            .get_service_by_name(service)?
            .methods()
            .find(|m| m.name() == name && !m.is_client_streaming())
    }

    /// The agent card of `workspace` as A2A clients read it (JSON): with
    /// the caller's key (its `authorization` header), the extended card —
    /// the workspace's agents as skills — as GetExtendedAgentCard gives it
    /// to a viewer; without one, the public card from `public`.
    pub async fn agent_card(
        &self,
        workspace: &str,
        headers: &HeaderMap,
        seen_host: Option<String>,
        public: Option<&PublicCard>,
    ) -> Answer {
        let Some(card) = self.pool.get_message_by_name("lf.a2a.v1.AgentCard") else {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                "no AgentCard in the descriptors".to_owned(),
            );
        };
        if headers.contains_key(http::header::AUTHORIZATION) {
            let body = json!({ "tenant": workspace }).to_string();
            let (method, mut request, path) = match self.request(
                A2A_SERVICE,
                "GetExtendedAgentCard",
                false,
                headers,
                body.as_bytes(),
            ) {
                Ok(parts) => parts,
                Err(answer) => return answer,
            };
            if let Some(host) = seen_host
                .as_deref()
                .and_then(|h| tonic::metadata::MetadataValue::try_from(h).ok())
            {
                request.metadata_mut().insert(crate::SEEN_HOST_HEADER, host);
            }
            return match unary(self.service.clone(), request, path).await {
                Ok(reply) => match to_json(&method.output(), reply.get_ref()) {
                    Ok(json) => Answer::Json(StatusCode::OK, json),
                    Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e),
                },
                Err(status) => failed(&status),
            };
        }
        let Some(public) = public else {
            return error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "no agent cards are served here".to_owned(),
            );
        };
        match public(workspace.to_owned(), seen_host).await {
            Ok(bytes) => match to_json(&card, &bytes) {
                Ok(json) => Answer::Json(StatusCode::OK, json),
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e),
            },
            Err(status) => failed(&status),
        }
    }

    /// Calls `name` with the JSON `body`, presenting the caller's
    /// `authorization` header; `stream` for a server-streaming method. Also
    /// says whether the API accepted the caller's credential.
    pub async fn call(
        &self,
        name: &str,
        stream: bool,
        headers: &HeaderMap,
        body: &[u8],
        connection: Option<Standing>,
    ) -> (Answer, bool) {
        let (method, request, path) = match self.request(SERVICE, name, stream, headers, body) {
            Ok(parts) => parts,
            Err(answer) => return (answer, false),
        };
        let output = method.output();
        if !stream {
            return match unary(self.service.clone(), request, path).await {
                Ok(reply) => match to_json(&output, reply.get_ref()) {
                    Ok(json) => (Answer::Json(StatusCode::OK, json), true),
                    Err(e) => (
                        error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e),
                        true,
                    ),
                },
                Err(status) => (failed(&status), credential_accepted(&status)),
            };
        }
        match streaming(self.service.clone(), request, path).await {
            Ok(replies) => (
                Answer::Lines(lines(replies.into_inner(), output, self.unread, connection)),
                true,
            ),
            Err(status) => (failed(&status), credential_accepted(&status)),
        }
    }

    /// The gRPC request of a call: its method, its message with the caller's
    /// credential, its path; or the answer that refuses it.
    fn request(
        &self,
        service: &str,
        name: &str,
        stream: bool,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<
        (
            MethodDescriptor,
            tonic::Request<Vec<u8>>,
            http::uri::PathAndQuery,
        ),
        Answer,
    > {
        let Some(method) = self.method(service, name) else {
            return Err(error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("no method {name} in {service}"),
            ));
        };
        if method.is_server_streaming() != stream {
            let path = if method.is_server_streaming() {
                "/api/stream/"
            } else {
                "/api/"
            };
            return Err(error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                format!("{name} is called at {path}{name}"),
            ));
        }
        let input = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}".as_slice()
        } else {
            body
        };
        let mut deserializer = serde_json::Deserializer::from_slice(input);
        let message =
            DynamicMessage::deserialize(method.input(), &mut deserializer).map_err(|e| {
                error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_ARGUMENT",
                    format!(
                        "the request is not a valid {} in JSON: {e}",
                        method.input().name()
                    ),
                )
            })?;
        let mut request = tonic::Request::new(message.encode_to_vec());
        if let Some(value) = headers.get(http::header::AUTHORIZATION)
            && let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes())
        {
            request.metadata_mut().insert("authorization", value);
        }
        if !stream {
            request.set_timeout(CALL_TIMEOUT);
        }
        let path = http::uri::PathAndQuery::try_from(format!("/{service}/{name}"))
            .map_err(|e| error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", e.to_string()))?;
        Ok((method, request, path))
    }
}

/// A stream's replies as JSON lines; an error ends them with one last line.
/// When the page goes away the receiver is dropped, and with it the call; a
/// page that leaves a line unread for `unread` loses the call and its
/// `connection`.
fn lines(
    replies: tonic::Streaming<Vec<u8>>,
    output: prost_reflect::MessageDescriptor,
    unread: std::time::Duration,
    connection: Option<Standing>,
) -> mpsc::Receiver<Bytes> {
    pump(replies, unread, connection, move |reply| {
        let line = match reply {
            Ok(bytes) => match to_json(&output, &bytes) {
                Ok(json) => json,
                Err(e) => json!({ "error": { "code": "INTERNAL", "message": e } }),
            },
            Err(status) => json!({ "error": status_json(&status) }),
        };
        let last = line.get("error").is_some();
        let mut text = line.to_string().into_bytes();
        text.push(b'\n');
        (Bytes::from(text), last)
    })
}

/// Sends a stream's replies, each as `format` makes it (its bytes, and
/// whether it is the last), until the stream ends or a reply is the last.
/// When the reader goes away the receiver is dropped, and with it the call;
/// a reader that leaves a reply unread for `unread` (the replies before it
/// filling the buffer) loses the call and its `connection`.
pub(crate) fn pump(
    mut replies: tonic::Streaming<Vec<u8>>,
    unread: std::time::Duration,
    connection: Option<Standing>,
    format: impl Fn(Result<Vec<u8>, Status>) -> (Bytes, bool) + Send + 'static,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (bytes, last) = match replies.message().await {
                Ok(Some(bytes)) => format(Ok(bytes)),
                Ok(None) => return,
                Err(status) => format(Err(status)),
            };
            match tokio::time::timeout(unread, tx.send(bytes)).await {
                Ok(Ok(())) if !last => {}
                Ok(_) => return,
                Err(_) => {
                    if let Some(connection) = &connection {
                        connection.close();
                    }
                    return;
                }
            }
        }
    });
    rx
}

fn client(service: LocalService) -> tonic::client::Grpc<LocalService> {
    tonic::client::Grpc::with_origin(service, http::Uri::from_static("http://console.local"))
        .max_decoding_message_size(64 * 1024 * 1024)
}

async fn unary(
    service: LocalService,
    request: tonic::Request<Vec<u8>>,
    path: http::uri::PathAndQuery,
) -> Result<tonic::Response<Vec<u8>>, Status> {
    let mut grpc = client(service);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    grpc.unary(request, path, Raw).await
}

async fn streaming(
    service: LocalService,
    request: tonic::Request<Vec<u8>>,
    path: http::uri::PathAndQuery,
) -> Result<tonic::Response<tonic::Streaming<Vec<u8>>>, Status> {
    let mut grpc = client(service);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    grpc.server_streaming(request, path, Raw).await
}

fn to_json(
    descriptor: &prost_reflect::MessageDescriptor,
    bytes: &[u8],
) -> Result<serde_json::Value, String> {
    let message = DynamicMessage::decode(descriptor.clone(), bytes).map_err(|e| e.to_string())?;
    let options = SerializeOptions::new().skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| e.to_string())
}

/// Whether a call refused with `status` had its credential accepted: refused
/// for what it asked, not for who asked or how busy the API is.
pub(crate) fn credential_accepted(status: &Status) -> bool {
    !matches!(
        status.code(),
        Code::Unauthenticated | Code::ResourceExhausted | Code::Unavailable
    )
}

fn status_json(status: &Status) -> serde_json::Value {
    let code = format!("{:?}", status.code());
    json!({ "code": screaming(&code), "message": status.message() })
}

/// `PermissionDenied` → `PERMISSION_DENIED`, as gRPC names its codes.
fn screaming(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn error(status: StatusCode, code: &str, message: String) -> Answer {
    Answer::Json(
        status,
        json!({ "error": { "code": code, "message": message } }),
    )
}

/// A gRPC status as an HTTP answer (the HTTP code as gRPC's own mapping
/// suggests; the body keeps the gRPC code and message).
fn failed(status: &Status) -> Answer {
    let http = match status.code() {
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Answer::Json(http, json!({ "error": status_json(status) }))
}

/// Messages as the bytes they are: the gateway encodes and decodes them
/// itself, by their descriptors.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Self::Encoder {
        Raw
    }

    fn decoder(&mut self) -> Self::Decoder {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut bytes = vec![0; src.remaining()];
        src.copy_to_slice(&mut bytes);
        Ok(Some(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_grpc_names_them() {
        assert_eq!(screaming("PermissionDenied"), "PERMISSION_DENIED");
        assert_eq!(screaming("Ok"), "OK");
    }
}
