//! The MCP face of a run's tools.
//!
//! A run's granted tools, from the one catalog, as native MCP tools: their
//! names (`file_read` for `file.read`: [`chorus_catalog::wire_name`]), their
//! descriptions and JSON Schemas. The protocol is the official SDK's (`rmcp`);
//! this crate only converts. Who executes a call is a [`RunTools`]:
//! chorus-tools' resident `mcp` command sends it over gRPC, tool-exec's
//! Streamable HTTP endpoint runs it in-process. Either way the services check
//! the run token and the allow-list and record the call, as for any face.
//!
//! - `tools/list`: the tools the services say the run may use (the agent CLI's
//!   own tools, such as web.search, excepted).
//! - `tools/call`: a tool that ran answers its output as JSON text and, when
//!   the tool declares an output schema, as structured content; a tool that
//!   failed, or a call refused for this run (not granted, a path outside the
//!   workspace, bad arguments), answers `isError` with the reason, for the
//!   model to read. A run whose token is refused (ended, unknown) or services
//!   that cannot be reached answer a JSON-RPC error: nothing of the session
//!   can work.
//! - A long call (handoff) sends progress notifications when the client asked
//!   for them; a call the client cancels is dropped, and with it the request
//!   to the service.
#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use chorus_catalog::{Executor, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};

pub mod streamable;

pub use chorus_catalog::MCP_SERVER as SERVER_NAME;

/// A call that ran: its output, and its error when the tool failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    pub output: Value,
    pub error: Option<ToolError>,
    pub metadata: Map<String, Value>,
}

/// A tool's own failure (not found, already exists, timed out, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub code: String,
    pub message: String,
}

/// A call the services did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub why: Why,
    /// The services' code for it (`permission_denied`, `failed_precondition`,
    /// `not_found`, ...: gRPC's names in lower snake case).
    pub code: String,
    /// The services' own message.
    pub message: String,
}

/// Why a call was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Not for this run: a tool it was not granted, a path outside its
    /// workspace. The model can do something else.
    Denied,
    /// The arguments do not fit the tool.
    Invalid,
    /// The run token was refused: the run ended, or it is not a run's.
    Unauthenticated,
    /// The services could not be reached or are busy past their retries.
    Unavailable,
}

/// Who sent a request, as its transport tells: on Streamable HTTP the
/// bearer token of the request (each request carries its own); on stdio
/// nothing (the server process holds its run's token).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub bearer: Option<String>,
}

impl Caller {
    /// The caller of a request whose transport put its HTTP request in
    /// `extensions` (rmcp's Streamable HTTP server does).
    pub fn of(extensions: &rmcp::model::Extensions) -> Self {
        let bearer = extensions
            .get::<http::request::Parts>()
            .and_then(|parts| bearer(&parts.headers));
        Self { bearer }
    }
}

/// The token of an `Authorization: Bearer` header.
pub fn bearer(headers: &http::HeaderMap) -> Option<String> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// Executes a run's tools for the MCP face.
pub trait RunTools: Send + Sync + 'static {
    /// The catalog names of the tools the run of `caller` may use, as the
    /// services say.
    fn granted(&self, caller: &Caller)
    -> impl Future<Output = Result<Vec<String>, Refused>> + Send;

    /// Calls `tool` with `arguments` for `caller`; a long call tells
    /// `progress` how it goes.
    fn call(
        &self,
        caller: &Caller,
        tool: &'static ToolSpec,
        arguments: Map<String, Value>,
        progress: Progress,
    ) -> impl Future<Output = Result<Ran, Refused>> + Send;
}

/// How often a call that still runs says so to a client that asked for
/// progress.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a long call reports progress: the client's progress token, when it
/// gave one.
#[derive(Clone)]
pub struct Progress {
    to: Option<(Peer<RoleServer>, ProgressToken)>,
    count: Arc<AtomicU32>,
}

impl Progress {
    /// Progress that goes nowhere.
    pub fn none() -> Self {
        Self {
            to: None,
            count: Arc::default(),
        }
    }

    /// Runs `call` with a sender of progress lines: each line reaches the
    /// client as it is sent, while the call goes on.
    pub async fn relay<T, F>(
        &self,
        call: impl FnOnce(tokio::sync::mpsc::UnboundedSender<String>) -> F,
    ) -> T
    where
        F: Future<Output = T>,
    {
        let (said, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let calling = call(said);
        let telling = async {
            while let Some(message) = heard.recv().await {
                self.report(message).await;
            }
        };
        let (answer, ()) = tokio::join!(calling, telling);
        answer
    }

    /// Tells the client, if it asked, what happened last (`message`).
    pub async fn report(&self, message: impl Into<String>) {
        let Some((peer, token)) = &self.to else {
            return;
        };
        let progress = f64::from(self.count.fetch_add(1, Ordering::Relaxed) + 1);
        let mut note = ProgressNotificationParam::new(token.clone(), progress);
        note.message = Some(message.into());
        // A client gone is the session's end, seen elsewhere.
        let _ = peer.notify_progress(note).await;
    }
}

/// One line of what the other agent of a handoff did (`kind`, `data`), for a
/// progress notification.
pub fn progress_line(kind: &str, data: &Map<String, Value>) -> String {
    const MOST: usize = 200;
    let text = match data.get("text").and_then(Value::as_str) {
        Some(text) => format!("{kind}: {text}"),
        None => format!("{kind}: {}", Value::Object(data.clone())),
    };
    match text.char_indices().nth(MOST) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// An MCP server of a run's tools, executed by `T`.
pub struct RunToolsServer<T> {
    tools: Arc<T>,
}

impl<T: RunTools> RunToolsServer<T> {
    pub fn new(tools: T) -> Self {
        Self {
            tools: Arc::new(tools),
        }
    }

    /// The MCP tools the run of `caller` may use.
    async fn listed(&self, caller: &Caller) -> Result<Vec<&'static ToolSpec>, ErrorData> {
        let granted = self.tools.granted(caller).await.map_err(protocol_error)?;
        Ok(chorus_catalog::TOOLS
            .iter()
            .filter(|t| t.executor != Executor::AgentCli)
            .filter(|t| granted.iter().any(|g| g == t.name))
            .collect())
    }
}

impl<T> Clone for RunToolsServer<T> {
    fn clone(&self) -> Self {
        Self {
            tools: Arc::clone(&self.tools),
        }
    }
}

/// The MCP description of a catalog tool.
pub fn tool(spec: &'static ToolSpec) -> Tool {
    let mut tool = Tool::new(
        chorus_catalog::wire_name(spec.name),
        spec.description,
        Arc::new(object(spec.input_schema())),
    );
    // MCP's structured content is an object: only such outputs are declared.
    if spec.output_schema().get("type").and_then(Value::as_str) == Some("object") {
        tool.output_schema = Some(Arc::new(object(spec.output_schema())));
    }
    tool
}

fn object(schema: &Value) -> JsonObject {
    schema.as_object().cloned().unwrap_or_default()
}

/// What the client gets for a call.
pub fn result(spec: &ToolSpec, answer: Result<Ran, Refused>) -> Result<CallToolResult, ErrorData> {
    match answer {
        Ok(Ran {
            output,
            error: None,
            ..
        }) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(output.to_string())]);
            if output.is_object() && spec.output_schema().get("type") == Some(&"object".into()) {
                result.structured_content = Some(output);
            }
            Ok(result)
        }
        Ok(Ran {
            output,
            error: Some(error),
            ..
        }) => {
            let mut text =
                serde_json::json!({"error": {"code": error.code, "message": error.message}});
            if !output.is_null() {
                text["output"] = output;
            }
            Ok(CallToolResult::error(vec![ContentBlock::text(
                text.to_string(),
            )]))
        }
        Err(refused) => match refused.why {
            Why::Denied | Why::Invalid => Ok(CallToolResult::error(vec![ContentBlock::text(
                serde_json::json!({"error": {"code": refused.code, "message": refused.message}})
                    .to_string(),
            )])),
            Why::Unauthenticated | Why::Unavailable => Err(protocol_error(refused)),
        },
    }
}

fn protocol_error(refused: Refused) -> ErrorData {
    let data = Some(serde_json::json!({"code": refused.code}));
    match refused.why {
        Why::Invalid => ErrorData::invalid_params(refused.message, data),
        Why::Denied | Why::Unauthenticated => ErrorData::invalid_request(refused.message, data),
        Why::Unavailable => ErrorData::internal_error(refused.message, data),
    }
}

impl<T: RunTools> ServerHandler for RunToolsServer<T> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("chorus", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The tools of one Chorus run: each acts inside the run's workspace, and only \
                 the tools the agent was granted are listed. Finish with completion-report.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = Caller::of(&context.extensions);
        let tools = self.listed(&caller).await?.into_iter().map(tool).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = chorus_catalog::by_wire_name(&request.name)
            .filter(|spec| spec.executor != Executor::AgentCli)
        else {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool is named '{}'; tools/list names this run's tools",
                    request.name
                ),
                None,
            ));
        };
        let progress = Progress {
            to: context
                .meta
                .get_progress_token()
                .map(|token| (context.peer.clone(), token)),
            count: Arc::default(),
        };
        let arguments = request.arguments.unwrap_or_default();
        let caller = Caller::of(&context.extensions);
        let call = self.tools.call(&caller, spec, arguments, progress.clone());
        tokio::pin!(call);
        // A call that takes long (one waiting for a person's approval, a
        // long command) tells a client that asked for progress that it
        // still runs, so that the client's own timeout does not end it.
        let started = tokio::time::Instant::now();
        let mut beat = tokio::time::interval_at(started + HEARTBEAT, HEARTBEAT);
        let answer = loop {
            tokio::select! {
                answer = &mut call => break answer,
                _ = beat.tick() => {
                    progress
                        .report(format!(
                            "{} still runs after {} s (it may wait for a person's approval: chorus task show lists the calls that wait)",
                            spec.name,
                            started.elapsed().as_secs()
                        ))
                        .await;
                }
                () = context.ct.cancelled() => break Err(Refused {
                    why: Why::Unavailable,
                    code: "cancelled".to_owned(),
                    message: "the client cancelled the call".to_owned(),
                }),
            }
        };
        result(spec, answer).map(CallToolResponse::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool a run can be listed, as `tools/list` sends it, keeps the MCP
    /// rules for its input schema and, where it declares one, its output schema.
    #[test]
    fn every_listed_tool_has_object_schemas() {
        for spec in chorus_catalog::TOOLS
            .iter()
            .filter(|t| t.executor != Executor::AgentCli)
        {
            let listed = serde_json::to_value(tool(spec)).expect("a tool serializes");
            for field in ["inputSchema", "outputSchema"] {
                if let Some(schema) = listed.get(field) {
                    let problems = chorus_catalog::mcp_rules::problems(schema);
                    assert!(problems.is_empty(), "{} {field}: {problems:?}", spec.name);
                }
            }
            assert!(listed.get("inputSchema").is_some(), "{}", spec.name);
        }
    }
}
