//! The scripted fake of an OpenAI-compatible API ([`chorus_tests::fake_openai`])
//! as a program of its own, for tests that run Chorus in containers: the model
//! then runs in a container beside the services.
//!
//! `fake-model <listen address> '<script>'`, the script a JSON array of steps,
//! each `{"tool": "<function name>", "arguments": {...}}` (one tool call) or
//! `{"text": "..."}`. Past the end of the script every answer is "done". Serves
//! until SIGTERM or SIGINT; writes one line per request on stderr.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use chorus_tests::fake_openai::{FakeOpenAi, Step};
use serde_json::Value;

fn steps(script: &str) -> Result<Vec<Step>, String> {
    let steps: Vec<Value> =
        serde_json::from_str(script).map_err(|e| format!("the script is not a JSON array: {e}"))?;
    steps
        .into_iter()
        .map(|step| {
            if let Some(tool) = step["tool"].as_str() {
                Ok(Step::tool_call(tool, step["arguments"].clone()))
            } else if let Some(text) = step["text"].as_str() {
                Ok(Step::text(text))
            } else {
                Err(format!("a step is neither a tool call nor text: {step}"))
            }
        })
        .collect()
}

async fn serve(addr: &str, steps: Vec<Step>) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let model = FakeOpenAi::start_on(listener, steps);
    eprintln!("fake model listening on {addr}");
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut seen = 0;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tick.tick() => {
                let requests = model.requests();
                for request in requests.iter().skip(seen) {
                    let tools = request["tools"].as_array().map_or(0, Vec::len);
                    eprintln!("request: model {} with {tools} tools", request["model"]);
                }
                seen = requests.len();
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, script] = args.as_slice() else {
        eprintln!("usage: fake-model <listen address> '<script JSON>'");
        return ExitCode::from(2);
    };
    let served = steps(script).and_then(|steps| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(serve(addr, steps))
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-model: {e}");
            ExitCode::FAILURE
        }
    }
}
