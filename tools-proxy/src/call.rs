//! One gRPC call to the service that executes the tool.

use chorus_proto::handoff::HandoffError;
use chorus_proto::json;
use chorus_proto::limits::DEFAULT_MESSAGE_BYTES;
use chorus_proto::orchestrator::v1::CallToolRequest;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_proto::tools::v1::{ExecuteToolRequest, ListToolsRequest};
use chorus_telemetry::grpc::{TracedChannel, traced};
use serde_json::{Map, Value};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::exit::{Exit, Failure};
use crate::usage::{Request, Route};

/// Environment variable naming the PEM CA that signed the services' certificates
/// (the system's roots without it).
pub const ENV_TLS_CA: &str = "CHORUS_TLS_CA";

/// TLS to an `https://` service: its CA from [`ENV_TLS_CA`], else the system's roots.
fn tls_config() -> Result<ClientTlsConfig, Failure> {
    let config = ClientTlsConfig::new();
    match std::env::var_os(ENV_TLS_CA) {
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| {
                Failure::usage(format!(
                    "{ENV_TLS_CA} names {}, which cannot be read: {e}",
                    std::path::Path::new(&path).display()
                ))
            })?;
            Ok(config.ca_certificate(Certificate::from_pem(pem)))
        }
        None => Ok(config.with_enabled_roots()),
    }
}

/// Metadata key carrying the workspace root given on the command line.
pub const WORKSPACE_ROOT_METADATA: &str = "chorus-workspace-root";

/// What a call that ran answered: its output, the tool's failure if it
/// reported one alongside, and its metadata.
#[derive(Debug)]
pub struct Reply {
    pub output: Value,
    pub error: Option<Failure>,
    pub metadata: Map<String, Value>,
}

impl Reply {
    /// The result JSON printed on stdout: `{"output", "error"?, "metadata"}`.
    pub fn stdout(&self) -> String {
        let mut result = Map::new();
        result.insert("output".to_owned(), self.output.clone());
        if let Some(error) = &self.error {
            result.insert(
                "error".to_owned(),
                serde_json::json!({"code": error.code, "message": error.message}),
            );
        }
        result.insert("metadata".to_owned(), Value::Object(self.metadata.clone()));
        Value::Object(result).to_string()
    }
}

/// The connections to the services, made at the first call that needs each
/// and kept for the next ones (a resident MCP session makes many).
#[derive(Default)]
pub struct Channels {
    tool_exec: tokio::sync::Mutex<Option<TracedChannel>>,
    orchestrator: tokio::sync::Mutex<Option<TracedChannel>>,
}

impl Channels {
    /// The channel to the service of `route`, connected if it is not yet.
    async fn to(&self, route: &Route) -> Result<TracedChannel, Attempt> {
        let (held, service, addr) = match route {
            Route::ToolExec { addr } => (&self.tool_exec, "tool-exec", addr),
            Route::Orchestrator { addr } => (&self.orchestrator, "orchestrator", addr),
        };
        let mut held = held.lock().await;
        if let Some(channel) = held.as_ref() {
            return Ok(channel.clone());
        }
        let channel = connect(service, addr).await?;
        *held = Some(channel.clone());
        Ok(channel)
    }
}

/// What a handoff tells of the other agent's work while it runs.
pub type OnProgress<'a> =
    &'a mut (dyn FnMut(&chorus_proto::orchestrator::v1::HandoffProgress) + Send);

/// Sends the call, in a span that continues the agent's trace (`TRACEPARENT`).
pub async fn send(
    request: Request,
    channels: &Channels,
    progress: OnProgress<'_>,
) -> Result<Reply, Failure> {
    let span = tracing::info_span!(
        "chorus-tools",
        otel.name = %format!("chorus-tools {}", request.tool),
        chorus.tool = %request.tool,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = chorus_telemetry::propagation::started_in() {
        let _ = span.set_parent(parent.clone());
    }
    let answer = send_call(request, channels, progress)
        .instrument(span.clone())
        .await;
    if answer.as_ref().map_or(true, |a| a.error.is_some()) {
        span.record("otel.status_code", "ERROR");
    }
    answer
}

/// Longest a call keeps retrying when its service is busy or unreachable
/// (`CHORUS_TOOLS_RETRY_SECS`, 0: never retries).
pub const ENV_RETRY_SECS: &str = "CHORUS_TOOLS_RETRY_SECS";
/// Default of [`ENV_RETRY_SECS`].
const RETRY_SECS: u64 = 60;
/// Attempts of one call at most.
const ATTEMPTS: u32 = 12;
/// The first wait after an unreachable service, doubled at each attempt up to
/// [`MOST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MOST_BACKOFF: Duration = Duration::from_secs(5);

/// How an attempt failed.
enum Attempt {
    /// Nothing of the call was done (the service could not be reached, or it
    /// refused the call unrun at its limit): it may be sent again after
    /// `after` (the service's hint, when it gave one).
    Retry {
        after: Option<Duration>,
        failure: Failure,
    },
    /// The answer.
    Final(Failure),
}

impl From<Failure> for Attempt {
    fn from(failure: Failure) -> Self {
        Self::Final(failure)
    }
}

/// The failure of a call `service` answered with `status`: to retry when the
/// service refused it unrun at its limit (RESOURCE_EXHAUSTED with a
/// `grpc-retry-pushback-ms` hint, gRFC A6), or never took it.
fn refused(status: &tonic::Status, service: &str) -> Attempt {
    let failure = Failure::from_status(status, service);
    if not_taken(status) {
        return Attempt::Retry {
            after: None,
            failure,
        };
    }
    let hint = status
        .metadata()
        .get(crate::exit::RETRY_PUSHBACK)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match (status.code(), hint) {
        (tonic::Code::ResourceExhausted, Some(ms)) => Attempt::Retry {
            after: Some(Duration::from_millis(ms)),
            failure,
        },
        _ => Attempt::Final(failure),
    }
}

/// Whether the call that failed with `status` never reached the service: its
/// connection was closed by a GOAWAY that did not count it among the calls
/// taken (RFC 9113 §6.8), or it was never sent. Any other failure of the
/// connection may have come after the call ran.
fn not_taken(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(h2) = error.downcast_ref::<h2::Error>()
            && h2.is_go_away()
            && h2.is_remote()
        {
            return true;
        }
        if error
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// Sends the call until it is answered, retrying what was not done (a busy or
/// unreachable service) as [`Retries`] allows.
async fn send_call(
    request: Request,
    channels: &Channels,
    progress: OnProgress<'_>,
) -> Result<Reply, Failure> {
    let mut retries = Retries::new();
    loop {
        match attempt_call(&request, channels, &mut *progress).await {
            Ok(answer) => return Ok(answer),
            Err(Attempt::Final(failure)) => return Err(failure),
            Err(Attempt::Retry { after, failure }) => retries.wait(after, failure).await?,
        }
    }
}

/// The tools the run of `request`'s token was granted, by name: tool-exec's
/// ListTools for the caller's run, which checks the run is still active as a
/// call is checked but records nothing (listing the tools is not calling
/// one). Retried as a call is.
pub async fn granted(request: &Request, channels: &Channels) -> Result<Vec<String>, Failure> {
    let mut retries = Retries::new();
    loop {
        match attempt_granted(request, channels).await {
            Ok(names) => return Ok(names),
            Err(Attempt::Final(failure)) => return Err(failure),
            Err(Attempt::Retry { after, failure }) => retries.wait(after, failure).await?,
        }
    }
}

async fn attempt_granted(request: &Request, channels: &Channels) -> Result<Vec<String>, Attempt> {
    let route = Route::ToolExec {
        addr: crate::usage::tools_addr(),
    };
    let channel = channels.to(&route).await?;
    let mut grpc =
        chorus_proto::channel::short(tonic::Request::new(ListToolsRequest { granted_only: true }));
    grpc.metadata_mut()
        .insert("authorization", bearer(&request.token)?);
    let response = ToolExecClient::new(channel)
        .max_decoding_message_size(DEFAULT_MESSAGE_BYTES)
        .list_tools(grpc)
        .await
        .map_err(|status| refused(&status, "tool-exec"))?
        .into_inner();
    Ok(response.tools.into_iter().map(|t| t.name).collect())
}

fn bearer(token: &str) -> Result<MetadataValue<tonic::metadata::Ascii>, Failure> {
    MetadataValue::try_from(format!("Bearer {}", token.trim()))
        .map_err(|_| Failure::usage("CHORUS_RUN_TOKEN contains characters that cannot be sent"))
}

/// How long and how often a call that was not done is sent again: growing,
/// jittered waits, for at most [`ENV_RETRY_SECS`] and [`ATTEMPTS`] attempts.
struct Retries {
    budget: Duration,
    give_up: tokio::time::Instant,
    backoff: Duration,
    attempt: u32,
}

impl Retries {
    fn new() -> Self {
        let budget = std::env::var(ENV_RETRY_SECS)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(RETRY_SECS), Duration::from_secs);
        Self {
            budget,
            give_up: tokio::time::Instant::now() + budget,
            backoff: FIRST_BACKOFF,
            attempt: 0,
        }
    }

    /// Waits before the next attempt (at least `after`, the service's hint,
    /// but no later than the end of the retries: the last attempt is made
    /// when their time is up, not given up a wait early), or gives up with
    /// `failure` when no attempt or no time is left.
    async fn wait(&mut self, after: Option<Duration>, mut failure: Failure) -> Result<(), Failure> {
        self.attempt += 1;
        let wait = jittered(after.unwrap_or(self.backoff).max(self.backoff));
        self.backoff = (self.backoff * 2).min(MOST_BACKOFF);
        let left = self
            .give_up
            .saturating_duration_since(tokio::time::Instant::now());
        if self.attempt >= ATTEMPTS || left.is_zero() {
            if self.attempt > 1 {
                let spent = tokio::time::Instant::now() + self.budget - self.give_up;
                failure.message = format!(
                    "{} (after {} attempts in {} s; {ENV_RETRY_SECS} bounds the retries)",
                    failure.message,
                    self.attempt,
                    spent.as_secs()
                );
            }
            return Err(failure);
        }
        // stderr carries only the final JSON error: retries are silent.
        tokio::time::sleep(wait.min(left)).await;
        Ok(())
    }
}

/// `wait` spread over half to one and a half of itself, so that callers
/// refused together do not come back together.
fn jittered(wait: Duration) -> Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    // A fresh random key each time: random enough to spread callers.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let fraction = (random % 1000) as f64 / 1000.0;
    wait.mul_f64(0.5 + fraction)
}

/// A channel to `service` at `addr`, connected.
async fn connect(service: &str, addr: &str) -> Result<TracedChannel, Attempt> {
    // ExecuteTool and a handoff bound themselves; CallTool has a deadline.
    let mut endpoint =
        chorus_proto::channel::tune(Endpoint::from_shared(addr.to_owned()).map_err(|e| {
            Failure::usage(format!(
                "{service} address '{addr}' is not a valid URI: {e}"
            ))
        })?);
    if addr.starts_with("https://") {
        endpoint = endpoint
            .tls_config(tls_config()?)
            .map_err(|e| Failure::usage(format!("TLS for {service} at {addr}: {e}")))?;
    }
    endpoint
        .connect()
        .await
        .map(traced)
        .map_err(|e| Attempt::Retry {
            after: None,
            failure: Failure::new(
                Exit::Unavailable,
                "unavailable",
                format!("cannot reach {service} at {addr}: {}", source_chain(&e)),
            ),
        })
}

async fn attempt_call(
    request: &Request,
    channels: &Channels,
    progress: OnProgress<'_>,
) -> Result<Reply, Attempt> {
    let channel = channels.to(&request.route).await?;
    if let Route::Orchestrator { .. } = request.route {
        return call_orchestrator(channel, request, progress).await;
    }

    let mut grpc = tonic::Request::new(ExecuteToolRequest {
        tool: request.tool.clone(),
        arguments: Some(json::to_struct(request.arguments.clone())),
    });
    grpc.metadata_mut()
        .insert("authorization", bearer(&request.token)?);
    if let Some(root) = &request.workspace_root {
        let root = MetadataValue::try_from(root.as_str()).map_err(|_| {
            Failure::usage("the workspace root argument contains characters that cannot be sent")
        })?;
        grpc.metadata_mut().insert(WORKSPACE_ROOT_METADATA, root);
    }

    let response = ToolExecClient::new(channel)
        .max_decoding_message_size(DEFAULT_MESSAGE_BYTES)
        .execute_tool(grpc)
        .await
        .map_err(|status| refused(&status, "tool-exec"))?
        .into_inner();

    let mut output = response.output.map_or(Value::Null, json::from_value);
    if request.tool == "help" {
        name_examples_by_this_binary(&mut output);
    }
    Ok(Reply {
        output,
        error: response
            .error
            .map(|e| Failure::new(Exit::ToolFailed, &e.code, e.message)),
        metadata: response.metadata.map(json::from_struct).unwrap_or_default(),
    })
}

/// help's examples call `chorus-tools`; an agent's CLI may allow only the
/// path it runs this binary by (Claude Code's `Bash(<path> *)` rule), so the
/// examples name that path.
fn name_examples_by_this_binary(output: &mut Value) {
    let invoked = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::current_exe().ok());
    let Some(path) = invoked.and_then(|p| p.to_str().map(str::to_owned)) else {
        return;
    };
    let Some(tools) = output.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for example in tools.iter_mut().filter_map(|t| t.get_mut("example")) {
        if let Some(rest) = example
            .as_str()
            .and_then(|e| e.strip_prefix("chorus-tools "))
        {
            *example = Value::String(format!("{path} {rest}"));
        }
    }
}

async fn call_orchestrator(
    channel: TracedChannel,
    request: &Request,
    progress: OnProgress<'_>,
) -> Result<Reply, Attempt> {
    if request.tool == "handoff" {
        return handoff(channel, request, progress).await;
    }
    let mut grpc = tonic::Request::new(CallToolRequest {
        tool: request.tool.clone(),
        arguments: Some(json::to_struct(request.arguments.clone())),
    });
    // An approval rule may hold the call until a person answers.
    grpc.set_timeout(chorus_proto::channel::APPROVAL_TIMEOUT);
    grpc.metadata_mut()
        .insert("authorization", bearer(&request.token)?);
    let response = AgentToolsClient::new(channel)
        .max_decoding_message_size(DEFAULT_MESSAGE_BYTES)
        .call_tool(grpc)
        .await
        .map_err(|status| refused(&status, "orchestrator"))?
        .into_inner();
    let mut output = response.output.map_or(Value::Null, json::from_value);
    if request.tool == "help" {
        name_examples_by_this_binary(&mut output);
    }
    Ok(Reply {
        output,
        error: None,
        metadata: response.metadata.map(json::from_struct).unwrap_or_default(),
    })
}

/// A handoff: one streaming call that ends when the other agent does; prints its
/// result like any tool's, or its failure as the tool's error (exit 1).
async fn handoff(
    channel: TracedChannel,
    request: &Request,
    progress: OnProgress<'_>,
) -> Result<Reply, Attempt> {
    let handoff = chorus_proto::handoff::call_with_progress(
        channel,
        &request.token,
        &request.arguments,
        progress,
    );
    match handoff.await {
        Ok(output) => Ok(Reply {
            output,
            error: None,
            metadata: Map::new(),
        }),
        Err(HandoffError::Failed {
            failure,
            reason,
            run_id,
        }) => Ok(Reply {
            output: Value::Null,
            error: Some(Failure::new(Exit::ToolFailed, &failure, reason)),
            metadata: Map::from_iter([("run_id".to_owned(), Value::String(run_id))]),
        }),
        Err(HandoffError::Status(status)) => Err(refused(&status, "orchestrator")),
    }
}

fn source_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
