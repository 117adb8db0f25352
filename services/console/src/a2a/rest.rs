//! A2A's HTTP+JSON binding: each method is a resource under the
//! interface's URL (`POST /message:send`, `GET /tasks/{id}`,
//! `POST /tasks/{id}:cancel` ...); the request message is the body or the
//! query, the path's ids its fields; the answer is the response message, or
//! server-sent events of `StreamResponse`s; a failure is a
//! `google.rpc.Status` with A2A's reason.

use http::{Method, Response};
use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value};

use super::call::{self, Reply, answered_headers, write_json};
use super::errors::Failure;
use super::{Call, failure_headers, json_response, sse_frame, sse_response};
use crate::Body;
use crate::gateway::pump;

/// Where a method's request message comes from, besides the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    Body,
    Query,
}

/// A resource's method: the A2A method, the request fields its path gives
/// (`id`, `taskId`), and where the rest comes from.
#[derive(Debug, PartialEq, Eq)]
struct Route {
    method: &'static str,
    fields: Vec<(&'static str, String)>,
    from: From,
}

/// Answers one request of the binding at `path` (after the interface's URL).
pub(super) async fn handle(
    call: &Call<'_>,
    verb: &Method,
    path: &str,
    query: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    let route = match route(verb, path) {
        Ok(route) => route,
        Err(failure) => return failed(&failure),
    };
    let params = match params(call, &route, query, body) {
        Ok(params) => params,
        Err(failure) => return failed(&failure),
    };
    match call.make(route.method, params).await {
        Ok(Reply::Unary(json, metadata)) => {
            json_response(http::StatusCode::OK, &json, &answered_headers(&metadata))
        }
        Ok(Reply::Stream(replies, output, metadata)) => {
            let frames = pump(
                replies,
                call.gateway.unread(),
                call.standing.cloned(),
                move |reply| {
                    let mut frame = b"data: ".to_vec();
                    match reply.and_then(|bytes| write_json(&output, &bytes, &mut frame)) {
                        Ok(()) => {
                            frame.extend_from_slice(b"\n\n");
                            (bytes::Bytes::from(frame), false)
                        }
                        Err(status) => (
                            sse_frame(Some("error"), &Failure::from_status(&status).rest_body()),
                            true,
                        ),
                    }
                },
            );
            sse_response(frames, &answered_headers(&metadata))
        }
        Err(failure) => failed(&failure),
    }
}

/// The answer of a failure: its HTTP status and `google.rpc.Status` body.
pub(super) fn failed(failure: &Failure) -> Response<Body> {
    json_response(
        failure.http,
        &failure.rest_body(),
        &failure_headers(failure),
    )
}

/// The method `verb` on `path` calls.
fn route(verb: &Method, path: &str) -> Result<Route, Failure> {
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| Failure::a2a("INVALID_REQUEST", format!("{path}: not UTF-8")))
        })
        .collect::<Result<_, _>>()?;
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let at =
        |allowed: &[Method], method: &'static str, fields: Vec<(&'static str, String)>, from| {
            if allowed.contains(verb) {
                Ok(Route {
                    method,
                    fields,
                    from,
                })
            } else {
                let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
                Err(Failure {
                    http: http::StatusCode::METHOD_NOT_ALLOWED,
                    ..Failure::a2a(
                        "METHOD_NOT_FOUND",
                        format!("{verb} {path}: this resource takes {}", names.join(", ")),
                    )
                })
            }
        };
    let id = |s: &str| vec![("id", s.to_owned())];
    match segments.as_slice() {
        ["message:send"] => at(&[Method::POST], "SendMessage", vec![], From::Body),
        ["message:stream"] => at(&[Method::POST], "SendStreamingMessage", vec![], From::Body),
        ["extendedAgentCard"] => at(&[Method::GET], "GetExtendedAgentCard", vec![], From::Query),
        ["tasks"] => at(&[Method::GET], "ListTasks", vec![], From::Query),
        ["tasks", task] => match task.rsplit_once(':') {
            Some((task, "cancel")) => at(&[Method::POST], "CancelTask", id(task), From::Body),
            Some((task, "subscribe")) => at(
                &[Method::POST, Method::GET],
                "SubscribeToTask",
                id(task),
                From::Query,
            ),
            _ => at(&[Method::GET], "GetTask", id(task), From::Query),
        },
        ["tasks", task, "pushNotificationConfigs"] => {
            let fields = vec![("taskId", (*task).to_owned())];
            if verb == Method::POST {
                at(
                    &[Method::POST],
                    "CreateTaskPushNotificationConfig",
                    fields,
                    From::Body,
                )
            } else {
                at(
                    &[Method::GET, Method::POST],
                    "ListTaskPushNotificationConfigs",
                    fields,
                    From::Query,
                )
            }
        }
        ["tasks", task, "pushNotificationConfigs", config] => {
            let fields = vec![("taskId", (*task).to_owned()), ("id", (*config).to_owned())];
            if verb == Method::DELETE {
                at(
                    &[Method::DELETE],
                    "DeleteTaskPushNotificationConfig",
                    fields,
                    From::Query,
                )
            } else {
                at(
                    &[Method::GET, Method::DELETE],
                    "GetTaskPushNotificationConfig",
                    fields,
                    From::Query,
                )
            }
        }
        _ => Err(Failure::a2a(
            "METHOD_NOT_FOUND",
            format!(
                "{verb} {path}: no such resource of A2A 1.0's HTTP+JSON binding (message:send, message:stream, tasks, tasks/{{id}}, tasks/{{id}}:cancel, tasks/{{id}}:subscribe, tasks/{{id}}/pushNotificationConfigs, extendedAgentCard)"
            ),
        )),
    }
}

/// The request message of `route` in JSON: the body's object or the query's
/// fields, with the path's ids.
fn params(
    call: &Call<'_>,
    route: &Route,
    query: Option<&str>,
    body: &[u8],
) -> Result<Value, Failure> {
    let mut params = match route.from {
        From::Body if !body.iter().all(u8::is_ascii_whitespace) => {
            match serde_json::from_slice(body) {
                Ok(Value::Object(object)) => object,
                Ok(_) => {
                    return Err(Failure::a2a(
                        "INVALID_PARAMS",
                        format!("the body of {} is a JSON object", route.method),
                    ));
                }
                Err(e) => {
                    return Err(Failure::a2a(
                        "INVALID_REQUEST",
                        format!("the body is not JSON: {e}"),
                    ));
                }
            }
        }
        From::Body => Map::new(),
        From::Query => match call::method(call.gateway, route.method) {
            Some(method) => from_query(&method.input(), query.unwrap_or_default())?,
            None => Map::new(),
        },
    };
    for (name, value) in &route.fields {
        match params.get(*name).and_then(Value::as_str) {
            Some(given) if !given.is_empty() && given != value => {
                return Err(Failure::a2a(
                    "INVALID_PARAMS",
                    format!("{name}: the body says '{given}', the path '{value}'"),
                ));
            }
            _ => {
                params.insert((*name).to_owned(), Value::String(value.clone()));
            }
        }
    }
    Ok(Value::Object(params))
}

/// A query's fields as the JSON of the message `input`: a field by its JSON
/// or its proto name, a repeated field from each of its values; keys the
/// message has no field for are left out.
fn from_query(input: &MessageDescriptor, query: &str) -> Result<Map<String, Value>, Failure> {
    let mut out = Map::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let Some(field) = input
            .fields()
            .find(|f| f.json_name() == key || f.name() == key)
        else {
            continue;
        };
        let value = match field.kind() {
            Kind::Bool => match value.as_ref() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                other => {
                    return Err(Failure::a2a(
                        "INVALID_PARAMS",
                        format!("{key}: '{other}' is not true or false"),
                    ));
                }
            },
            _ => Value::String(value.into_owned()),
        };
        let name = field.json_name().to_owned();
        if field.is_list() {
            if let Value::Array(values) =
                out.entry(name).or_insert_with(|| Value::Array(Vec::new()))
            {
                values.push(value);
            }
        } else {
            out.insert(name, value);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_resource_names_its_method_and_the_paths_ids() {
        let cases = [
            (Method::POST, "/message:send", "SendMessage", vec![]),
            (
                Method::POST,
                "/message:stream",
                "SendStreamingMessage",
                vec![],
            ),
            (Method::GET, "/tasks", "ListTasks", vec![]),
            (Method::GET, "/tasks/t%201", "GetTask", vec![("id", "t 1")]),
            (
                Method::POST,
                "/tasks/t1:cancel",
                "CancelTask",
                vec![("id", "t1")],
            ),
            (
                Method::POST,
                "/tasks/t1:subscribe",
                "SubscribeToTask",
                vec![("id", "t1")],
            ),
            (
                Method::POST,
                "/tasks/t1/pushNotificationConfigs",
                "CreateTaskPushNotificationConfig",
                vec![("taskId", "t1")],
            ),
            (
                Method::GET,
                "/tasks/t1/pushNotificationConfigs",
                "ListTaskPushNotificationConfigs",
                vec![("taskId", "t1")],
            ),
            (
                Method::DELETE,
                "/tasks/t1/pushNotificationConfigs/c1",
                "DeleteTaskPushNotificationConfig",
                vec![("taskId", "t1"), ("id", "c1")],
            ),
            (
                Method::GET,
                "/extendedAgentCard",
                "GetExtendedAgentCard",
                vec![],
            ),
        ];
        for (verb, path, method, expected) in cases {
            let route = route(&verb, path).unwrap_or_else(|f| panic!("{path}: {}", f.message));
            assert_eq!(route.method, method, "{path}");
            let fields: Vec<(&str, &str)> =
                route.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(fields, expected, "{path}");
        }
    }

    #[test]
    fn a_wrong_verb_is_told_the_right_ones_and_an_unknown_path_its_resources() {
        let failure = route(&Method::DELETE, "/message:send").expect_err("refused");
        assert_eq!(failure.http, http::StatusCode::METHOD_NOT_ALLOWED);
        assert!(failure.message.contains("POST"), "{}", failure.message);
        let failure = route(&Method::GET, "/agents").expect_err("refused");
        assert_eq!(failure.http, http::StatusCode::NOT_FOUND);
        assert!(
            failure.message.contains("message:send"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_query_fills_the_messages_fields_by_their_json_names() {
        let pool = prost_reflect::DescriptorPool::decode(chorus_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptors");
        let input = pool
            .get_message_by_name("lf.a2a.v1.ListTasksRequest")
            .expect("ListTasksRequest");
        let json = from_query(
            &input,
            "contextId=c%201&pageSize=5&includeArtifacts=true&status=TASK_STATE_WORKING&unknown=x",
        )
        .expect("read");
        assert_eq!(
            Value::Object(json),
            serde_json::json!({
                "contextId": "c 1",
                "pageSize": "5",
                "includeArtifacts": true,
                "status": "TASK_STATE_WORKING",
            })
        );
        let refused = from_query(&input, "includeArtifacts=yes").expect_err("refused");
        assert!(
            refused.message.contains("includeArtifacts"),
            "{}",
            refused.message
        );
    }
}
