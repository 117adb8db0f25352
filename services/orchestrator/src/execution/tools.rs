//! The executor path for API agents: each tool call the model makes is sent, with
//! the run's token, where chorus-tools would send it — workspace tools to
//! tool-exec (which asks the orchestrator to authorize and record it),
//! orchestration tools to the orchestrator's AgentTools — so permission checks,
//! execution and history are the same for every kind of agent.

use chorus_auth::tls::ClientTls;
use chorus_catalog::Executor;
use chorus_proto::handoff::HandoffError;
use chorus_proto::json;
use chorus_proto::limits::DEFAULT_MESSAGE_BYTES;
use chorus_proto::orchestrator::v1::CallToolRequest;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use chorus_telemetry::grpc::{TracedChannel, traced};
use serde_json::{Map, Value, json};
use tonic::metadata::{Ascii, MetadataValue};

/// A tool call that did not succeed: the gRPC code name and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallError {
    pub code: String,
    pub message: String,
}

/// Sends one run's tool calls.
#[derive(Debug, Clone)]
pub struct ToolRouter {
    tool_exec: Option<TracedChannel>,
    orchestrator: TracedChannel,
    bearer: MetadataValue<Ascii>,
}

/// A channel for the run's calls; only CallTool has a client deadline
/// (see [`chorus_proto::channel`]).
fn channel(addr: &str, tls: &ClientTls) -> Result<TracedChannel, String> {
    let endpoint = tls.endpoint(addr).map_err(|e| e.to_string())?;
    Ok(traced(chorus_proto::channel::tune(endpoint).connect_lazy()))
}

impl ToolRouter {
    /// # Errors
    /// An address or the token cannot be used.
    pub fn new(
        tools_addr: &str,
        orchestrator_addr: &str,
        token: &str,
        tls: &ClientTls,
    ) -> Result<Self, String> {
        Ok(Self {
            tool_exec: if tools_addr.is_empty() {
                None
            } else {
                Some(channel(tools_addr, tls)?)
            },
            orchestrator: channel(orchestrator_addr, tls)?,
            bearer: MetadataValue::try_from(format!("Bearer {token}"))
                .map_err(|_| "the run token cannot be sent as metadata".to_owned())?,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", self.bearer.clone());
        request
    }

    /// Calls `tool` with `arguments`. A tool that ran but reported an error with
    /// output (a failing bash command) comes back as `{output, error}`.
    ///
    /// # Errors
    /// The call was refused or failed; the error carries the service's code and message.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Value, ToolCallError> {
        let spec = chorus_catalog::get(tool).ok_or_else(|| ToolCallError {
            code: "invalid_argument".to_owned(),
            message: format!("unknown tool '{tool}'"),
        })?;
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(ToolCallError {
                    code: "invalid_argument".to_owned(),
                    message: format!("the arguments must be a JSON object, not {other}"),
                });
            }
        };
        match spec.executor {
            Executor::ToolExec => self.tool_exec(tool, arguments).await,
            Executor::Orchestrator if tool == "handoff" => {
                let token = self
                    .bearer
                    .to_str()
                    .unwrap_or_default()
                    .trim_start_matches("Bearer ")
                    .to_owned();
                chorus_proto::handoff::call(self.orchestrator.clone(), &token, &arguments)
                    .await
                    .map_err(|e| match e {
                        HandoffError::Status(status) => failed(&status),
                        HandoffError::Failed {
                            failure, reason, ..
                        } => ToolCallError {
                            code: failure,
                            message: reason,
                        },
                    })
            }
            Executor::Orchestrator => {
                let response = AgentToolsClient::new(self.orchestrator.clone())
                    .max_decoding_message_size(DEFAULT_MESSAGE_BYTES)
                    .call_tool(chorus_proto::channel::short(self.request(
                        CallToolRequest {
                            tool: tool.to_owned(),
                            arguments: Some(json::to_struct(arguments)),
                        },
                    )))
                    .await
                    .map_err(|s| failed(&s))?
                    .into_inner();
                Ok(response.output.map_or(Value::Null, json::from_value))
            }
            Executor::AgentCli => Err(ToolCallError {
                code: "failed_precondition".to_owned(),
                message: format!(
                    "'{tool}' is a native tool of the Claude Code CLI; API agents cannot use it"
                ),
            }),
        }
    }

    /// A workspace tool, through tool-exec; a tool's own failure comes back
    /// beside its output, for the model to read.
    async fn tool_exec(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, ToolCallError> {
        let channel = self.tool_exec.clone().ok_or_else(|| ToolCallError {
            code: "unavailable".to_owned(),
            message: "no tool-exec is configured for this orchestrator".to_owned(),
        })?;
        let response = ToolExecClient::new(channel)
            .max_decoding_message_size(DEFAULT_MESSAGE_BYTES)
            .execute_tool(self.request(ExecuteToolRequest {
                tool: tool.to_owned(),
                arguments: Some(json::to_struct(arguments)),
            }))
            .await
            .map_err(|s| failed(&s))?
            .into_inner();
        let output = response.output.map_or(Value::Null, json::from_value);
        Ok(match response.error {
            None => output,
            Some(e) => {
                json!({ "output": output, "error": { "code": e.code, "message": e.message } })
            }
        })
    }
}

/// A call a service refused, for the model.
fn failed(status: &tonic::Status) -> ToolCallError {
    ToolCallError {
        code: chorus_proto::code_name(status.code()).to_owned(),
        message: status.message().to_owned(),
    }
}
