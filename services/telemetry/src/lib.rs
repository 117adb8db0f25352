//! What every Chorus service binary does the same way: logging set-up and the
//! signals that start a graceful shutdown. (OpenTelemetry export joins here.)
#![forbid(unsafe_code)]

mod shutdown;

pub use shutdown::{Shutdown, StopSignal, shutdown_signal};

/// How logs are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber: `RUST_LOG` filter (default `info`), text or JSON on stderr.
pub fn init_logging(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
