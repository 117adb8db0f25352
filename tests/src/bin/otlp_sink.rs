//! The in-process OTLP receiver of the tests ([`chorus_tests::otlp`]) as a
//! program of its own, standing in for an OpenTelemetry Collector in the
//! container tests (the official collector image cannot be pulled there). It
//! prints what arrives on stdout, one JSON object a line:
//!
//! - `{"signal":"span","service":…,"trace_id":…,"span_id":…,"parent_span_id":…,"name":…,"attributes":{…}}`
//! - `{"signal":"metric","service":…,"name":…,"attributes":{…},"value":…}`
//!
//! `otlp-sink [listen address]` (default `0.0.0.0:4317`); serves until SIGTERM or SIGINT.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use chorus_tests::otlp::Receiver;
use serde_json::{Value, json};

fn print(line: &Value) {
    let mut out = std::io::stdout().lock();
    // A closed stdout leaves nobody to tell.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn serve(addr: &str) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let receiver = Receiver::start_on(listener);
    eprintln!("otlp-sink listening on {addr}");
    let (mut spans, mut points) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = tick.tick() => {}
        }
        let received = receiver.spans();
        for span in received.iter().skip(spans) {
            print(&json!({
                "signal": "span",
                "service": span.service,
                "trace_id": span.trace_id,
                "span_id": span.span_id,
                "parent_span_id": span.parent_span_id,
                "name": span.name,
                "attributes": span.attributes,
            }));
        }
        spans = received.len();
        let received = receiver.points();
        for point in received.iter().skip(points) {
            print(&json!({
                "signal": "metric",
                "service": point.service,
                "name": point.metric,
                "attributes": point.attributes,
                "value": point.value,
            }));
        }
        points = received.len();
    }
}

fn main() -> ExitCode {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "0.0.0.0:4317".to_owned());
    let served = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| runtime.block_on(serve(&addr)));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("otlp-sink: {e}");
            ExitCode::FAILURE
        }
    }
}
