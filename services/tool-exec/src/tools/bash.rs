//! bash: runs `bash -c <command>` in the workspace root, in the run sandbox.
//!
//! The command runs with stdin closed, as the workspace's owner (never root),
//! seeing only the workspace (read-write) and the system directories, with no
//! network unless the run holds the `network` grant (then only what the
//! agent's egress list allows, through the launcher's proxy), and an allow-listed
//! environment plus `CHORUS_WORKSPACE_ROOT` (the root). stdout and stderr are
//! kept up to `max_output_bytes` each. When the command returns, the timeout
//! passes, the caller goes away or the service shuts down, every process it
//! started is gone (see [`crate::process`]).
//!
//! A non-zero exit is a result, not an error (`exit_code` tells it). A timeout, a
//! caller that left and a shutdown are reported in-band, alongside the partial
//! output: `deadline_exceeded` and `cancelled`. A shutdown deliberately is not
//! UNAVAILABLE: the command may have done part of its work, so it must not be
//! retried blindly elsewhere. The call's deadline is longer than the longest bash
//! timeout, so the command's own timeout ends it first.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use chorus_catalog::{args, outputs};
use chorus_sandbox::ProcessSpec;

use crate::config::Limits;
use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::process::{self, CommandEnd, RunLimits};
use crate::stop::StopReason;

const TOOL: &str = "bash";

/// The variable that tells a command where the workspace root is.
pub const WORKSPACE_ROOT_ENV: &str = "CHORUS_WORKSPACE_ROOT";

pub async fn run(ctx: &ToolContext, args: args::Bash) -> Result<ToolOutcome, ToolError> {
    if args.command.trim().is_empty() {
        return Err(invalid("command is empty"));
    }
    if args.command.contains('\0') {
        return Err(invalid("command contains a NUL byte"));
    }
    let timeout = timeout(&ctx.limits, args.timeout_secs)?;
    let root = ctx.sandbox.canonical_root();
    let network = ctx.grant.allows(chorus_catalog::NETWORK);
    let identity = ctx
        .processes
        .identity_for(root)
        .map_err(|e| ToolError::FailedPrecondition(e.to_string()))?;
    let mut env = process::base_env(network);
    env.push((WORKSPACE_ROOT_ENV.into(), root.into()));
    let spec = ProcessSpec {
        program: bash_program().into(),
        args: vec!["-c".into(), args.command.into()],
        env,
        cwd: root.to_path_buf(),
        read_write: vec![root.to_path_buf()],
        read_only: Vec::new(),
        network: process::network_of(&ctx.grant)?,
        identity,
        address_space_limit: true,
        covers: Vec::new(),
        // Every call of the run shares the run's limits.
        run: Some(ctx.grant.run_id.clone()),
        fence: ctx.fence.clone(),
        network_questions: ctx.network_questions.clone(),
    };
    let limits = RunLimits {
        timeout,
        max_output_bytes: ctx.limits.max_output_bytes,
    };
    let finished = process::run(&ctx.processes, &spec, limits, ctx.stop.token())
        .await
        .map_err(|e| {
            e.into_tool_error(
                "bash is not installed on the tool-exec host (not found at /bin/bash or on PATH)",
            )
        })?;

    Ok(answer(ctx, &finished, timeout))
}

/// What the model is told of a finished command: its output, and how it
/// ended when it did not exit by itself.
fn answer(ctx: &ToolContext, finished: &process::Finished, timeout: Duration) -> ToolOutcome {
    let timed_out = finished.ending == CommandEnd::TimedOut;
    let output = outputs::Bash {
        stdout: finished.stdout.text(),
        stderr: finished.stderr.text(),
        exit_code: finished.status.code(),
        signal: finished.status.signal(),
        timed_out,
        truncated: finished.stdout.truncated || finished.stderr.truncated,
    };
    let outcome = ToolOutcome::ok(&output)
        .with_metadata("exit_code", output.exit_code)
        .with_metadata("timed_out", timed_out);
    match finished.ending {
        CommandEnd::Exited => outcome,
        CommandEnd::TimedOut => outcome.with_error(
            "deadline_exceeded",
            format!(
                "command timed out after {} s; it and every process it started were killed",
                timeout.as_secs()
            ),
        ),
        CommandEnd::Cancelled => {
            let (code, why) = match ctx.stop.reason() {
                Some(StopReason::Deadline) => {
                    ("deadline_exceeded", "the call ran past its deadline")
                }
                Some(StopReason::CallerLeft) => ("cancelled", "the caller went away"),
                Some(StopReason::RunEnded) => (
                    "aborted",
                    "the run ended while the command ran (or its orchestrator lost it)",
                ),
                Some(StopReason::ShuttingDown) | None => {
                    ("cancelled", "tool-exec is shutting down")
                }
            };
            outcome.with_error(
                code,
                format!(
                    "{why}; the command and every process it started were killed; check what \
                     it already changed before running it again"
                ),
            )
        }
    }
}

/// The call's timeout: `timeout_secs` or the default, within `1..=bash_max_timeout`.
fn timeout(limits: &Limits, timeout_secs: Option<u64>) -> Result<Duration, ToolError> {
    let max = limits.bash_max_timeout.as_secs();
    match timeout_secs {
        None => Ok(limits.bash_default_timeout),
        Some(secs) if (1..=max).contains(&secs) => Ok(Duration::from_secs(secs)),
        Some(secs) => Err(invalid(&format!(
            "timeout_secs is {secs}; it must be between 1 and {max}"
        ))),
    }
}

/// `/bin/bash` when present, else `bash` from PATH.
fn bash_program() -> &'static str {
    const STANDARD: &str = "/bin/bash";
    if Path::new(STANDARD).is_file() {
        STANDARD
    } else {
        "bash"
    }
}

fn invalid(message: &str) -> ToolError {
    ToolError::InvalidArguments {
        tool: TOOL.to_owned(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_defaults_and_stays_within_bounds() {
        let limits = Limits::default();
        assert_eq!(
            timeout(&limits, None).expect("default"),
            limits.bash_default_timeout
        );
        assert_eq!(
            timeout(&limits, Some(1)).expect("one second"),
            Duration::from_secs(1)
        );
        let max = limits.bash_max_timeout.as_secs();
        assert_eq!(
            timeout(&limits, Some(max)).expect("the maximum"),
            limits.bash_max_timeout
        );
        for refused in [0, max + 1, u64::MAX] {
            let err = timeout(&limits, Some(refused)).expect_err("out of bounds");
            assert!(
                matches!(err, ToolError::InvalidArguments { .. }),
                "{refused}: {err}"
            );
        }
    }
}
