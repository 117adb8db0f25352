//! `chorus-tools mcp`: the run's tools as an MCP server on stdin and stdout,
//! for a whole agent session. The agent CLI starts it once (Claude Code's
//! `--mcp-config`, OpenCode's `mcp` configuration); it keeps its connections
//! to the services open, lists the tools the run was granted with their
//! schemas, and sends each call as a one-shot `chorus-tools` would: same
//! token, same services, same checks and records.

use std::process::ExitCode;

use chorus_catalog::ToolSpec;
use chorus_mcp::{Caller, Progress, Ran, Refused, RunTools, RunToolsServer, ToolError, Why};
use chorus_proto::orchestrator::v1::HandoffProgress;
use rmcp::ServiceExt as _;
use serde_json::{Map, Value};

use crate::call::{self, Channels};
use crate::exit::{Exit, Failure};
use crate::usage::Request;

/// Serves MCP on stdin and stdout until the client closes them.
pub fn serve() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return Failure::new(
                Exit::Unavailable,
                "internal",
                format!("cannot start the async runtime: {e}"),
            )
            .report();
        }
    };
    // Without a token nothing can be listed or called: say so before any
    // client waits on an answer.
    if let Err(failure) = Request::new(help(), Map::new(), None) {
        return failure.report();
    }
    runtime.block_on(async {
        let telemetry = chorus_telemetry::init_quiet("chorus-tools");
        let server = RunToolsServer::new(Grpc {
            channels: Channels::default(),
        });
        // The session ends when the client closes stdin, or with SIGTERM (a
        // CLI stopping its servers): either way the spans are exported.
        let mut terminated =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let outcome = match server.serve(rmcp::transport::stdio()).await {
            Ok(running) => tokio::select! {
                ended = running.waiting() => ended.map(drop).map_err(|e| e.to_string()),
                Some(()) = async { terminated.as_mut()?.recv().await } => Ok(()),
            },
            Err(e) => Err(e.to_string()),
        };
        if let Some(telemetry) = telemetry {
            let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
        }
        match outcome {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                Failure::new(Exit::Usage, "mcp", format!("the MCP session failed: {e}")).report()
            }
        }
    })
}

fn help() -> &'static ToolSpec {
    chorus_catalog::get("help").expect("help is in the catalog")
}

/// The run's tools, through the services' gRPC APIs.
struct Grpc {
    channels: Channels,
}

/// On stdio the caller is the process's own run (`CHORUS_RUN_TOKEN`): the
/// request names no other.
impl RunTools for Grpc {
    async fn granted(&self, _caller: &Caller) -> Result<Vec<String>, Refused> {
        let request = Request::new(help(), Map::new(), None).map_err(refused)?;
        call::granted(&request, &self.channels)
            .await
            .map_err(refused)
    }

    async fn call(
        &self,
        _caller: &Caller,
        tool: &'static ToolSpec,
        arguments: Map<String, Value>,
        progress: Progress,
    ) -> Result<Ran, Refused> {
        let request = Request::new(tool, arguments, None).map_err(refused)?;
        // A handoff's progress comes as it happens; the client hears of it
        // while the call goes on.
        let channels = &self.channels;
        let reply = progress
            .relay(|said| async move {
                let mut on_progress = move |p: &HandoffProgress| {
                    let _ = said.send(describe(p));
                };
                call::send(request, channels, &mut on_progress).await
            })
            .await;
        let reply = reply.map_err(refused)?;
        Ok(Ran {
            output: reply.output,
            error: reply.error.map(|e| ToolError {
                code: e.code,
                message: e.message,
            }),
            metadata: reply.metadata,
        })
    }
}

/// A call the services did not run, by what chorus-tools would have exited
/// with.
fn refused(failure: Failure) -> Refused {
    let why = match (failure.exit, failure.code.as_str()) {
        (_, "unauthenticated") => Why::Unauthenticated,
        (Exit::Denied, _) => Why::Denied,
        (Exit::InvalidArguments, _) => Why::Invalid,
        // A tool's own failure comes as a reply, not here: what is left is
        // the services' refusal of the call (a precondition, a limit).
        (Exit::ToolFailed, _) => Why::Denied,
        (Exit::Usage | Exit::Unavailable, _) => Why::Unavailable,
    };
    Refused {
        why,
        code: failure.code,
        message: failure.message,
    }
}

/// One line of what the other agent of a handoff did.
fn describe(progress: &HandoffProgress) -> String {
    let data = progress
        .data
        .clone()
        .map(chorus_proto::json::from_struct)
        .unwrap_or_default();
    chorus_mcp::progress_line(&progress.kind, &data)
}
