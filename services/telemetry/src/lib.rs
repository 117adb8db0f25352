//! What every Chorus binary does the same way: logs, OpenTelemetry traces and
//! metrics (exported over OTLP when the standard `OTEL_*` variables say so),
//! W3C trace context across gRPC calls and processes, and the signals that
//! start and hurry a graceful shutdown.
#![forbid(unsafe_code)]

pub mod grpc;
mod log_rate;
mod logs;
pub mod metrics;
mod otel;
pub mod propagation;
mod shutdown;

pub use log_rate::LogRate;
pub use metrics::metrics;
pub use otel::{EXPORT_ENV, Export, Telemetry, init, init_instance, init_quiet};
pub use shutdown::{Shutdown, ShutdownSignal, shutdown_signal};

/// How logs are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
