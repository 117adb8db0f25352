//! One gRPC call to the service that executes the tool.

use std::time::Duration;

use chorus_proto::handoff::HandoffError;
use chorus_proto::json;
use chorus_proto::orchestrator::v1::CallToolRequest;
use chorus_proto::orchestrator::v1::agent_tools_client::AgentToolsClient;
use chorus_proto::tools::v1::ExecuteToolRequest;
use chorus_proto::tools::v1::tool_exec_client::ToolExecClient;
use serde_json::{Map, Value};
use tonic::metadata::MetadataValue;
use tonic::transport::Endpoint;

use crate::exit::{Exit, Failure};
use crate::usage::{Request, Route};

/// Metadata key carrying the workspace root given on the command line.
pub const WORKSPACE_ROOT_METADATA: &str = "chorus-workspace-root";

/// What to print on success: the result JSON, and the failure if the tool ran but
/// reported an error alongside its output.
#[derive(Debug)]
pub struct Answer {
    pub stdout: String,
    pub error: Option<Failure>,
}

pub async fn send(request: Request) -> Result<Answer, Failure> {
    let (service, addr) = match &request.route {
        Route::ToolExec { addr } => ("tool-exec", addr),
        Route::Orchestrator { addr } => ("orchestrator", addr),
    };
    let endpoint = Endpoint::from_shared(addr.clone())
        .map_err(|e| {
            Failure::usage(format!(
                "{service} address '{addr}' is not a valid URI: {e}"
            ))
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let channel = endpoint.connect().await.map_err(|e| {
        Failure::new(
            Exit::Unavailable,
            "unavailable",
            format!("cannot reach {service} at {addr}: {}", source_chain(&e)),
        )
    })?;
    if let Route::Orchestrator { .. } = request.route {
        return call_orchestrator(channel, request).await;
    }

    let mut grpc = tonic::Request::new(ExecuteToolRequest {
        tool: request.tool.clone(),
        arguments: Some(json::to_struct(request.arguments)),
    });
    let bearer = MetadataValue::try_from(format!("Bearer {}", request.token.trim()))
        .map_err(|_| Failure::usage("CHORUS_RUN_TOKEN contains characters that cannot be sent"))?;
    grpc.metadata_mut().insert("authorization", bearer);
    if let Some(root) = &request.workspace_root {
        let root = MetadataValue::try_from(root.as_str()).map_err(|_| {
            Failure::usage("the workspace root argument contains characters that cannot be sent")
        })?;
        grpc.metadata_mut().insert(WORKSPACE_ROOT_METADATA, root);
    }

    let response = ToolExecClient::new(channel)
        .execute_tool(grpc)
        .await
        .map_err(|status| Failure::from_status(&status, "tool-exec"))?
        .into_inner();

    let mut result = Map::new();
    result.insert(
        "output".to_owned(),
        response.output.map_or(Value::Null, json::from_value),
    );
    let error = response.error.map(|e| {
        result.insert(
            "error".to_owned(),
            serde_json::json!({"code": e.code, "message": e.message}),
        );
        Failure::new(Exit::ToolFailed, &e.code, e.message)
    });
    result.insert(
        "metadata".to_owned(),
        Value::Object(response.metadata.map(json::from_struct).unwrap_or_default()),
    );
    Ok(Answer {
        stdout: Value::Object(result).to_string(),
        error,
    })
}

async fn call_orchestrator(
    channel: tonic::transport::Channel,
    request: Request,
) -> Result<Answer, Failure> {
    if request.tool == "handoff" {
        return handoff(channel, request).await;
    }
    let mut grpc = tonic::Request::new(CallToolRequest {
        tool: request.tool.clone(),
        arguments: Some(json::to_struct(request.arguments)),
    });
    let bearer = MetadataValue::try_from(format!("Bearer {}", request.token.trim()))
        .map_err(|_| Failure::usage("CHORUS_RUN_TOKEN contains characters that cannot be sent"))?;
    grpc.metadata_mut().insert("authorization", bearer);
    let response = AgentToolsClient::new(channel)
        .call_tool(grpc)
        .await
        .map_err(|status| Failure::from_status(&status, "orchestrator"))?
        .into_inner();
    let mut result = Map::new();
    result.insert(
        "output".to_owned(),
        response.output.map_or(Value::Null, json::from_value),
    );
    result.insert(
        "metadata".to_owned(),
        Value::Object(response.metadata.map(json::from_struct).unwrap_or_default()),
    );
    Ok(Answer {
        stdout: Value::Object(result).to_string(),
        error: None,
    })
}

/// A handoff: one streaming call that ends when the other agent does; prints its
/// result like any tool's, or its failure as the tool's error (exit 1).
async fn handoff(channel: tonic::transport::Channel, request: Request) -> Result<Answer, Failure> {
    match chorus_proto::handoff::call(channel, &request.token, &request.arguments).await {
        Ok(output) => Ok(Answer {
            stdout: serde_json::json!({ "output": output, "metadata": {} }).to_string(),
            error: None,
        }),
        Err(HandoffError::Failed {
            failure,
            reason,
            run_id,
        }) => Ok(Answer {
            stdout: serde_json::json!({
                "output": null,
                "error": { "code": failure, "message": reason },
                "metadata": { "run_id": run_id },
            })
            .to_string(),
            error: Some(Failure::new(Exit::ToolFailed, &failure, reason)),
        }),
        Err(HandoffError::Status(status)) => Err(Failure::from_status(&status, "orchestrator")),
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
