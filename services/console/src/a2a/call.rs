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

/// [`to_json`] written straight into `out`, with no tree of values between.
pub fn write_json(
    descriptor: &MessageDescriptor,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), tonic::Status> {
    let message = DynamicMessage::decode(descriptor.clone(), bytes)
        .map_err(|e| tonic::Status::internal(format!("an answer of the face: {e}")))?;
    let mut serializer = serde_json::Serializer::new(out);
    message
        .serialize_with_options(&mut serializer, &SerializeOptions::new())
        .map_err(|e| tonic::Status::internal(format!("an answer of the face: {e}")))
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
