//! A run's tool call, from its token to its record: the one path every face
//! (gRPC's ExecuteTool, MCP) takes. The orchestrator's gate authorizes the
//! call (the run active, the tool allowed); a call that starts processes is
//! fenced and watched while they run; the call runs in a task of its own, so
//! that a caller that goes away stops the tool and what it did is still
//! recorded.

use std::sync::Arc;
use std::time::Instant;

use chorus_catalog::Category;
use chorus_run_token::{RunGrant, RunTokenVerifier};
use chorus_sandbox::fence::Fences;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, error, info_span, warn};

use crate::context::ToolOutcome;
use crate::error::ToolError;
use crate::gate::{CallAsked, Question, RunGate, ToolCallRecord};
use crate::runner::ToolRunner;
use crate::watch::CallWatch;

/// What executes runs' tool calls.
#[derive(Debug, Clone)]
pub struct ToolCalls {
    runner: ToolRunner,
    verifier: RunTokenVerifier,
    gate: Option<Arc<dyn RunGate>>,
    /// The fences of calls in progress (see [`crate::watch`]); None when none
    /// can be made (processes then run without one).
    fences: Option<Arc<Fences>>,
}

impl ToolCalls {
    pub fn new(
        runner: ToolRunner,
        verifier: RunTokenVerifier,
        gate: Option<Arc<dyn RunGate>>,
    ) -> Self {
        let dir =
            chorus_sandbox::fence::dir_for("tool-exec", &uuid::Uuid::new_v4().simple().to_string());
        let fences = Fences::create(&dir)
            .map_err(|e| warn!(dir = %dir.display(), error = %e, "cannot make the call fence directory: bash and git run without fences"))
            .ok()
            .map(Arc::new);
        Self {
            runner,
            verifier,
            gate,
            fences,
        }
    }

    pub fn runner(&self) -> &ToolRunner {
        &self.runner
    }

    /// The grant of `token`, verified.
    pub fn verify(&self, token: &str) -> Result<RunGrant, ToolError> {
        Ok(self.verifier.verify(token)?)
    }

    /// Whether the run of `token` may still do anything (the gate asks
    /// whether it may call `help`, which every run holds); without a gate,
    /// yes.
    pub async fn still_active(&self, token: &str) -> Result<(), ToolError> {
        match &self.gate {
            Some(gate) => gate
                .authorize(token, "help", Question::default())
                .await
                .map(drop),
            None => Ok(()),
        }
    }

    /// Calls `tool` with `arguments` for the run of `token`, whose verified
    /// grant is `grant`: authorized by the gate, executed, recorded.
    pub async fn call(
        &self,
        token: String,
        grant: RunGrant,
        tool: String,
        arguments: Value,
    ) -> Result<ToolOutcome, ToolError> {
        // The orchestrator confirms the run is active and allowed; a refusal
        // executes nothing and is not recorded here (the orchestrator records
        // denials itself).
        let asked = tokio::time::Instant::now();
        // A call that starts processes has an id: the run's end waits for it
        // until its record.
        let call_id =
            starts_processes(&tool).then(|| format!("call-{}", uuid::Uuid::new_v4().simple()));
        let asked_about = CallAsked {
            resolved_path: resolved_path(&grant.root, &tool, &arguments),
            arguments: arguments.clone(),
            key: format!("key-{}", uuid::Uuid::new_v4().simple()),
        };
        let question = Question {
            call_id: call_id.as_deref(),
            call: Some(&asked_about),
        };
        let authorized = match &self.gate {
            Some(gate) => match gate
                .authorize(&token, &tool, question)
                .instrument(info_span!("authorize", chorus.tool = %tool))
                .await
            {
                Ok(authorized) => Some((Arc::clone(gate), authorized)),
                Err(err) => {
                    warn!(run_id = %grant.run_id, agent = %grant.agent, tool = %tool, code = ?err.code(), error = %err, "run gate refused the call");
                    return Err(err);
                }
            },
            None => None,
        };
        // Its processes' connections are asked about when the run's rules
        // decide the network grant's.
        let questions = authorized
            .as_ref()
            .filter(|(_, a)| {
                a.network_asks && starts_processes(&tool) && grant.allows(chorus_catalog::NETWORK)
            })
            .map(|(gate, _)| crate::gate::network_questions(Arc::clone(gate), token.clone()));
        // A call that starts processes is watched while they run.
        let watch = match (authorized, &self.fences, &call_id) {
            (Some((gate, authorized)), Some(fences), Some(id)) => Some(CallWatch::start(
                gate,
                Arc::clone(fences),
                id.clone(),
                token.clone(),
                tool.clone(),
                authorized,
                asked,
            )),
            _ => None,
        };

        // The call runs in a task of its own, which outlives this future: when
        // the caller goes away (its face drops this future), the guard stops the
        // tool, and what it did is still recorded.
        let caller_gone = CancellationToken::new();
        let _stop_when_caller_leaves = caller_gone.clone().drop_guard();
        let call = tokio::spawn(
            self.clone()
                .execute_and_record(
                    token,
                    grant,
                    tool,
                    arguments,
                    caller_gone,
                    (call_id, watch, questions),
                )
                .instrument(tracing::Span::current()),
        );
        call.await
            .map_err(|e| ToolError::Internal(format!("tool call task failed: {e}")))?
    }

    /// Executes an authorized call and records it through the gate, whether or
    /// not anyone still waits for the answer.
    async fn execute_and_record(
        self,
        token: String,
        grant: RunGrant,
        tool: String,
        arguments: Value,
        caller_gone: CancellationToken,
        (call_id, watch, questions): (
            Option<String>,
            Option<CallWatch>,
            Option<chorus_sandbox::NetworkQuestions>,
        ),
    ) -> Result<ToolOutcome, ToolError> {
        let (run_id, agent) = (grant.run_id.clone(), grant.agent.clone());
        let started = Instant::now();
        let span = info_span!(
            "execute",
            otel.name = %format!("execute {tool}"),
            chorus.tool = %tool,
            chorus.run_id = %run_id,
            chorus.agent = %agent,
            chorus.outcome = tracing::field::Empty,
        );
        let mut watched = watch
            .as_ref()
            .map(CallWatch::watched)
            .cloned()
            .unwrap_or_default();
        watched.network_questions = questions;
        let result = self
            .runner
            .execute_watched(grant, &tool, arguments.clone(), &caller_gone, &watched)
            .instrument(span.clone())
            .await;
        // The processes are gone: the watch and the fence go too.
        drop(watch);
        let elapsed = started.elapsed();
        let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let (status, output) = match &result {
            Ok(outcome) => (
                outcome
                    .error
                    .as_ref()
                    .map_or_else(|| "ok".to_owned(), |e| e.code.clone()),
                // An in-band error keeps what the call printed before it
                // ended that way (a command stopped: its output so far).
                outcome.error.as_ref().map_or_else(
                    || outcome.output.to_string(),
                    |e| match &outcome.output {
                        serde_json::Value::Null => e.message.clone(),
                        output => format!("{}\noutput so far: {output}", e.message),
                    },
                ),
            ),
            Err(err) => (
                chorus_proto::code_name(err.code()).to_owned(),
                err.to_string(),
            ),
        };
        span.record("chorus.outcome", status.as_str());
        chorus_telemetry::metrics().tool_call(&tool, &status, elapsed.as_secs_f64());
        match &result {
            Ok(_) => {
                // The task's history records every call: a log line of its
                // own would be a second copy, paid on every call.
                debug!(run_id = %run_id, agent = %agent, tool = %tool, status = %status, duration_ms, "tool executed")
            }
            Err(err) => {
                warn!(run_id = %run_id, agent = %agent, tool = %tool, code = ?err.code(), error = %err, "tool failed")
            }
        }
        if let Some(gate) = &self.gate {
            let record = ToolCallRecord::new(&tool, &arguments, status, duration_ms, &output);
            if let Err(err) = gate
                .record(&token, record, call_id.as_deref())
                .instrument(info_span!("record", chorus.tool = %tool))
                .await
            {
                // The call has happened; its answer still goes back to the agent.
                error!(run_id = %run_id, tool = %tool, error = %err, "could not record the tool call in the task history");
            }
        }
        result
    }
}

/// Whether calls of `tool` start processes (bash, git): those are watched.
fn starts_processes(tool: &str) -> bool {
    chorus_catalog::get(tool)
        .is_some_and(|spec| spec.name == "bash" || spec.category == Category::Git)
}

/// For a file tool: the workspace-relative path its `path` argument leads
/// to once symbolic links are followed (for a path that does not exist yet,
/// its directory's), so that approval rules on paths see where a call
/// really acts. None for other tools, or a path that leads nowhere readable
/// (the sandbox refuses it when the call runs).
fn resolved_path(root: &std::path::Path, tool: &str, arguments: &Value) -> Option<String> {
    if !tool.starts_with("file.") {
        return None;
    }
    let given = arguments.get("path").and_then(Value::as_str).unwrap_or(".");
    let path = if given.is_empty() { "." } else { given };
    let real_root = std::fs::canonicalize(root).ok()?;
    let joined = real_root.join(path.trim_start_matches('/'));
    let joined = if std::path::Path::new(path).is_absolute() {
        std::path::PathBuf::from(path)
    } else {
        joined
    };
    let real = match std::fs::canonicalize(&joined) {
        Ok(real) => real,
        Err(_) => {
            let parent = std::fs::canonicalize(joined.parent()?).ok()?;
            parent.join(joined.file_name()?)
        }
    };
    let relative = real.strip_prefix(&real_root).ok()?;
    relative.to_str().map(str::to_owned)
}
