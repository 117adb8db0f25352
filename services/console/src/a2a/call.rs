//! One A2A call of an HTTP binding, made through the gRPC face: the JSON
//! request becomes the method's message (proto3 JSON, by the contract's own
//! descriptors), the workspace of the URL its tenant, the caller's headers
//! its metadata; the answer comes back as JSON or as a stream of messages.

use bytes::Bytes;
use http::HeaderMap;
use prost::Message as _;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, MessageDescriptor, MethodDescriptor, SerializeOptions,
    Value as Field,
};
use serde_json::Value;
use tonic::metadata::{MetadataMap, MetadataValue};

use super::errors::Failure;
use crate::gateway::{Gateway, credential_accepted};
use chorus_serve::http::Standing;

/// The A2A service of the contract.
pub const SERVICE: &str = "lf.a2a.v1.A2AService";

/// The request headers a call carries on as gRPC metadata: the caller's
/// credential, A2A's service parameters, Chorus's resubscribe point and
/// the trace the caller is in.
const FORWARDED: &[&str] = &[
    "authorization",
    "a2a-version",
    "a2a-extensions",
    "x-a2a-extensions",
    "chorus-after-sequence",
    "traceparent",
    "tracestate",
];

/// The answer metadata an HTTP binding gives back as headers: a push
/// config's secret, shown once.
pub const ANSWERED: &[&str] = &["chorus-push-secret"];

/// A call's answer: a message (as JSON) or a stream of them, with the
/// answer's metadata.
pub enum Reply {
    Unary(Value, MetadataMap),
    Stream(tonic::Streaming<Vec<u8>>, MessageDescriptor, MetadataMap),
}

/// A method of the A2A service by its name (`SendMessage`).
pub fn method(gateway: &Gateway, name: &str) -> Option<MethodDescriptor> {
    gateway
        .pool()
        .get_service_by_name(SERVICE)?
        .methods()
        .find(|m| m.name() == name)
}

/// `json` as the input message of `method`, for the workspace `workspace`
/// (its `tenant`, when it has one, must be that workspace or empty). Fields
/// this contract does not know are ignored, as A2A asks of a receiver.
pub fn message(
    method: &MethodDescriptor,
    json: Value,
    workspace: &str,
) -> Result<DynamicMessage, Failure> {
    let input = method.input();
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let mut message = DynamicMessage::deserialize_with_options(input.clone(), json, &options)
        .map_err(|e| {
            Failure::a2a(
                "INVALID_PARAMS",
                format!("the params are not a {} of A2A 1.0: {e}", input.name()),
            )
        })?;
    if let Some(tenant) = input.get_field_by_name("tenant") {
        let given = message
            .get_field(&tenant)
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !given.is_empty() && given != workspace {
            return Err(Failure::a2a(
                "INVALID_PARAMS",
                format!(
                    "tenant: '{given}' is not the workspace of this URL ('{workspace}'); leave it out or send to /a2a/{given}"
                ),
            ));
        }
        message.set_field(&tenant, Field::String(workspace.to_owned()));
    }
    Ok(message)
}

/// Calls `method` with `message` as the caller of `headers`; proves the
/// caller's connection when the face accepted its credential.
pub async fn call(
    gateway: &Gateway,
    method: &MethodDescriptor,
    message: &DynamicMessage,
    headers: &HeaderMap,
    standing: Option<&Standing>,
) -> Result<Reply, Failure> {
    let mut request = tonic::Request::new(message.encode_to_vec());
    for name in FORWARDED {
        for value in headers.get_all(*name) {
            if let Ok(value) = MetadataValue::try_from(value.as_bytes()) {
                request.metadata_mut().append(*name, value);
            }
        }
    }
    let path = http::uri::PathAndQuery::try_from(format!("/{SERVICE}/{}", method.name()))
        .map_err(|e| Failure::a2a("INTERNAL_ERROR", e.to_string()))?;
    let answer = if method.is_server_streaming() {
        gateway
            .stream_raw(request, path)
            .await
            .map(|(metadata, replies)| Reply::Stream(replies, method.output(), metadata))
    } else {
        request.set_timeout(crate::gateway::CALL_TIMEOUT);
        match gateway.unary_raw(request, path).await {
            Ok((metadata, bytes)) => {
                to_json(&method.output(), &bytes).map(|json| Reply::Unary(json, metadata))
            }
            Err(status) => Err(status),
        }
    };
    let accepted = match &answer {
        Ok(_) => true,
        Err(status) => credential_accepted(status),
    };
    if accepted && let Some(standing) = standing {
        standing.prove();
    }
    answer.map_err(|status| Failure::from_status(&status))
}

/// A message of `descriptor` in proto3 JSON, as A2A's JSON bindings carry
/// it (camelCase names, fields at their defaults left out).
pub fn to_json(descriptor: &MessageDescriptor, bytes: &[u8]) -> Result<Value, tonic::Status> {
    let message = DynamicMessage::decode(descriptor.clone(), bytes)
        .map_err(|e| tonic::Status::internal(format!("an answer of the face: {e}")))?;
    message
        .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
        .map_err(|e| tonic::Status::internal(format!("an answer of the face: {e}")))
}

/// [`to_json`] written straight into `out`, with no tree of values between;
/// an event of a stream by its generated serde ([`write_event`]).
pub fn write_json(
    descriptor: &MessageDescriptor,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), tonic::Status> {
    if descriptor.full_name() == STREAM_RESPONSE {
        return write_event(bytes, out);
    }
    let message = DynamicMessage::decode(descriptor.clone(), bytes)
        .map_err(|e| tonic::Status::internal(format!("an answer of the face: {e}")))?;
    let mut serializer = serde_json::Serializer::new(out);
    message
        .serialize_with_options(&mut serializer, &SerializeOptions::new())
        .map_err(|e| tonic::Status::internal(format!("an answer of the face: {e}")))
}

/// The full name of the message every A2A stream carries.
pub const STREAM_RESPONSE: &str = "lf.a2a.v1.StreamResponse";

/// A stream's event (`lf.a2a.v1.StreamResponse`) in proto3 JSON, written
/// into `out` by the A2A types' generated serde (pbjson): no dynamic message,
/// no well-known type transcoded (prost-reflect's way cost a stream of 221
/// events 2.4× gRPC's time; docs/benchmarks.md).
pub fn write_event(bytes: &[u8], out: &mut Vec<u8>) -> Result<(), tonic::Status> {
    use prost::Message as _;
    let event = chorus_proto::a2a::v1::StreamResponse::decode(bytes)
        .map_err(|e| tonic::Status::internal(format!("an event of the face: {e}")))?;
    serde_json::to_writer(out, &event)
        .map_err(|e| tonic::Status::internal(format!("an event of the face: {e}")))
}

/// The answer headers an HTTP binding gives back.
pub fn answered_headers(metadata: &MetadataMap) -> Vec<(&'static str, Bytes)> {
    ANSWERED
        .iter()
        .filter_map(|name| {
            metadata
                .get(*name)
                .map(|v| (*name, Bytes::copy_from_slice(v.as_bytes())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::a2a::v1 as pb;

    fn part(content: pb::part::Content) -> pb::Part {
        pb::Part {
            content: Some(content),
            media_type: "text/plain".into(),
            ..pb::Part::default()
        }
    }

    fn data(json: serde_json::Value) -> chorus_proto::wkt::Value {
        chorus_proto::json::to_value(json)
    }

    fn metadata() -> chorus_proto::wkt::Struct {
        let mut map = serde_json::Map::new();
        map.insert(
            "chorus".into(),
            serde_json::json!({ "sequence": 7, "kind": "tool_executed", "nested": [1, "a", null, true, { "x": 1.5 }] }),
        );
        chorus_proto::json::to_struct(map)
    }

    fn message() -> pb::Message {
        pb::Message {
            message_id: "t1.7".into(),
            context_id: "c1".into(),
            task_id: "t1".into(),
            role: pb::Role::Agent.into(),
            parts: vec![
                part(pb::part::Content::Text("worker ran file.create: ok".into())),
                part(pb::part::Content::Data(data(
                    serde_json::json!({ "path": "a.txt", "bytes": 12 }),
                ))),
                part(pb::part::Content::Url("https://example.com/x".into())),
                part(pb::part::Content::Raw(vec![0, 1, 2, 255])),
            ],
            metadata: Some(metadata()),
            extensions: vec!["ext".into()],
            reference_task_ids: vec!["t0".into()],
        }
    }

    fn status(state: pb::TaskState) -> pb::TaskStatus {
        pb::TaskStatus {
            state: state.into(),
            message: Some(message()),
            timestamp: Some(chorus_proto::wkt::Timestamp {
                seconds: 1_796_609_796,
                nanos: 341_000_000,
            }),
        }
    }

    fn artifact() -> pb::Artifact {
        pb::Artifact {
            artifact_id: "a1".into(),
            name: "completion-report".into(),
            description: "the report".into(),
            parts: message().parts,
            metadata: Some(metadata()),
            extensions: vec![],
        }
    }

    /// Every kind of event a stream carries, with every field set.
    fn events() -> Vec<pb::StreamResponse> {
        use pb::stream_response::Payload;
        [
            Payload::Task(pb::Task {
                id: "t1".into(),
                context_id: "c1".into(),
                status: Some(status(pb::TaskState::Working)),
                artifacts: vec![artifact()],
                history: vec![message(), message()],
                metadata: Some(metadata()),
            }),
            Payload::Message(message()),
            Payload::StatusUpdate(pb::TaskStatusUpdateEvent {
                task_id: "t1".into(),
                context_id: "c1".into(),
                status: Some(status(pb::TaskState::InputRequired)),
                metadata: Some(metadata()),
            }),
            Payload::ArtifactUpdate(pb::TaskArtifactUpdateEvent {
                task_id: "t1".into(),
                context_id: "c1".into(),
                artifact: Some(artifact()),
                append: true,
                last_chunk: true,
                metadata: Some(metadata()),
            }),
        ]
        .into_iter()
        .map(|payload| pb::StreamResponse {
            payload: Some(payload),
        })
        .collect()
    }

    /// The generated JSON is the proto3 JSON the contract's descriptors give
    /// (prost-reflect's), field for field: the two cannot drift apart.
    #[test]
    fn an_events_generated_json_is_the_descriptors_json() {
        let pool = prost_reflect::DescriptorPool::decode(chorus_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptors");
        let descriptor = pool
            .get_message_by_name(STREAM_RESPONSE)
            .expect("StreamResponse");
        for event in events() {
            let bytes = event.encode_to_vec();
            let mut written = Vec::new();
            write_event(&bytes, &mut written).expect("written");
            let generated: Value = serde_json::from_slice(&written).expect("JSON");
            let reflected = to_json(&descriptor, &bytes).expect("reflected");
            assert_eq!(generated, reflected);
        }
    }
}
