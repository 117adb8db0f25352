//! Following across a break: when the orchestrator restarts, sheds load or a
//! balancer moves the connection to another replica, a followed stream is
//! opened again — after a backoff, from the last event or cursor seen, so
//! nothing is missed or shown twice — for as long as it keeps failing for
//! less than [`GIVE_UP`].

use std::time::{Duration, Instant};

use tonic::{Code, Status};

use crate::output::Out;

/// How long a stream may keep failing before following gives up.
pub const GIVE_UP: Duration = Duration::from_secs(600);
/// The waits between tries: doubling from a quarter second to four.
const FIRST_WAIT: Duration = Duration::from_millis(250);
const LONGEST_WAIT: Duration = Duration::from_secs(4);

/// Whether a call or stream that failed with `status` is worth trying again:
/// the server went away or was busy, the connection dropped. A refused key,
/// a task that is gone or a wrong request fail at once.
pub fn passing(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Cancelled
    )
}

/// The tries of one followed stream.
#[derive(Debug)]
pub struct Backoff {
    wait: Duration,
    failing_since: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            wait: FIRST_WAIT,
            failing_since: None,
        }
    }
}

impl Backoff {
    /// The stream delivered: the next break starts from the shortest wait.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// After `status` broke what is followed (`what`, resuming at `from`):
    /// says so and waits before the next try; Err(status) when it is not
    /// worth trying again, or has failed for [`GIVE_UP`].
    pub async fn after(
        &mut self,
        status: Status,
        out: &Out,
        what: &str,
        from: &str,
    ) -> Result<(), Status> {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if !passing(&status) || since.elapsed() >= GIVE_UP {
            return Err(status);
        }
        out.note(&format!(
            "{what} broke ({}: {}); following again from {from} in {:.1} s",
            status.code().description(),
            status.message(),
            self.wait.as_secs_f64()
        ));
        tokio::time::sleep(self.wait).await;
        self.wait = (self.wait * 2).min(LONGEST_WAIT);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_server_that_went_away_or_was_busy_is_tried_again() {
        for code in [Code::Unavailable, Code::Unknown, Code::ResourceExhausted] {
            assert!(passing(&Status::new(code, "")), "{code:?}");
        }
        for code in [
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::NotFound,
            Code::InvalidArgument,
        ] {
            assert!(!passing(&Status::new(code, "")), "{code:?}");
        }
    }
}
