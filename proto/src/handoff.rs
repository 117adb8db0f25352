//! The client side of a handoff made by an agent: one Handoff call with the
//! agent's run token, read to its terminal message. chorus-tools and the
//! orchestrator's tool loop for API agents both use it, so a handoff looks the
//! same to every kind of agent.

use serde_json::{Map, Value, json};

use crate::json as pbjson;
use crate::orchestrator::v1 as pb;

/// Why an agent's handoff call did not complete.
#[derive(Debug)]
pub enum HandoffError {
    /// The call itself was refused or broke (bad arguments, not allowed, the
    /// orchestrator unreachable or shutting down).
    Status(tonic::Status),
    /// The handoff ran and failed: `failure` is its kind in lower snake case
    /// (agent_failed, timed_out, canceled, target_unknown, internal,
    /// interrupted).
    Failed {
        failure: String,
        reason: String,
        run_id: String,
    },
}

/// How many times a broken handoff stream is re-opened (the replica serving
/// it stopped; the handoff itself goes on, wherever it runs).
const REOPENS: u32 = 5;

/// Hands off with the tool's arguments (`agent` or `agentName`, `prompt`,
/// optional `timeout_secs`) on behalf of the run holding `token`, and waits for
/// the other agent to finish. Returns the tool's output: the agent, its run id,
/// its final text, its completion report and its usage. A stream that breaks
/// once the handoff started (the orchestrator replica serving it stopped) is
/// re-opened by its run id, on the same channel (through a load balancer:
/// another replica), a few times.
///
/// # Errors
/// [`HandoffError::Status`] when the call is refused or the stream breaks
/// for good, [`HandoffError::Failed`] when the handoff ends with `failed`.
pub async fn call<T>(
    channel: T,
    token: &str,
    arguments: &Map<String, Value>,
) -> Result<Value, HandoffError>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    call_with_progress(channel, token, arguments, &mut |_| {}).await
}

/// [`call`], telling `progress` of each thing the other agent does (its text,
/// its tool calls, nested handoffs) as it happens.
///
/// # Errors
/// As [`call`].
pub async fn call_with_progress<T>(
    channel: T,
    token: &str,
    arguments: &Map<String, Value>,
    progress: &mut (dyn FnMut(&pb::HandoffProgress) + Send),
) -> Result<Value, HandoffError>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let bearer: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
        format!("Bearer {}", token.trim()).parse().map_err(|_| {
            HandoffError::Status(tonic::Status::unauthenticated(
                "the run token is not valid metadata",
            ))
        })?;
    let mut request = request(arguments);
    let mut reopened = 0;
    loop {
        let mut call = tonic::Request::new(request.clone());
        call.metadata_mut().insert("authorization", bearer.clone());
        let (outcome, started) = follow(channel.clone(), call, progress).await;
        match outcome {
            Err(HandoffError::Status(status))
                if reopened < REOPENS
                    && !started.is_empty()
                    && matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                    ) =>
            {
                reopened += 1;
                request = pb::HandoffRequest {
                    run_id: started,
                    ..pb::HandoffRequest::default()
                };
            }
            outcome => return outcome,
        }
    }
}

/// Reads one Handoff stream to its outcome; also returns the handoff's run
/// id once it started (empty before).
async fn follow<T>(
    channel: T,
    request: tonic::Request<pb::HandoffRequest>,
    progress: &mut (dyn FnMut(&pb::HandoffProgress) + Send),
) -> (Result<Value, HandoffError>, String)
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut started = request.get_ref().run_id.clone();
    let stream = pb::orchestrator_client::OrchestratorClient::new(channel)
        .max_decoding_message_size(crate::limits::DEFAULT_MESSAGE_BYTES)
        .handoff(request)
        .await;
    let mut stream = match stream {
        Ok(stream) => stream.into_inner(),
        Err(status) => return (Err(HandoffError::Status(status)), started),
    };
    loop {
        let message = match stream.message().await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(status) => return (Err(HandoffError::Status(status)), started),
        };
        if let Some(outcome) = outcome(message, &mut started, progress) {
            return (outcome, started);
        }
    }
    (
        Err(HandoffError::Status(tonic::Status::unavailable(
            "the handoff stream ended without its outcome; the orchestrator may have stopped",
        ))),
        started,
    )
}

/// What one event of a Handoff stream means to its caller: the handoff's
/// outcome when it is the last (completed or failed), else nothing (a start
/// is noted in `started`, progress goes to `progress`). The one reading of
/// the stream, for a gRPC client and for a consumer in the orchestrator's
/// own process alike.
pub fn outcome(
    message: pb::HandoffEvent,
    started: &mut String,
    progress: &mut (dyn FnMut(&pb::HandoffProgress) + Send),
) -> Option<Result<Value, HandoffError>> {
    match message.event? {
        pb::handoff_event::Event::Started(s) => {
            *started = s.run_id;
            None
        }
        pb::handoff_event::Event::Progress(p) => {
            progress(&p);
            None
        }
        pb::handoff_event::Event::Completed(done) => {
            let usage = done.usage.unwrap_or_default();
            Some(Ok(json!({
                "agent": done.agent,
                "run_id": done.run_id,
                "output": done.output,
                "completion_report": done.completion_report.map(|r| Value::Object(pbjson::from_struct(r))),
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cost_usd": usage.cost_usd,
                },
            })))
        }
        pb::handoff_event::Event::Failed(failed) => {
            let failure = pb::HandoffFailure::try_from(failed.failure)
                .unwrap_or(pb::HandoffFailure::Internal)
                .as_str_name()
                .trim_start_matches("HANDOFF_FAILURE_")
                .to_ascii_lowercase();
            Some(Err(HandoffError::Failed {
                failure,
                reason: failed.reason,
                run_id: failed.run_id,
            }))
        }
    }
}

/// The Handoff request of a handoff tool call's `arguments` (`agent`, or
/// `agentName` as the original system named it; `prompt`; `timeout_secs`).
pub fn request(arguments: &Map<String, Value>) -> pb::HandoffRequest {
    let text = |name: &str| {
        arguments
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let agent = match text("agent") {
        a if a.is_empty() => text("agentName"),
        a => a,
    };
    let timeout_secs = arguments
        .get("timeout_secs")
        .and_then(Value::as_u64)
        .map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX));
    pb::HandoffRequest {
        task_id: String::new(),
        agent,
        prompt: text("prompt"),
        timeout_secs,
        run_id: String::new(),
    }
}
