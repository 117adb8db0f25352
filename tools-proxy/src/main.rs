//! `chorus-tools`: how an agent uses Chorus tools.
//!
//! ```text
//! chorus-tools '{"tool":"file.read","path":"src/main.rs"}'
//! chorus-tools /path/to/workspace '{"tool":"file.read","path":"src/main.rs"}'
//! chorus-tools - < call.json     # the JSON on stdin: large contents
//! chorus-tools mcp                # the run's tools as an MCP server on stdio
//! ```
//!
//! It is a pure proxy: it reads the run token and service addresses from the
//! environment, sends workspace tools to tool-exec and orchestration tools to the
//! orchestrator, prints the JSON result on stdout and exits 0, or prints a JSON
//! error `{code, message}` on stderr and exits with a code that says what kind of
//! failure it was (see [`Exit`]). It is spawned once per tool call, so it does the
//! least work it can: one connection, one request, no background threads.
#![forbid(unsafe_code)]

mod call;
mod exit;
mod mcp;
mod usage;

use std::process::ExitCode;

use crate::exit::{Exit, Failure};

/// Environment variable holding the run token.
pub const ENV_RUN_TOKEN: &str = "CHORUS_RUN_TOKEN";
/// Environment variable with tool-exec's address.
pub const ENV_TOOLS_ADDR: &str = "CHORUS_TOOLS_ADDR";
/// Environment variable with the orchestrator's address.
pub const ENV_ORCHESTRATOR_ADDR: &str = "CHORUS_ORCHESTRATOR_ADDR";
/// tool-exec's address when CHORUS_TOOLS_ADDR is not set.
pub const DEFAULT_TOOLS_ADDR: &str = "http://127.0.0.1:50052";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    if let (Some(first), None) = (args.next(), args.next())
        && first == "mcp"
    {
        return mcp::serve();
    }
    let cli = match usage::Cli::try_parse_with_catalog() {
        Ok(cli) => cli,
        Err(e) => return usage::clap_exit(&e),
    };
    let result = usage::Request::from_cli(cli).and_then(|request| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| {
                Failure::new(
                    Exit::Unavailable,
                    "internal",
                    format!("cannot start the async runtime: {e}"),
                )
            })?;
        runtime.block_on(async {
            // Spans leave only when OTEL_* asks; the agent's TRACEPARENT goes on anyway.
            let telemetry = chorus_telemetry::init_quiet("chorus-tools");
            let answer = call::send(request, &call::Channels::default(), &mut |_| {}).await;
            if let Some(telemetry) = telemetry {
                // Flushing blocks; the runtime must keep driving the export meanwhile.
                let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
            }
            answer
        })
    });
    match result {
        Ok(answer) => {
            println!("{}", answer.stdout());
            match answer.error {
                None => ExitCode::SUCCESS,
                Some(failure) => failure.report(),
            }
        }
        Err(failure) => failure.report(),
    }
}
