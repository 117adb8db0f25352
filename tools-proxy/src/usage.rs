//! Command line: `chorus-tools [WORKSPACE_ROOT] '<JSON>'` (or `-` to read the
//! JSON from stdin), and the help text that lists every tool from the catalog.

use std::fmt::Write as _;
use std::process::ExitCode;

use chorus_catalog::{Executor, TOOLS, ToolSpec, help_tool};
use chorus_proto::limits;
use clap::{CommandFactory, FromArgMatches, Parser};
use serde_json::{Map, Value};

use crate::exit::{Exit, Failure};
use crate::{DEFAULT_TOOLS_ADDR, ENV_ORCHESTRATOR_ADDR, ENV_RUN_TOKEN, ENV_TOOLS_ADDR};

/// Call a Chorus tool on behalf of the agent run named by CHORUS_RUN_TOKEN.
#[derive(Debug, Parser)]
#[command(
    name = "chorus-tools",
    version,
    override_usage = "chorus-tools [WORKSPACE_ROOT] '<JSON>'\n       chorus-tools [WORKSPACE_ROOT] - < call.json\n       chorus-tools '{\"tool\":\"file.read\",\"path\":\"README.md\"}'\n       chorus-tools mcp    (the run's tools as an MCP server on stdin/stdout)"
)]
pub struct Cli {
    /// Optional workspace root (must be the run's own), then the tool call as one JSON
    /// object: {"tool": "<name>", ...arguments}; or `-` to read that object from
    /// stdin, for calls too large for one argument (Linux takes 128 KiB at most),
    /// such as a file.create with a large content.
    #[arg(required = true, num_args = 1..=2, value_name = "ARGS", allow_hyphen_values = true)]
    args: Vec<String>,
}

impl Cli {
    /// Parses the command line; `--help` lists the tools from the catalog.
    pub fn try_parse_with_catalog() -> Result<Self, clap::Error> {
        // The catalog's help is built only when asked for: deriving every tool's
        // schema took a millisecond of every call.
        let wants_help = std::env::args_os()
            .skip(1)
            .any(|a| a == "--help" || a == "-h");
        let mut command = Self::command();
        if wants_help {
            command = command.after_help(catalog_help());
        }
        let matches = command.try_get_matches()?;
        Self::from_arg_matches(&matches)
    }
}

/// Prints clap's help or version (exit 0), or a usage error as JSON (exit 2).
pub fn clap_exit(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        _ => Failure::usage(format!(
            "{}; usage: chorus-tools [WORKSPACE_ROOT] '<JSON>' (see chorus-tools --help)",
            first_line(&err.render().to_string())
        ))
        .report(),
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid arguments")
        .trim()
        .trim_start_matches("error: ")
        .to_owned()
}

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    ToolExec { addr: String },
    Orchestrator { addr: String },
}

/// A validated tool call, ready to send.
#[derive(Debug, Clone)]
pub struct Request {
    pub tool: String,
    pub arguments: Map<String, Value>,
    pub token: String,
    pub workspace_root: Option<String>,
    pub route: Route,
}

/// tool-exec's address ([`ENV_TOOLS_ADDR`], else the default), with its scheme.
pub fn tools_addr() -> String {
    with_scheme(&std::env::var(ENV_TOOLS_ADDR).unwrap_or_else(|_| DEFAULT_TOOLS_ADDR.to_owned()))
}

impl Request {
    /// Validates the command line and environment and picks the service.
    pub fn from_cli(cli: Cli) -> Result<Self, Failure> {
        let mut args = cli.args;
        let json = match args.pop().unwrap_or_default() {
            dash if dash == STDIN => read_stdin()?,
            json => json,
        };
        let workspace_root = args.pop();
        let mut call = match serde_json::from_str::<Value>(&json) {
            Ok(Value::Object(call)) => call,
            Ok(_) => {
                return Err(invalid(
                    "the tool call must be a JSON object like {\"tool\":\"file.read\",\"path\":\"README.md\"}",
                ));
            }
            Err(e) => {
                return Err(invalid(format!(
                    "the tool call is not valid JSON ({e}); expected {{\"tool\":\"<name>\", ...arguments}}"
                )));
            }
        };
        let tool = match call.remove("tool") {
            Some(Value::String(tool)) => tool,
            Some(_) => {
                return Err(invalid(
                    "\"tool\" must be a string naming the tool, e.g. \"file.read\"",
                ));
            }
            None => {
                return Err(invalid(
                    "the tool call has no \"tool\" field; expected {\"tool\":\"<name>\", ...arguments}",
                ));
            }
        };
        let spec = chorus_catalog::get(&tool).ok_or_else(|| {
            invalid(format!(
                "unknown tool '{tool}'; run chorus-tools --help to list the tools"
            ))
        })?;
        Self::new(spec, call, workspace_root)
    }

    /// A call of `spec` with `arguments` on behalf of the run whose token is
    /// in the environment, sent to the service that executes it.
    pub fn new(
        spec: &'static ToolSpec,
        arguments: Map<String, Value>,
        workspace_root: Option<String>,
    ) -> Result<Self, Failure> {
        let tool = spec.name.to_owned();
        let token = std::env::var(ENV_RUN_TOKEN).ok().filter(|t| !t.trim().is_empty()).ok_or_else(|| {
            Failure::usage(format!("{ENV_RUN_TOKEN} is not set: chorus-tools only works inside an agent run started by Chorus"))
        })?;
        let route = match spec.executor {
            Executor::ToolExec => Route::ToolExec { addr: tools_addr() },
            Executor::Orchestrator => match std::env::var(ENV_ORCHESTRATOR_ADDR) {
                Ok(addr) if !addr.trim().is_empty() => Route::Orchestrator {
                    addr: with_scheme(&addr),
                },
                _ => {
                    return Err(Failure::new(
                        Exit::Unavailable,
                        "unavailable",
                        format!(
                            "orchestrator not configured: '{tool}' is executed by chorus-orchestrator; set {ENV_ORCHESTRATOR_ADDR}"
                        ),
                    ));
                }
            },
            Executor::AgentCli => {
                return Err(invalid(format!(
                    "'{tool}' is native to your agent CLI: use its own tool directly, not chorus-tools"
                )));
            }
        };
        Ok(Self {
            tool,
            arguments,
            token,
            workspace_root,
            route,
        })
    }
}

/// The JSON argument that means "read the call from stdin".
const STDIN: &str = "-";

/// The tool call piped to stdin.
fn read_stdin() -> Result<String, Failure> {
    let json = std::io::read_to_string(std::io::stdin()).map_err(|e| {
        Failure::usage(format!(
            "cannot read the tool call from stdin ({e}); pipe one JSON object, e.g. chorus-tools - < call.json"
        ))
    })?;
    if json.trim().is_empty() {
        return Err(Failure::usage(
            "'-' reads the tool call from stdin, which was empty; pipe one JSON object, e.g. chorus-tools - < call.json",
        ));
    }
    Ok(json)
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(Exit::InvalidArguments, "invalid_argument", message)
}

fn with_scheme(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    }
}

/// The tool list shown by --help, from the catalog.
fn catalog_help() -> String {
    let mut out = String::from("Tools:\n");
    for spec in TOOLS {
        let help = help_tool(spec);
        let where_ = match spec.executor {
            Executor::ToolExec => "",
            Executor::Orchestrator => " [orchestrator]",
            Executor::AgentCli => " [native to the agent CLI, not through chorus-tools]",
        };
        let _ = writeln!(out, "  {}{where_}\n      {}", help.name, help.description);
        for arg in &help.arguments {
            let need = if arg.required { "required" } else { "optional" };
            let _ = writeln!(
                out,
                "      - {} ({}, {need}): {}",
                arg.name,
                arg.kind,
                arg.description.replace('\n', " ")
            );
        }
        if spec.executor != Executor::AgentCli {
            let _ = writeln!(out, "      e.g. {}", help.example);
        }
    }
    let _ = write!(
        out,
        "\nEnvironment:\n  {ENV_RUN_TOKEN}         the run's token (required)\n  {ENV_TOOLS_ADDR}         tool-exec address (default {DEFAULT_TOOLS_ADDR})\n  {ENV_ORCHESTRATOR_ADDR}  orchestrator address\n  CHORUS_TLS_CA            PEM CA of the services' certificates, for https:// addresses\n\
         \nLarge calls: chorus-tools - reads the JSON from stdin (one argument holds 128 KiB at most on Linux),\n  e.g. chorus-tools - < call.json; a request may carry {message_mib} MiB, file contents {content_mib} MiB (the default limits).\n\
         \nOutput: the result {{\"output\", \"metadata\", \"error\"?}} as JSON on stdout; on failure {{\"code\",\"message\"}} on stderr.\n\
         Exit codes: 0 ok, 1 tool failed, 2 usage, 3 denied, 4 invalid arguments, 5 unavailable.\n",
        message_mib = limits::DEFAULT_MESSAGE_BYTES >> 20,
        content_mib = limits::DEFAULT_CONTENT_BYTES >> 20,
    );
    out
}
