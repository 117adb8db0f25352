//! The monitor's wait: signals, and the run's fence.
//!
//! A fence is a file outside every sandbox, written by the service that drives
//! the run: the time (milliseconds since the Unix epoch) until which the run
//! may go on. The service moves it forward each time it proves it still holds
//! the run (a heartbeat reached the database); a service that is paused,
//! partitioned from its database or hung never does. The monitor reads the
//! file at least every [`CHECK`], and once the time has passed — or the file
//! is gone or unreadable — it kills the sandbox by itself: no other process,
//! and nothing the service does or fails to do, is needed for the run's
//! processes to stop before another replica may take the run over.
//!
//! At the same pace the monitor adds up what the sandbox's run has written
//! ([`Budget`]) and kills its processes once it is over their limit.

use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::budget::{Budget, Stop};

/// How often the monitor reads the fence at least.
pub const CHECK: Duration = Duration::from_millis(100);

/// What the monitor waited for.
#[derive(Debug)]
pub enum Event {
    Signal(Signal),
    /// The fence is down: the reason.
    Fenced(String),
    /// The processes wrote more than their limit: how much.
    WroteTooMuch(String),
    /// The processes held more memory than their limit (no memory cgroup).
    OverMemory(String),
    /// The watched descriptor can be read.
    Ready,
}

/// Waits for the blocked signals of `mask`, watches the fence and the budget.
pub struct Waiter {
    signals: SignalFd,
    fence: Option<PathBuf>,
    budget: Option<Budget>,
    /// When the budget is next added up (at once first: the run may have
    /// spent it in its other sandboxes).
    budget_due: Instant,
    /// Another descriptor to wait for (until it hangs up).
    watched: Option<RawFd>,
}

impl Waiter {
    /// # Errors
    /// The signal descriptor cannot be made.
    pub fn new(mask: &SigSet, fence: Option<&Path>, budget: Option<Budget>) -> nix::Result<Self> {
        Ok(Self {
            signals: SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC)?,
            fence: fence.map(Path::to_path_buf),
            budget,
            budget_due: Instant::now(),
            watched: None,
        })
    }

    /// Also waits for `fd` to be readable ([`Event::Ready`]); the caller
    /// keeps it open while this waits.
    pub fn watch(&mut self, fd: RawFd) {
        self.watched = Some(fd);
    }

    /// Adds up the budget once more, when the sandbox's processes are gone:
    /// its run's ledger then holds all they wrote, even what they wrote
    /// after the last look. Why the run is over its limit, if it now is.
    pub fn settle(&mut self) -> Option<String> {
        self.budget.as_mut().and_then(Budget::settle)
    }

    /// The next signal, the fence going down, or the budget spent.
    pub fn next(&mut self) -> Event {
        loop {
            if let Some(why) = self.fence.as_deref().and_then(down) {
                return Event::Fenced(why);
            }
            if self.budget.is_some() && Instant::now() >= self.budget_due {
                self.budget_due = Instant::now() + CHECK;
                match self.budget.as_mut().and_then(Budget::check) {
                    Some(Stop::Wrote(why)) => return Event::WroteTooMuch(why),
                    Some(Stop::Memory(why)) => return Event::OverMemory(why),
                    None => {}
                }
            }
            let timeout = if self.fence.is_some() || self.budget.is_some() {
                PollTimeout::try_from(CHECK).unwrap_or(PollTimeout::ZERO)
            } else {
                PollTimeout::NONE
            };
            // SAFETY: the caller of `watch` keeps the descriptor open.
            #[allow(unsafe_code)]
            let watched = self.watched.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
            let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            if let Some(fd) = watched {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Event::Fenced(format!("cannot wait for signals: {e}")),
            }
            if let Some(events) = fds.get(1).and_then(PollFd::revents) {
                if events.contains(PollFlags::POLLIN) {
                    return Event::Ready;
                }
                if events.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
                {
                    self.watched = None;
                }
            }
            if let Ok(Some(info)) = self.signals.read_signal()
                && let Ok(signal) = Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0))
            {
                return Event::Signal(signal);
            }
        }
    }
}

/// Why the fence at `path` is down, if it is: its time has passed, or it
/// cannot be read as a time.
pub fn down(path: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            return Some(format!(
                "the run's fence {} cannot be read ({e})",
                path.display()
            ));
        }
    };
    let Ok(until) = text.trim().parse::<u128>() else {
        return Some(format!("the run's fence {} holds no time", path.display()));
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    (now >= until).then(|| {
        format!(
            "the run's fence ran out {} ms ago: its service could not prove it still holds the run",
            now - until
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now_ms() -> u128 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_millis()
    }

    #[test]
    fn a_fence_is_down_once_its_time_passed_or_it_cannot_be_read() {
        let dir = tempfile::tempdir().expect("dir");
        let fence = dir.path().join("run");
        assert!(down(&fence).is_some_and(|w| w.contains("cannot be read")));
        std::fs::write(&fence, "soon").expect("write");
        assert!(down(&fence).is_some_and(|w| w.contains("holds no time")));
        std::fs::write(&fence, (now_ms() + 60_000).to_string()).expect("write");
        assert_eq!(down(&fence), None);
        std::fs::write(&fence, (now_ms() - 5).to_string()).expect("write");
        assert!(down(&fence).is_some_and(|w| w.contains("ran out")));
    }
}
