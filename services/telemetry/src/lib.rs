//! What every Chorus binary does the same way: logs, OpenTelemetry traces and
//! metrics (exported over OTLP when the standard `OTEL_*` variables say so),
//! W3C trace context across gRPC calls and processes, and the signals that
//! start a graceful shutdown.
#![forbid(unsafe_code)]

pub mod grpc;
mod logs;
pub mod metrics;
mod otel;
pub mod propagation;

pub use metrics::metrics;
pub use otel::{EXPORT_ENV, Export, Telemetry, init, init_quiet};

use tracing::warn;

/// How logs are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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
