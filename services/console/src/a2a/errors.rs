//! A failed A2A call in the terms of the HTTP bindings: the gRPC face's
//! status (its code, message and `google.rpc.ErrorInfo`) as a JSON-RPC error
//! object and as the HTTP+JSON binding's `google.rpc.Status` body, with the
//! HTTP status A2A gives each reason.

use http::StatusCode;
use serde_json::{Value, json};
use tonic::{Code, Status};
use tonic_types::StatusExt as _;

/// The error domain of A2A's reasons.
pub const DOMAIN: &str = "a2a-protocol.org";
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// JSON-RPC's own codes (JSON-RPC 2.0 §5.1), and the one A2A leaves to
/// implementations for what it has no code for (who is calling, and
/// whether they may now).
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
const SERVER_ERROR: i64 = -32000;

/// A2A's error reasons: the HTTP status and the JSON-RPC code of each (A2A
/// v1, §"Error handling"; the reason travels in `ErrorInfo` on every
/// binding).
const REASONS: &[(&str, u16, i64)] = &[
    ("TASK_NOT_FOUND", 404, -32001),
    ("TASK_NOT_CANCELABLE", 400, -32002),
    ("PUSH_NOTIFICATION_NOT_SUPPORTED", 400, -32003),
    ("UNSUPPORTED_OPERATION", 400, -32004),
    ("CONTENT_TYPE_NOT_SUPPORTED", 400, -32005),
    ("INVALID_AGENT_RESPONSE", 500, -32006),
    ("EXTENDED_AGENT_CARD_NOT_CONFIGURED", 400, -32007),
    ("EXTENSION_SUPPORT_REQUIRED", 400, -32008),
    ("VERSION_NOT_SUPPORTED", 400, -32009),
    ("INVALID_PARAMS", 400, INVALID_PARAMS),
    ("INVALID_REQUEST", 400, INVALID_REQUEST),
    ("METHOD_NOT_FOUND", 404, METHOD_NOT_FOUND),
    ("INTERNAL_ERROR", 500, INTERNAL_ERROR),
];

/// One failed call, as both HTTP bindings tell it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub http: StatusCode,
    /// gRPC's name of the code (`NOT_FOUND`): the `status` of the REST body.
    pub code: Code,
    pub jsonrpc: i64,
    pub message: String,
    /// The status's `ErrorInfo` (reason, domain, metadata), if it had one.
    pub info: Option<Box<Value>>,
    /// The service asked the caller to come back after this many ms.
    pub retry_after_ms: Option<u64>,
}

impl Failure {
    /// A failure this binding finds itself (the request is not JSON, or not
    /// of the method's shape): `reason` is A2A's.
    pub fn a2a(reason: &str, message: impl Into<String>) -> Self {
        let (http, jsonrpc) = REASONS
            .iter()
            .find(|(r, _, _)| *r == reason)
            .map_or((500, INTERNAL_ERROR), |(_, http, code)| (*http, *code));
        let code = match http {
            404 => Code::NotFound,
            500 => Code::Internal,
            _ if reason == "INVALID_PARAMS" || reason == "INVALID_REQUEST" => Code::InvalidArgument,
            _ => Code::FailedPrecondition,
        };
        Self {
            http: StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            jsonrpc,
            message: message.into(),
            info: Some(Box::new(
                json!({ "@type": ERROR_INFO, "reason": reason, "domain": DOMAIN }),
            )),
            retry_after_ms: None,
        }
    }

    /// The JSON-RPC answer's code for a request that is not JSON.
    pub fn parse(message: impl Into<String>) -> Self {
        Self {
            jsonrpc: PARSE_ERROR,
            ..Self::a2a("INVALID_REQUEST", message)
        }
    }

    /// What the gRPC face answered.
    pub fn from_status(status: &Status) -> Self {
        let details = status.get_error_details();
        let info = details.error_info().map(|info| {
            Box::new(json!({
                "@type": ERROR_INFO,
                "reason": info.reason,
                "domain": info.domain,
                "metadata": info.metadata,
            }))
        });
        let a2a_reason = details
            .error_info()
            .filter(|info| info.domain == DOMAIN)
            .and_then(|info| REASONS.iter().find(|(r, _, _)| *r == info.reason));
        let retry_after_ms = status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let (http, jsonrpc) = match a2a_reason {
            Some((_, http, code)) => (*http, *code),
            None => by_code(status.code()),
        };
        Self {
            http: StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code: status.code(),
            jsonrpc,
            message: status.message().to_owned(),
            info,
            retry_after_ms,
        }
    }

    /// The JSON-RPC error object: A2A's code, the message, and the
    /// `ErrorInfo` as `data` (as A2A's SDKs read it).
    pub fn jsonrpc_error(&self) -> Value {
        let mut error = json!({ "code": self.jsonrpc, "message": self.message });
        if let Some(info) = &self.info {
            error["data"] = json!([info]);
        }
        error
    }

    /// Whether a JSON-RPC answer of this failure keeps its HTTP status:
    /// who calls and whether the service can take them now are told at the
    /// HTTP level; anything the call asked is a JSON-RPC error in a 200.
    pub fn jsonrpc_http(&self) -> StatusCode {
        match self.http.as_u16() {
            401 | 403 | 429 | 503 | 504 => self.http,
            _ => StatusCode::OK,
        }
    }

    /// The HTTP+JSON binding's body: a `google.rpc.Status` in JSON.
    pub fn rest_body(&self) -> Value {
        let mut error = json!({
            "code": self.http.as_u16(),
            "status": code_name(self.code),
            "message": self.message,
        });
        if let Some(info) = &self.info {
            error["details"] = json!([info]);
        }
        json!({ "error": error })
    }
}

/// The HTTP status and JSON-RPC code of a status no A2A reason explains.
fn by_code(code: Code) -> (u16, i64) {
    match code {
        Code::InvalidArgument | Code::OutOfRange => (400, INVALID_PARAMS),
        Code::NotFound => (404, INVALID_PARAMS),
        Code::Unimplemented => (501, METHOD_NOT_FOUND),
        Code::Unauthenticated => (401, SERVER_ERROR),
        Code::PermissionDenied => (403, SERVER_ERROR),
        Code::ResourceExhausted => (429, SERVER_ERROR),
        Code::Unavailable => (503, SERVER_ERROR),
        Code::DeadlineExceeded => (504, SERVER_ERROR),
        Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => (409, SERVER_ERROR),
        Code::Cancelled => (499, SERVER_ERROR),
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => (500, INTERNAL_ERROR),
    }
}

/// gRPC's name of `code`: `NOT_FOUND`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    fn with_reason(code: Code, reason: &str) -> Status {
        let details =
            ErrorDetails::with_error_info(reason, DOMAIN, std::collections::HashMap::new());
        Status::with_error_details(code, "said", details)
    }

    #[test]
    fn an_a2a_reason_gives_its_code_on_each_binding() {
        let failure = Failure::from_status(&with_reason(Code::NotFound, "TASK_NOT_FOUND"));
        assert_eq!(failure.http, StatusCode::NOT_FOUND);
        assert_eq!(failure.jsonrpc, -32001);
        assert_eq!(failure.jsonrpc_http(), StatusCode::OK);
        let body = failure.rest_body();
        assert_eq!(body["error"]["status"], "NOT_FOUND");
        assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(failure.jsonrpc_error()["data"][0]["domain"], DOMAIN);
    }

    #[test]
    fn who_calls_and_whether_now_keep_their_http_status_in_json_rpc() {
        let denied = Failure::from_status(&Status::permission_denied("a viewer"));
        assert_eq!(denied.jsonrpc_http(), StatusCode::FORBIDDEN);
        let busy = Failure::from_status(&Status::resource_exhausted("busy"));
        assert_eq!(busy.jsonrpc_http(), StatusCode::TOO_MANY_REQUESTS);
        let internal = Failure::from_status(&Status::internal("bug"));
        assert_eq!(internal.jsonrpc, INTERNAL_ERROR);
        assert_eq!(internal.jsonrpc_http(), StatusCode::OK);
    }
}
