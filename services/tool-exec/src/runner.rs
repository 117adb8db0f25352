//! The execution path of every tool call: catalog lookup → permission → argument
//! validation → sandboxed execution → metadata.
//!
//! Every call has a deadline, `Limits::tool_timeout`. bash and git calls are
//! bounded by their own timeouts, which kill their processes and are answered
//! with their partial output; their deadline is the longer of `tool_timeout`
//! and their longest timeout plus [`PROCESS_STOP_MARGIN`], so their own timeout
//! ends them first. A call also stops when its caller goes away or the service
//! shuts down (see [`crate::stop`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_catalog::{Category, Executor, ToolSpec, args};
use chorus_run_token::RunGrant;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::FileRoot;
use crate::stop::{CallStop, StopReason};
use crate::tools;

/// What a bash or git call gets past its own timeout to kill its processes and
/// collect their output before the call's deadline.
pub const PROCESS_STOP_MARGIN: Duration = Duration::from_secs(10);

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
        crate::sandbox::drop_supplementary_groups();
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

    /// Executes `tool` with JSON `arguments` for the run `grant` describes, for a
    /// caller that waits for the answer.
    pub async fn execute(
        &self,
        grant: RunGrant,
        tool: &str,
        arguments: Value,
    ) -> Result<ToolOutcome, ToolError> {
        self.execute_until(grant, tool, arguments, &CancellationToken::new())
            .await
    }

    /// Executes `tool` like [`ToolRunner::execute`], and stops it when
    /// `caller_gone` fires (nobody waits for the answer any more).
    pub async fn execute_until(
        &self,
        grant: RunGrant,
        tool: &str,
        arguments: Value,
        caller_gone: &CancellationToken,
    ) -> Result<ToolOutcome, ToolError> {
        self.execute_watched(grant, tool, arguments, caller_gone, &Watched::default())
            .await
    }

    /// Executes `tool` like [`ToolRunner::execute_until`], its processes
    /// fenced by `watched.fence` and the call stopped when
    /// `watched.run_ended` fires (see [`crate::watch`]).
    pub async fn execute_watched(
        &self,
        grant: RunGrant,
        tool: &str,
        arguments: Value,
        caller_gone: &CancellationToken,
        watched: &Watched,
    ) -> Result<ToolOutcome, ToolError> {
        if self.shutdown.is_cancelled() {
            return Err(ToolError::ShuttingDown);
        }
        let spec = granted_here(&grant, tool)?;
        let arguments = if arguments.is_null() {
            Value::Object(serde_json::Map::new())
        } else {
            arguments
        };
        // A root service's file tools act as the user the run's processes act as.
        let owner = match self.processes.identity_for(&grant.root) {
            Ok(chorus_sandbox::Identity::User { uid, gid }) if running_as_root() => {
                Some((uid, gid))
            }
            _ => None,
        };
        let sandbox = Arc::new(
            FileRoot::open(&grant.root)?
                .owned_by(owner)
                .with_hard_links(self.limits.hard_links),
        );
        let stop = CallStop::new(&self.shutdown, spec.name, self.deadline_of(spec));
        let ctx = ToolContext {
            sandbox,
            grant: Arc::new(grant),
            limits: self.limits,
            processes: self.processes.clone(),
            stop: stop.clone(),
            fence: watched.fence.clone(),
            network_questions: watched.network_questions.clone(),
        };

        let started = Instant::now();
        let work = dispatch(&ctx, spec.name, tool, arguments);
        tokio::pin!(work);
        // A stopped tool answers promptly (see `crate::stop`): wait for it.
        let outcome = tokio::select! {
            biased;
            outcome = &mut work => outcome,
            () = tokio::time::sleep(stop.deadline()) => {
                stop.stop(StopReason::Deadline);
                work.await
            }
            () = caller_gone.cancelled() => {
                stop.stop(StopReason::CallerLeft);
                work.await
            }
            () = watched.run_ended.cancelled() => {
                stop.stop(StopReason::RunEnded);
                work.await
            }
        }?;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(outcome.with_metadata("duration_ms", elapsed_ms))
    }

    /// How long a call of `spec` may run (see the module documentation).
    fn deadline_of(&self, spec: &ToolSpec) -> Duration {
        let own = if spec.name == "bash" {
            self.limits.bash_max_timeout
        } else if spec.category == Category::Git {
            self.limits.git_timeout
        } else {
            return self.limits.tool_timeout;
        };
        self.limits
            .tool_timeout
            .max(own.saturating_add(PROCESS_STOP_MARGIN))
    }
}

/// What watches a call from outside: its fence and its run's end.
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// The fence file of the processes the call starts.
    pub fence: Option<std::path::PathBuf>,
    /// Fires when the run is no longer active.
    pub run_ended: CancellationToken,
    /// Asked before each connection made with the network grant.
    pub network_questions: Option<chorus_sandbox::NetworkQuestions>,
}

/// Runs the implementation of the catalog tool `name` (called as `tool`).
async fn dispatch(
    ctx: &ToolContext,
    name: &str,
    tool: &str,
    arguments: Value,
) -> Result<ToolOutcome, ToolError> {
    match name {
        "file.read" => tools::read::run(ctx, parse(tool, arguments)?).await,
        "file.create" => tools::write::create(ctx, parse(tool, arguments)?).await,
        "file.write" => tools::write::write(ctx, parse(tool, arguments)?).await,
        "file.patch" => tools::patch::run(ctx, parse(tool, arguments)?).await,
        "file.delete" => tools::delete::run(ctx, parse(tool, arguments)?).await,
        "file.list" => tools::list::run(ctx, parse(tool, arguments)?).await,
        "file.search" => tools::search::run(ctx, parse(tool, arguments)?).await,
        "bash" => tools::bash::run(ctx, parse(tool, arguments)?).await,
        "git.status" => tools::git::status(ctx, parse::<args::GitStatus>(tool, arguments)?).await,
        "git.diff" => tools::git::diff(ctx, parse(tool, arguments)?).await,
        "git.commit" => tools::git::commit(ctx, parse(tool, arguments)?).await,
        "git.push" => tools::git::push(ctx, parse(tool, arguments)?).await,
        "help" => tools::help::run(ctx, parse(tool, arguments)?),
        other => Err(ToolError::Internal(format!(
            "catalog tool '{other}' has no tool-exec implementation"
        ))),
    }
}

pub(crate) fn running_as_root() -> bool {
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

/// The catalog's `tool`, when the run of `grant` holds it and tool-exec runs
/// it (not the orchestrator, not the agent CLI).
fn granted_here(grant: &RunGrant, tool: &str) -> Result<&'static ToolSpec, ToolError> {
    let spec = chorus_catalog::get(tool).ok_or_else(|| ToolError::UnknownTool(tool.to_owned()))?;
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
    Ok(spec)
}
