//! A run's time limit, which stops while the run waits for a handoff.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

/// A run's time limit. The clock stops while the run waits for a handoff: a
/// run's timeout bounds its own work, each handoff has its own.
#[derive(Debug, Clone)]
pub struct RunClock {
    state: Arc<watch::Sender<Clock>>,
}

#[derive(Debug, Clone, Copy)]
enum Clock {
    Running { deadline: Instant },
    Paused { left: Duration },
}

impl RunClock {
    /// A clock that runs out `timeout` from now.
    pub fn start(timeout: Duration) -> Self {
        Self {
            state: Arc::new(watch::Sender::new(Clock::Running {
                deadline: Instant::now() + timeout,
            })),
        }
    }

    /// Stops the clock (a handoff started; a run waits for one at a time).
    /// Returns false when it was stopped already.
    pub fn pause(&self) -> bool {
        let mut paused = false;
        self.state.send_modify(|clock| {
            if let Clock::Running { deadline } = *clock {
                *clock = Clock::Paused {
                    left: deadline.saturating_duration_since(Instant::now()),
                };
                paused = true;
            }
        });
        paused
    }

    /// Starts the clock again with the time that was left.
    pub fn resume(&self) {
        self.state.send_modify(|clock| {
            if let Clock::Paused { left } = *clock {
                *clock = Clock::Running {
                    deadline: Instant::now() + left,
                };
            }
        });
    }

    /// Whether the clock is stopped (a handoff runs).
    pub fn is_paused(&self) -> bool {
        matches!(*self.state.borrow(), Clock::Paused { .. })
    }

    /// The time left.
    pub fn left(&self) -> Duration {
        match *self.state.borrow() {
            Clock::Running { deadline } => deadline.saturating_duration_since(Instant::now()),
            Clock::Paused { left } => left,
        }
    }

    /// Completes when the time is up (never while paused).
    pub async fn expired(&self) {
        let mut rx = self.state.subscribe();
        loop {
            let clock = *rx.borrow_and_update();
            match clock {
                Clock::Running { deadline } => tokio::select! {
                    () = sleep_until(deadline) => return,
                    changed = rx.changed() => if changed.is_err() {
                        sleep_until(deadline).await;
                        return;
                    },
                },
                Clock::Paused { .. } => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the clock has run out, without waiting.
    async fn expired(clock: &RunClock) -> bool {
        tokio::select! {
            biased;
            () = clock.expired() => true,
            () = std::future::ready(()) => false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_stops_while_paused_and_keeps_what_was_left() {
        let clock = RunClock::start(Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(clock.pause(), "the first pause stops it");
        assert!(!clock.pause(), "a second pause finds it stopped");
        // An hour of handoff costs the run nothing.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(!expired(&clock).await);
        clock.resume();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!expired(&clock).await, "1 s of the 10 is left");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(expired(&clock).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_wakes_when_the_clock_runs_out_after_a_resume() {
        let clock = RunClock::start(Duration::from_secs(2));
        clock.pause();
        let waiter = {
            let clock = clock.clone();
            tokio::spawn(async move { clock.expired().await })
        };
        tokio::time::advance(Duration::from_secs(100)).await;
        assert!(!waiter.is_finished(), "no expiry while paused");
        clock.resume();
        tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("expired within the 2 s left")
            .expect("waiter");
    }
}
