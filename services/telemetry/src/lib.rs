//! What every Chorus service binary does the same way: logging set-up and the
//! signals that start a graceful shutdown. (OpenTelemetry export joins here.)
#![forbid(unsafe_code)]

use tracing::warn;

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

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
///
/// The handlers are installed when this is called, not when the future is first
/// polled: call it before the service starts serving, so a signal that arrives
/// right after start-up still leads to a graceful shutdown. Must be called inside
/// a tokio runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            (term, int) => {
                let error = term
                    .err()
                    .or(int.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                warn!(%error, "cannot listen for SIGTERM or SIGINT; the service stops only when killed");
                std::future::pending::<()>().await;
            }
        }
    }
}
