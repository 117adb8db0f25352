//! The execution path of every tool call: catalog lookup → permission → argument
//! validation → sandboxed execution → metadata.

use std::sync::Arc;
use std::time::Instant;

use chorus_catalog::{Executor, args};
use chorus_run_token::RunGrant;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::Sandbox;
use crate::tools;

/// Runs tools for verified grants.
#[derive(Debug, Clone)]
pub struct ToolRunner {
    limits: Limits,
    processes: chorus_sandbox::Sandbox,
    shutdown: CancellationToken,
}

impl ToolRunner {
    /// A runner whose bash and git calls run in `processes`.
    pub fn new(
        limits: Limits,
        processes: chorus_sandbox::Sandbox,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            limits,
            processes,
            shutdown,
        }
    }

    /// The sandbox bash and git run in.
    pub fn processes(&self) -> &chorus_sandbox::Sandbox {
        &self.processes
    }

    /// Executes `tool` with JSON `arguments` for the run `grant` describes.
    pub async fn execute(
        &self,
        grant: RunGrant,
        tool: &str,
        arguments: Value,
    ) -> Result<ToolOutcome, ToolError> {
        if self.shutdown.is_cancelled() {
            return Err(ToolError::ShuttingDown);
        }
        let spec =
            chorus_catalog::get(tool).ok_or_else(|| ToolError::UnknownTool(tool.to_owned()))?;
        if !spec.always_granted && !grant.allows(spec.name) {
            return Err(ToolError::NotAllowed {
                tool: spec.name.to_owned(),
                agent: grant.agent.clone(),
                allowed: grant.tools.join(", "),
            });
        }
        match spec.executor {
            Executor::ToolExec => {}
            Executor::Orchestrator => {
                return Err(ToolError::WrongService {
                    tool: spec.name.to_owned(),
                    executor: "orchestrator",
                });
            }
            Executor::AgentCli => {
                return Err(ToolError::WrongService {
                    tool: spec.name.to_owned(),
                    executor: "agent CLI itself (a native tool)",
                });
            }
        }
        let arguments = if arguments.is_null() {
            Value::Object(serde_json::Map::new())
        } else {
            arguments
        };
        // A root service makes files as the user the run's processes act as.
        let owner = match self.processes.identity_for(&grant.root) {
            Ok(chorus_sandbox::Identity::User { uid, gid }) if running_as_root() => {
                Some((uid, gid))
            }
            _ => None,
        };
        let sandbox = Arc::new(Sandbox::open(&grant.root)?.owned_by(owner));
        let ctx = ToolContext {
            sandbox,
            grant: Arc::new(grant),
            limits: self.limits,
            processes: self.processes.clone(),
            cancel: self.shutdown.clone(),
        };

        let started = Instant::now();
        let outcome = match spec.name {
            "file.read" => tools::read::run(&ctx, parse(tool, arguments)?).await,
            "file.create" => tools::write::create(&ctx, parse(tool, arguments)?).await,
            "file.write" => tools::write::write(&ctx, parse(tool, arguments)?).await,
            "file.patch" => tools::patch::run(&ctx, parse(tool, arguments)?).await,
            "file.delete" => tools::delete::run(&ctx, parse(tool, arguments)?).await,
            "file.list" => tools::list::run(&ctx, parse(tool, arguments)?).await,
            "file.search" => tools::search::run(&ctx, parse(tool, arguments)?).await,
            "bash" => tools::bash::run(&ctx, parse(tool, arguments)?).await,
            "git.status" => {
                tools::git::status(&ctx, parse::<args::GitStatus>(tool, arguments)?).await
            }
            "git.diff" => tools::git::diff(&ctx, parse(tool, arguments)?).await,
            "git.commit" => tools::git::commit(&ctx, parse(tool, arguments)?).await,
            "git.push" => tools::git::push(&ctx, parse(tool, arguments)?).await,
            "help" => tools::help::run(&ctx, parse(tool, arguments)?),
            other => Err(ToolError::Internal(format!(
                "catalog tool '{other}' has no tool-exec implementation"
            ))),
        }?;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(outcome.with_metadata("duration_ms", elapsed_ms))
    }
}

fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Deserializes arguments into the tool's own argument type: the catalog schema
/// and this check come from the same Rust type.
fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ToolError> {
    if !arguments.is_object() {
        return Err(ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message: "arguments must be a JSON object".to_owned(),
        });
    }
    serde_json::from_value(arguments).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_owned(),
        message: e.to_string(),
    })
}
