//! A2A's JSON-RPC 2.0 binding: a request object POSTed to the interface's
//! URL names a method of A2A 1.0 (`SendMessage`, `GetTask` ...) and gives
//! its request message as `params`; the answer is a response object, or for
//! the streaming methods (`SendStreamingMessage`, `SubscribeToTask`) a
//! stream of server-sent events, each a response object whose `result` is
//! a `StreamResponse`.

use bytes::Bytes;
use http::Response;
use serde_json::{Value, json};

use super::call::{Reply, answered_headers, write_json};
use super::errors::{Failure, INVALID_PARAMS, INVALID_REQUEST};
use super::{Call, failure_headers, json_response, sse_frame, sse_response};
use crate::Body;
use crate::gateway::pump;

/// A2A 0.3's method names and the 1.0 methods that replaced them: a 0.3
/// client is told which version this agent serves rather than that its
/// method does not exist.
const VERSION_0_3: &[(&str, &str)] = &[
    ("message/send", "SendMessage"),
    ("message/stream", "SendStreamingMessage"),
    ("tasks/get", "GetTask"),
    ("tasks/list", "ListTasks"),
    ("tasks/cancel", "CancelTask"),
    ("tasks/resubscribe", "SubscribeToTask"),
    (
        "tasks/pushNotificationConfig/set",
        "CreateTaskPushNotificationConfig",
    ),
    (
        "tasks/pushNotificationConfig/get",
        "GetTaskPushNotificationConfig",
    ),
    (
        "tasks/pushNotificationConfig/list",
        "ListTaskPushNotificationConfigs",
    ),
    (
        "tasks/pushNotificationConfig/delete",
        "DeleteTaskPushNotificationConfig",
    ),
    ("agent/getAuthenticatedExtendedCard", "GetExtendedAgentCard"),
];

/// Answers one JSON-RPC request.
pub(super) async fn handle(call: &Call<'_>, body: &[u8]) -> Response<Body> {
    let request: Value = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            return answer_error(
                &Value::Null,
                &Failure::parse(format!("the request is not JSON: {e}")),
            );
        }
    };
    let (id, read) = read(request);
    let (method, params) = match read {
        Ok(parts) => parts,
        Err(failure) => return answer_error(&id, &failure),
    };
    let reply = match call.make(&method, params).await {
        Ok(reply) => reply,
        Err(failure) => return answer_error(&id, &failure),
    };
    match reply {
        Reply::Unary(result, metadata) => json_response(
            http::StatusCode::OK,
            &json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            &answered_headers(&metadata),
        ),
        Reply::Stream(replies, output, metadata) => {
            let frames = pump(
                replies,
                call.gateway.unread(),
                call.standing.cloned(),
                move |reply| {
                    // The response object written around the result as it is
                    // serialized: no tree of values for each event.
                    let mut frame =
                        format!("data: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":").into_bytes();
                    match reply.and_then(|bytes| write_json(&output, &bytes, &mut frame)) {
                        Ok(()) => {
                            frame.extend_from_slice(b"}\n\n");
                            (Bytes::from(frame), false)
                        }
                        Err(status) => {
                            let body = json!({
                                "jsonrpc": "2.0",
                                "id": id,
                                "error": Failure::from_status(&status).jsonrpc_error(),
                            });
                            (sse_frame(None, &body), true)
                        }
                    }
                },
            );
            sse_response(frames, &answered_headers(&metadata))
        }
    }
}

/// A request object's id (null when it has none that may be answered),
/// and its method and params or why the request is refused.
fn read(request: Value) -> (Value, Result<(String, Value), Failure>) {
    let invalid = |message: &str| Failure {
        jsonrpc: INVALID_REQUEST,
        ..Failure::a2a("INVALID_REQUEST", message)
    };
    let Value::Object(mut request) = request else {
        return (
            Value::Null,
            Err(invalid(
                "a JSON-RPC request is an object (batches are not served)",
            )),
        );
    };
    let id = request.remove("id").unwrap_or(Value::Null);
    if !matches!(id, Value::String(_) | Value::Number(_)) {
        return (
            Value::Null,
            Err(invalid(
                "id: an A2A request has an id, a string or a number",
            )),
        );
    }
    (id, method_and_params(request, invalid))
}

fn method_and_params(
    mut request: serde_json::Map<String, Value>,
    invalid: impl Fn(&str) -> Failure,
) -> Result<(String, Value), Failure> {
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc: must be \"2.0\""));
    }
    let Some(method) = request
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Err(invalid("method: a string naming an A2A method"));
    };
    if let Some((_, now)) = VERSION_0_3.iter().find(|(old, _)| *old == method) {
        return Err(Failure::a2a(
            "VERSION_NOT_SUPPORTED",
            format!("{method} is A2A 0.3's; this agent serves A2A 1.0, whose method is {now}"),
        ));
    }
    match request.remove("params") {
        None | Some(Value::Null) => Ok((method, Value::Object(Default::default()))),
        Some(params @ Value::Object(_)) => Ok((method, params)),
        Some(_) => Err(Failure {
            jsonrpc: INVALID_PARAMS,
            ..Failure::a2a("INVALID_PARAMS", "params: an object, the method's request")
        }),
    }
}

fn answer_error(id: &Value, failure: &Failure) -> Response<Body> {
    json_response(
        failure.jsonrpc_http(),
        &json!({ "jsonrpc": "2.0", "id": id, "error": failure.jsonrpc_error() }),
        &failure_headers(failure),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_the_parts_of_one_is_an_invalid_request() {
        for request in [
            json!([{ "jsonrpc": "2.0", "id": 1, "method": "GetTask" }]),
            json!({ "jsonrpc": "2.0", "method": "GetTask" }),
            json!({ "jsonrpc": "1.0", "id": 1, "method": "GetTask" }),
            json!({ "jsonrpc": "2.0", "id": 1 }),
        ] {
            let failure = read(request.clone()).1.expect_err("refused");
            assert_eq!(failure.jsonrpc, INVALID_REQUEST, "{request}");
        }
        let failure =
            read(json!({ "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1] }))
                .1
                .expect_err("refused");
        assert_eq!(failure.jsonrpc, INVALID_PARAMS);
    }

    #[test]
    fn a_method_of_a2a_0_3_is_told_the_version_served() {
        let (id, read) =
            read(json!({ "jsonrpc": "2.0", "id": "7", "method": "message/send", "params": {} }));
        let failure = read.expect_err("refused");
        assert_eq!(id, json!("7"));
        assert_eq!(failure.jsonrpc, -32009);
        assert!(
            failure.message.contains("SendMessage"),
            "{}",
            failure.message
        );
    }
}
