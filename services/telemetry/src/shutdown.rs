//! The signals that stop a service: the first SIGTERM or SIGINT starts the
//! graceful shutdown (health NOT_SERVING, the drain, then the ordered stop);
//! a second one, while that runs, ends the process at once.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{error, warn};

/// A stop signal the process received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSignal {
    Terminate,
    Interrupt,
}

impl ShutdownSignal {
    /// The exit status of a process ended by this signal at once: 128 plus
    /// the signal's number (143 for SIGTERM, 130 for SIGINT), as shells report it.
    pub fn exit_code(self) -> i32 {
        128 + match self {
            Self::Terminate => 15,
            Self::Interrupt => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Terminate => "SIGTERM",
            Self::Interrupt => "SIGINT",
        }
    }
}

/// The SIGTERM and SIGINT a process receives, counted: [`Shutdown::requested`]
/// resolves on the first, [`Shutdown::forced`] on the second.
///
/// The handlers are installed by [`Shutdown::install`], not when a future is
/// first polled: install before serving, so a signal right after start-up
/// still leads to a graceful shutdown.
#[derive(Debug, Clone)]
pub struct Shutdown {
    seen: watch::Receiver<Vec<ShutdownSignal>>,
}

impl Shutdown {
    /// Installs the handlers. Must be called inside a tokio runtime. When they
    /// cannot be installed, the warning says so and the service stops only
    /// when killed.
    pub fn install() -> Self {
        let (sender, seen) = watch::channel(Vec::new());
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::spawn(async move {
                    loop {
                        let received = tokio::select! {
                            Some(()) = term.recv() => ShutdownSignal::Terminate,
                            Some(()) = int.recv() => ShutdownSignal::Interrupt,
                            else => return,
                        };
                        sender.send_modify(|seen| seen.push(received));
                    }
                });
            }
            (term, int) => {
                let error = term
                    .err()
                    .or(int.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                // The sender goes: the futures stay pending (see `nth`).
                warn!(%error, "cannot listen for SIGTERM or SIGINT; the service stops only when killed");
            }
        }
        Self { seen }
    }

    /// Resolves on the first signal: start the graceful shutdown.
    pub fn requested(&self) -> impl Future<Output = ()> + Send + use<> {
        let nth = self.nth(1);
        async move {
            nth.await;
        }
    }

    /// Resolves on the second signal, with it.
    pub fn forced(&self) -> impl Future<Output = Option<ShutdownSignal>> + Send + use<> {
        self.nth(2)
    }

    /// Ends the process at once, with [`ShutdownSignal::exit_code`], when a second
    /// signal arrives — during the drain, the ordered stop or anything after.
    pub fn exit_on_second_signal(&self) {
        let forced = self.forced();
        tokio::spawn(async move {
            if let Some(signal) = forced.await {
                error!(
                    signal = signal.name(),
                    code = signal.exit_code(),
                    "second stop signal: exiting at once, without finishing the shutdown"
                );
                std::process::exit(signal.exit_code());
            }
        });
    }

    /// Resolves with the `n`th signal (1-based); None if no more can come.
    fn nth(&self, n: usize) -> impl Future<Output = Option<ShutdownSignal>> + Send + use<> {
        let mut seen = self.seen.clone();
        async move {
            let signal = seen
                .wait_for(|signals| signals.len() >= n)
                .await
                .map(|signals| signals.get(n - 1).copied());
            match signal {
                Ok(signal) => signal,
                // No more signals can come (the handlers were not installed).
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT): [`Shutdown::requested`] of a new
/// [`Shutdown`]. Must be called inside a tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send {
    Shutdown::install().requested()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_128_plus_the_signal() {
        assert_eq!(ShutdownSignal::Terminate.exit_code(), 143);
        assert_eq!(ShutdownSignal::Interrupt.exit_code(), 130);
    }

    #[tokio::test]
    async fn the_first_signal_requests_and_the_second_forces() {
        let (sender, seen) = watch::channel(Vec::new());
        let shutdown = Shutdown { seen };
        let requested = tokio::spawn(shutdown.requested());
        let forced = tokio::spawn(shutdown.forced());
        sender.send_modify(|s| s.push(ShutdownSignal::Terminate));
        requested.await.expect("requested");
        assert!(!forced.is_finished(), "one signal does not force");
        sender.send_modify(|s| s.push(ShutdownSignal::Interrupt));
        assert_eq!(
            forced.await.expect("forced"),
            Some(ShutdownSignal::Interrupt)
        );
    }
}
