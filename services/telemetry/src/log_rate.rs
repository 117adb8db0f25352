//! A rate limit of log lines: a flood of refused calls or cut connections
//! must not become a flood of log lines. A line that is logged carries how
//! many were left out since the one before it.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

// tokio's clock, so tests can pause it.
use tokio::time::Instant;

/// At most `per_second` lines a second.
#[derive(Debug)]
pub struct LogRate {
    per_second: u32,
    /// When the current second began, lines logged in it, lines not logged
    /// since the last one that was.
    window: Mutex<(Instant, u32, u64)>,
}

impl LogRate {
    pub fn new(per_second: u32) -> Self {
        Self {
            per_second,
            window: Mutex::new((Instant::now(), 0, 0)),
        }
    }

    /// Whether this line is logged, and then how many were not since the last
    /// one that was.
    pub fn admit(&self) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let (began, logged, unlogged) = &mut *window;
        if began.elapsed() >= Duration::from_secs(1) {
            *began = Instant::now();
            *logged = 0;
        }
        if *logged >= self.per_second {
            *unlogged += 1;
            return None;
        }
        *logged += 1;
        Some(std::mem::take(unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_rate_are_counted_into_the_next_one_logged() {
        let rate = LogRate::new(3);
        let admitted: Vec<Option<u64>> = (0..5).map(|_| rate.admit()).collect();
        assert_eq!(admitted, vec![Some(0), Some(0), Some(0), None, None]);
        rate.window.lock().expect("window").0 -= Duration::from_secs(1);
        assert_eq!(
            rate.admit(),
            Some(2),
            "the next second's first line says 2 were left out"
        );
    }
}
