//! A stand-in for the Claude Code and OpenCode CLIs in tests: it accepts their
//! flags, and instead of asking a model it plays the script written in its
//! message, calling chorus-tools as the real CLI's Bash tool would and printing
//! the same kind of output (stream-json for Claude Code, JSON events for
//! OpenCode). Only the model is fake: the flags, environment, chorus-tools and
//! services it talks to are the real ones.
//!
//! Script lines in the message (`fake:` on a first run, `fake-resume:` when
//! resumed with `--resume`/`--session`). A file name that is not absolute is in
//! the CLI's HOME (in the run directory, the only place a sandboxed CLI may
//! write; tests read it there, with the run directory kept):
//!
//! - `record <file>`: write its pid, uid, argv, cwd and environment to `<file>` as JSON;
//! - `call <json>`: call the tool. When the CLI was given an MCP server (Claude
//!   Code's `--mcp-config`, the `mcp` section of OpenCode's generated config),
//!   through that server, started once for the session as the real CLIs do —
//!   even a tool the CLI would not offer, so that what refuses it is the
//!   services; otherwise by running chorus-tools with that argument (the path
//!   comes from the `--allowedTools` rule for Claude Code, from the permission
//!   rule of the generated config for OpenCode). The flags must be right for
//!   either to work;
//! - `call-background <json>`: run chorus-tools with that argument (the
//!   shell form's path) and go on without waiting for it;
//! - `call-until <json>`: run chorus-tools with that argument again until
//!   it succeeds (up to 30 s), to wait on what another call does;
//! - `shell <command>`: run a shell command, as a CLI's own shell tool would
//!   (its output is the tool result);
//! - `save <file>`: write the last call's exit code, stdout and stderr to
//!   `<file>` as JSON (`{"code", "stdout", "stderr"}`);
//! - `stamp <file>`: write the wall-clock time (nanoseconds since the epoch) to
//!   `<file>` (benchmarks);
//! - `wait <fifo>`: make the named pipe, say "waiting on <fifo>", and block until
//!   something is written to it;
//! - `say <text>`: write assistant text;
//! - `stderr <text>`: write a line to stderr;
//! - `exit <code>`: end now with that code;
//! - `stubborn <marker>`: start children that try every way out of the run
//!   (plain, setsid, double-forked, setsid with a scrubbed environment), each
//!   ignoring SIGTERM with `<marker>` as its `$0`; once all run, say "stubborn
//!   children started" and wait forever, ignoring SIGTERM too;
//! - `orphans <marker>`: start the same children, holding the CLI's stdout and
//!   stderr, and go on once they run (the CLI then exits with them alive);
//! - `exclusive <file>`: hold an exclusive lock on `<file>` until the CLI
//!   exits; when another process holds it (another CLI of the same run
//!   still alive), append `<pid> <nanoseconds>` to `<file>.overlap` and go
//!   on;
//! - `hang`: wait forever.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::{Command, ExitCode, Stdio};

use serde_json::{Value, json};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Claude,
    Opencode,
}

struct Out {
    mode: Mode,
    session: String,
    last_text: String,
    turns: u64,
    /// Model messages printed (Claude Code: each has an id and its usage).
    messages: u64,
}

/// The usage each Claude Code model message reports: 120 input tokens (20
/// of them read from the cache), 10 output.
const CLAUDE_MESSAGE_USAGE: &str = r#"{"input_tokens":100,"cache_read_input_tokens":20,"cache_creation_input_tokens":0,"output_tokens":10}"#;

impl Out {
    /// A Claude Code `assistant` line: one model message holding `content`.
    fn claude_message(&mut self, content: &Value) -> Value {
        self.messages += 1;
        let usage: Value = serde_json::from_str(CLAUDE_MESSAGE_USAGE).unwrap_or_default();
        json!({"type":"assistant","message":{"id":format!("msg_{}", self.messages),"model":"claude-fake","content":content,"usage":usage},"session_id":self.session})
    }

    fn emit(&self, value: &Value) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{value}");
        let _ = stdout.flush();
    }

    fn say(&mut self, text: &str) {
        self.last_text = text.to_owned();
        match self.mode {
            Mode::Claude => {
                let line = self.claude_message(&json!([{"type":"text","text":text}]));
                self.emit(&line);
            }
            Mode::Opencode => self.emit(&json!({"type":"text","timestamp":0,"sessionID":self.session,"part":{"type":"text","text":text}})),
        }
    }

    fn tool(&mut self, command: &str, output: &str, ok: bool) {
        self.turns += 1;
        match self.mode {
            Mode::Claude => {
                let id = format!("toolu_{}", self.turns);
                let line = self.claude_message(
                    &json!([{"type":"tool_use","id":id,"name":"Bash","input":{"command":command}}]),
                );
                self.emit(&line);
                self.emit(&json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":id,"content":output,"is_error":!ok}]},"session_id":self.session}));
            }
            Mode::Opencode => {
                self.emit(&json!({"type":"tool_use","timestamp":0,"sessionID":self.session,"part":{"tool":"bash","state":{"status":"completed","input":{"command":command},"output":output}}}));
                self.emit(&json!({"type":"step_finish","timestamp":0,"sessionID":self.session,"part":{"reason":"tool-calls","cost":0.001,"tokens":{"input":100,"output":10}}}));
            }
        }
    }

    /// An MCP tool call and its result, as the CLI prints them.
    fn mcp_tool(&mut self, call: &str, output: &str, ok: bool) {
        self.turns += 1;
        let mut input: Value = serde_json::from_str(call).unwrap_or_else(|_| json!({}));
        let tool = input
            .as_object_mut()
            .and_then(|o| o.remove("tool"))
            .and_then(|t| t.as_str().map(chorus_catalog::wire_name))
            .unwrap_or_default();
        match self.mode {
            Mode::Claude => {
                let id = format!("toolu_{}", self.turns);
                let name = format!("mcp__chorus__{tool}");
                let line = self.claude_message(
                    &json!([{"type":"tool_use","id":id,"name":name,"input":input}]),
                );
                self.emit(&line);
                self.emit(&json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":id,"content":output,"is_error":!ok}]},"session_id":self.session}));
            }
            Mode::Opencode => {
                let name = format!("chorus_{tool}");
                self.emit(&json!({"type":"tool_use","timestamp":0,"sessionID":self.session,"part":{"tool":name,"state":{"status":"completed","input":input,"output":output}}}));
                self.emit(&json!({"type":"step_finish","timestamp":0,"sessionID":self.session,"part":{"reason":"tool-calls","cost":0.001,"tokens":{"input":100,"output":10}}}));
            }
        }
    }

    fn finish(&self) {
        match self.mode {
            Mode::Claude => self.emit(&json!({"type":"result","subtype":"success","is_error":false,"result":self.last_text,"session_id":self.session,"num_turns":self.turns + 1,"total_cost_usd":0.0042,"usage":{"input_tokens":120,"output_tokens":30}})),
            Mode::Opencode => self.emit(&json!({"type":"step_finish","timestamp":0,"sessionID":self.session,"part":{"reason":"stop","cost":0.001,"tokens":{"input":100,"output":10}}})),
        }
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The chorus-tools path the CLI's permission rules allow.
fn chorus_tools(mode: Mode, args: &[String]) -> Option<String> {
    match mode {
        Mode::Claude => {
            let rule = flag(args, "--allowedTools")?;
            let start = rule.find("Bash(")? + 5;
            let rest = &rule[start..];
            Some(rest[..rest.find(" *)")?].to_owned())
        }
        Mode::Opencode => {
            let config: Value =
                serde_json::from_str(&std::env::var("OPENCODE_CONFIG_CONTENT").ok()?).ok()?;
            let rules = config.pointer("/permission/bash")?.as_object()?;
            rules
                .iter()
                .find(|(pattern, action)| {
                    pattern.as_str() != "*" && action.as_str() == Some("allow")
                })
                .map(|(pattern, _)| pattern.trim_end_matches(" '*'").to_owned())
        }
    }
}

/// The MCP server the CLI was given: its command and arguments.
fn mcp_server(mode: Mode, args: &[String]) -> Option<Vec<String>> {
    let command: Vec<String> = match mode {
        Mode::Claude => {
            let config: Value = serde_json::from_str(&flag(args, "--mcp-config")?).ok()?;
            let server = config.pointer("/mcpServers/chorus")?;
            let mut command = vec![server.get("command")?.as_str()?.to_owned()];
            command.extend(
                server
                    .get("args")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_owned)),
            );
            command
        }
        Mode::Opencode => {
            let config: Value =
                serde_json::from_str(&std::env::var("OPENCODE_CONFIG_CONTENT").ok()?).ok()?;
            config
                .pointer("/mcp/chorus/command")?
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect()
        }
    };
    (!command.is_empty()).then_some(command)
}

/// A session with the CLI's MCP server.
struct Mcp {
    runtime: tokio::runtime::Runtime,
    client: rmcp::service::RunningService<rmcp::RoleClient, ()>,
}

impl Mcp {
    fn start(command: &[String]) -> Result<Self, String> {
        use rmcp::ServiceExt as _;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let mut server = tokio::process::Command::new(&command[0]);
        server.args(&command[1..]);
        let client = runtime.block_on(async {
            let transport =
                rmcp::transport::TokioChildProcess::new(server).map_err(|e| e.to_string())?;
            ().serve(transport).await.map_err(|e| e.to_string())
        })?;
        Ok(Self { runtime, client })
    }

    /// Ends the session as a CLI does when it is done: the server's stdin is
    /// closed and it exits on its own (its spans exported).
    fn end(self) {
        let Self { runtime, client } = self;
        let _ = runtime.block_on(client.cancel());
    }

    /// Calls the tool of the catalog call `call` (`{"tool", ...arguments}`):
    /// the result's text and whether it is not an error.
    fn call(&self, call: &str) -> (String, bool) {
        let Ok(Value::Object(mut arguments)) = serde_json::from_str::<Value>(call) else {
            return (format!("not a JSON object: {call}"), false);
        };
        let tool = arguments
            .remove("tool")
            .and_then(|t| t.as_str().map(chorus_catalog::wire_name))
            .unwrap_or_default();
        let request = rmcp::model::CallToolRequestParams::new(tool).with_arguments(arguments);
        match self.runtime.block_on(self.client.call_tool(request)) {
            Ok(result) => {
                let text = result
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect::<Vec<_>>()
                    .join("\n");
                (text, result.is_error != Some(true))
            }
            Err(e) => (e.to_string(), false),
        }
    }
}

/// What `save` keeps of an MCP call: what a one-shot chorus-tools call would
/// have printed (`{"output", "error"?, "metadata"}` on stdout; the error's
/// `{"code", "message"}` on stderr and exit 1 when the call failed), so that
/// a script reads the same either way.
fn as_one_shot(text: &str, ok: bool) -> Value {
    let answer: Value =
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    if ok {
        return json!({
            "code": 0,
            "stdout": json!({"output": answer, "metadata": {}}).to_string(),
            "stderr": "",
        });
    }
    let error = answer
        .get("error")
        .cloned()
        .unwrap_or_else(|| json!({"code": "unavailable", "message": text}));
    let output = answer.get("output").cloned().unwrap_or(Value::Null);
    json!({
        "code": 1,
        "stdout": json!({"output": output, "error": error, "metadata": {}}).to_string(),
        "stderr": error.to_string(),
    })
}

/// Starts the escapees of `marker` and returns once they all run; with
/// `holding`, they keep this process's stdout and stderr open.
fn stubborn(marker: &str, holding: bool) -> std::io::Result<()> {
    let script = format!(
        "{} {}",
        chorus_sandbox::testing::escapees(marker),
        chorus_sandbox::testing::await_escapees(marker)
    );
    let pipe = || {
        if holding {
            Stdio::inherit()
        } else {
            Stdio::null()
        }
    };
    let status = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(pipe())
        .stderr(pipe())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the escapees did not start: {status}"
        )))
    }
}

/// `name` in HOME unless it is absolute.
/// Locks `path` for as long as this process lives; notes in
/// `<path>.overlap` when another process holds it.
fn exclusive(path: &std::path::Path) {
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
    else {
        eprintln!("fake-agent-cli: cannot open {}", path.display());
        return;
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        // Held until the process exits.
        Ok(held) => std::mem::forget(held),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let mut overlap = path.as_os_str().to_owned();
            overlap.push(".overlap");
            let note = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(std::path::PathBuf::from(overlap))
                .and_then(|mut f| writeln!(f, "{} {nanos}", std::process::id()));
            if let Err(e) = note {
                eprintln!("fake-agent-cli: cannot note an overlap: {e}");
            }
        }
    }
}

fn in_home(name: &str) -> std::path::PathBuf {
    let name = std::path::Path::new(name.trim());
    if name.is_absolute() {
        return name.to_path_buf();
    }
    std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(name)
}

/// Writes `content` to `path` whole (through a temporary file).
fn write_whole(path: &std::path::Path, content: &str) {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::write(&tmp, content);
    let _ = std::fs::rename(tmp, path);
}

fn hang() -> ! {
    // Ignore SIGTERM the portable way: a shell that traps it replaces us.
    let _ = Command::new("sh")
        .args(["-c", "trap '' TERM; while :; do sleep 1000; done"])
        .status();
    loop {
        std::thread::park();
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = if args.first().map(String::as_str) == Some("run") {
        Mode::Opencode
    } else {
        Mode::Claude
    };
    let (message, resume) = match mode {
        Mode::Claude => (
            flag(&args, "-p").unwrap_or_default(),
            flag(&args, "--resume"),
        ),
        Mode::Opencode => (
            args.last().cloned().unwrap_or_default(),
            flag(&args, "--session"),
        ),
    };
    // The script lives in the task description, which is in the first message;
    // a resumed session still has it (the reminder is the new message), so a
    // resumed run reads the script from its recorded first message.
    let script_source = match &resume {
        None => message.clone(),
        Some(_) => std::fs::read_to_string(format!(
            "{}/first-message",
            std::env::var("HOME").unwrap_or_default()
        ))
        .unwrap_or_default(),
    };
    if resume.is_none() {
        let _ = std::fs::write(
            format!(
                "{}/first-message",
                std::env::var("HOME").unwrap_or_default()
            ),
            &message,
        );
    }
    let prefix = if resume.is_some() {
        "fake-resume:"
    } else {
        "fake:"
    };
    let mut out = Out {
        mode,
        session: resume
            .clone()
            .unwrap_or_else(|| format!("sess-{}", std::process::id())),
        last_text: String::new(),
        turns: 0,
        messages: 0,
    };
    match mode {
        Mode::Claude => out.emit(&json!({"type":"system","subtype":"init","session_id":out.session,"tools":["Bash"],"model":flag(&args, "--model")})),
        Mode::Opencode => out.emit(&json!({"type":"step_start","timestamp":0,"sessionID":out.session,"part":{"type":"step-start"}})),
    }
    let mut last_call = json!(null);
    let mut mcp: Option<Mcp> = None;
    for line in script_source.lines() {
        // The message starts with "Task <id>: <description>", so a step may
        // follow text on its line (after a space); a step inside a handoff's
        // prompt (a JSON string on the line) is its child's, not this CLI's.
        let Some(at) = line
            .match_indices(prefix)
            .map(|(at, _)| at)
            .find(|at| *at == 0 || line[..*at].ends_with(' '))
        else {
            continue;
        };
        let step = &line[at + prefix.len()..];
        let step = step.trim();
        let (verb, rest) = step.split_once(' ').unwrap_or((step, ""));
        match verb {
            "record" => {
                let env: serde_json::Map<String, Value> = std::env::vars()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                let record = json!({
                    "pid": std::process::id(),
                    "uid": nix::unistd::getuid().as_raw(),
                    "argv": args,
                    "cwd": std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
                    "env": env,
                });
                write_whole(&in_home(rest), &record.to_string());
            }
            "call" if mcp_server(mode, &args).is_some() => {
                if mcp.is_none() {
                    let command = mcp_server(mode, &args).unwrap_or_default();
                    match Mcp::start(&command) {
                        Ok(session) => mcp = Some(session),
                        Err(e) => {
                            eprintln!(
                                "fake-agent-cli: cannot start the MCP server {command:?}: {e}"
                            );
                            return ExitCode::from(9);
                        }
                    }
                }
                let Some(session) = &mcp else {
                    return ExitCode::from(9);
                };
                let (text, ok) = session.call(rest.trim());
                last_call = as_one_shot(&text, ok);
                out.mcp_tool(rest.trim(), &text, ok);
            }
            "call" => {
                let Some(program) = chorus_tools(mode, &args) else {
                    eprintln!("fake-agent-cli: no chorus-tools rule in the flags or config");
                    return ExitCode::from(9);
                };
                let result = Command::new(&program)
                    .arg(rest.trim())
                    .stdin(Stdio::null())
                    .output();
                let command = format!("{program} '{}'", rest.trim());
                match result {
                    Ok(output) => {
                        last_call = json!({
                            "code": output.status.code(),
                            "stdout": String::from_utf8_lossy(&output.stdout),
                            "stderr": String::from_utf8_lossy(&output.stderr),
                        });
                        let text = if output.status.success() {
                            String::from_utf8_lossy(&output.stdout).into_owned()
                        } else {
                            String::from_utf8_lossy(&output.stderr).into_owned()
                        };
                        out.tool(&command, text.trim(), output.status.success());
                    }
                    Err(e) => out.tool(&command, &format!("cannot run {program}: {e}"), false),
                }
            }
            // chorus-tools with the call, left running: the CLI goes on (and
            // may report and exit) while the call runs.
            "call-background" => {
                let Some(program) = chorus_tools(mode, &args) else {
                    eprintln!("fake-agent-cli: no chorus-tools rule in the flags or config");
                    return ExitCode::from(9);
                };
                if let Err(e) = Command::new(&program)
                    .arg(rest.trim())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                {
                    eprintln!("fake-agent-cli: cannot run {program}: {e}");
                    return ExitCode::from(9);
                }
            }
            // chorus-tools with the call, again until it succeeds (a wait
            // on what another call does; up to 30 s).
            "call-until" => {
                let Some(program) = chorus_tools(mode, &args) else {
                    eprintln!("fake-agent-cli: no chorus-tools rule in the flags or config");
                    return ExitCode::from(9);
                };
                for _ in 0..1500 {
                    let ok = Command::new(&program)
                        .arg(rest.trim())
                        .stdin(Stdio::null())
                        .output()
                        .is_ok_and(|o| o.status.success());
                    if ok {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            "shell" => {
                let result = Command::new("sh")
                    .args(["-c", rest.trim()])
                    .stdin(Stdio::null())
                    .output();
                match result {
                    Ok(output) => {
                        let text = format!(
                            "{}{}",
                            String::from_utf8_lossy(&output.stdout),
                            String::from_utf8_lossy(&output.stderr)
                        );
                        last_call = json!({
                            "code": output.status.code(),
                            "stdout": String::from_utf8_lossy(&output.stdout),
                            "stderr": String::from_utf8_lossy(&output.stderr),
                        });
                        out.tool(rest.trim(), text.trim(), output.status.success());
                    }
                    Err(e) => out.tool(rest.trim(), &format!("cannot run sh: {e}"), false),
                }
            }
            "save" => write_whole(&in_home(rest), &last_call.to_string()),
            "stamp" => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let _ = std::fs::write(in_home(rest), nanos.to_string());
            }
            "wait" => {
                let fifo = in_home(rest);
                if let Err(e) =
                    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666))
                {
                    eprintln!("fake-agent-cli: cannot make {}: {e}", fifo.display());
                    return ExitCode::from(8);
                }
                out.say(&format!("waiting on {}", rest.trim()));
                let _ = std::fs::read(&fifo);
            }
            "say" => out.say(rest.trim()),
            "stderr" => eprintln!("{}", rest.trim()),
            "exit" => {
                if let Some(session) = mcp.take() {
                    session.end();
                }
                out.finish();
                return ExitCode::from(rest.trim().parse::<u8>().unwrap_or(1));
            }
            "orphans" => {
                if let Err(e) = stubborn(rest.trim(), true) {
                    eprintln!("fake-agent-cli: cannot start children: {e}");
                    return ExitCode::from(8);
                }
            }
            "stubborn" => {
                if let Err(e) = stubborn(rest.trim(), false) {
                    eprintln!("fake-agent-cli: cannot start children: {e}");
                    return ExitCode::from(8);
                }
                out.say("stubborn children started");
                hang();
            }
            "exclusive" => exclusive(&in_home(rest)),
            "hang" => hang(),
            _ => {
                eprintln!("fake-agent-cli: unknown script step '{verb}'");
                return ExitCode::from(7);
            }
        }
    }
    if let Some(session) = mcp.take() {
        session.end();
    }
    out.finish();
    ExitCode::SUCCESS
}
