//! The replica's fence: one file, in a directory of this process's own, that
//! every CLI agent's launcher watches (see `chorus_sandbox::fence`). Each
//! heartbeat that reaches the database moves it to two thirds of a lease after
//! the heartbeat began — before any lease it wrote runs out, so before any
//! other replica may claim one of its runs. A replica that is paused, cut from
//! its database or hung moves it no more, and its runs' processes are killed
//! by their launchers at that time, with nobody's help.
//!
//! A fence that fell is never raised again: the next heartbeat holds a new
//! file (a new generation) and removes the old one. A launcher that did not
//! look while the fence was down — frozen with its replica, a host or VM
//! suspended — finds its file gone when it wakes and kills its processes,
//! even when the replica's heartbeat reached the database first: another
//! replica may have claimed the run meanwhile.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chorus_sandbox::fence::{Fences, now_ms};

use crate::domain::fence_span;
use tokio::sync::watch;

/// The fence's name in its directory, of generation `generation`.
fn name(generation: u64) -> String {
    format!("replica-{generation}")
}

/// This process's fence.
#[derive(Debug)]
pub struct ReplicaFence {
    fences: Fences,
    /// The generation of the file launchers started now watch.
    generation: std::sync::Mutex<u64>,
    /// Until when (ms since the epoch) the file holds the fence; 0: down.
    until: watch::Sender<i64>,
}

impl ReplicaFence {
    /// Makes the directory; the fence is down until [`ReplicaFence::hold`].
    ///
    /// # Errors
    /// The directory cannot be made.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            fences: Fences::create(dir)?,
            generation: std::sync::Mutex::new(0),
            until: watch::Sender::new(0),
        })
    }

    fn generation(&self) -> std::sync::MutexGuard<'_, u64> {
        self.generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The file a launcher started now watches.
    pub fn path(&self) -> PathBuf {
        self.fences.path(&name(*self.generation()))
    }

    /// Holds the fence for [`fence_span`] of `lease` after `since_ms` (when
    /// the write that extended the leases by `lease` began). A fence that
    /// is down (by its time, or taken down) is not raised again: a new one
    /// is, for the launchers started from now on. Whether it was down.
    ///
    /// # Errors
    /// The file cannot be written (the fence then runs out at its last time).
    pub fn hold(&self, since_ms: i64, lease: Duration) -> std::io::Result<bool> {
        let span = i64::try_from(fence_span(lease).as_millis()).unwrap_or(i64::MAX);
        let until = since_ms.saturating_add(span);
        let mut generation = self.generation();
        let was_down = *self.until.borrow() <= now_ms();
        if was_down {
            self.fences.remove(&name(*generation));
            *generation += 1;
        }
        self.fences.set(&name(*generation), until)?;
        self.until.send_replace(until);
        Ok(was_down)
    }

    /// Takes the fence down: every CLI agent of this process dies.
    pub fn drop_all(&self) {
        let generation = self.generation();
        self.until.send_replace(0);
        self.fences.remove(&name(*generation));
    }

    /// Whether the fence is up now: a launcher started now would run its
    /// program.
    pub fn held(&self) -> bool {
        *self.until.borrow() > now_ms()
    }

    /// Waits up to `patience` for the fence to be up (a heartbeat that
    /// reached the database moved it); whether it is.
    pub async fn wait_held(&self, patience: Duration) -> bool {
        let mut until = self.until.subscribe();
        let up = until.wait_for(|until| *until > now_ms());
        matches!(tokio::time::timeout(patience, up).await, Ok(Ok(_)))
    }

    /// Removes the directory (at shutdown, once every run has stopped).
    pub fn remove(&self) {
        self.fences.remove_all();
    }
}

/// Where a replica instance keeps its fence: its own directory under the
/// system's temporary directory (never shared, not even by a process with the
/// same replica id).
pub fn dir_for(instance: &str) -> PathBuf {
    chorus_sandbox::fence::dir_for("orchestrator", instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_are_driven_only_while_the_fence_is_up() {
        let dir = tempfile::tempdir().expect("dir");
        let fence =
            std::sync::Arc::new(ReplicaFence::create(&dir.path().join("f")).expect("fence"));
        let lease = Duration::from_secs(30);
        // Down until a heartbeat holds it.
        assert!(!fence.held());
        assert!(!fence.wait_held(Duration::from_millis(10)).await);
        // A heartbeat that reached the database while a driver waits.
        let waiting = tokio::spawn({
            let fence = std::sync::Arc::clone(&fence);
            async move { fence.wait_held(Duration::from_secs(30)).await }
        });
        fence.hold(now_ms(), lease).expect("hold");
        assert!(waiting.await.expect("waited"));
        assert!(fence.held());
        // A hold whose time has passed (a replica that was paused) is down.
        fence.hold(now_ms() - 60_000, lease).expect("hold");
        assert!(!fence.held());
        fence.hold(now_ms(), lease).expect("hold");
        fence.drop_all();
        assert!(!fence.held());
    }

    /// The time in a fence file, as a launcher reads it; None: no file.
    fn time_in(path: &Path) -> Option<i64> {
        let text = std::fs::read_to_string(path).ok()?;
        Some(text.trim().parse().expect("a time"))
    }

    #[test]
    fn a_fence_that_fell_is_never_raised_again_for_the_launchers_that_watched_it() {
        let dir = tempfile::tempdir().expect("dir");
        let fence = ReplicaFence::create(&dir.path().join("f")).expect("fence");
        let lease = Duration::from_secs(30);
        fence.hold(now_ms(), lease).expect("hold");
        let first = fence.path();
        // Held on: the same file, moved forward.
        assert!(!fence.hold(now_ms(), lease).expect("hold"), "it was up");
        assert_eq!(fence.path(), first);
        // The replica and its launchers were frozen past the fence (a
        // suspended VM); the replica's heartbeat reaches the database
        // before a launcher looks again. That launcher must find its
        // fence down, not held again.
        fence.hold(now_ms() - 60_000, lease).expect("hold");
        assert!(fence.hold(now_ms(), lease).expect("hold"), "it was down");
        assert_eq!(time_in(&first), None, "a fallen fence was raised again");
        let second = fence.path();
        assert_ne!(second, first);
        assert!(time_in(&second).expect("the new fence") > now_ms());
        // Taken down and held again: the same.
        fence.drop_all();
        fence.hold(now_ms(), lease).expect("hold");
        assert_eq!(
            time_in(&second),
            None,
            "a fence taken down was raised again"
        );
        assert!(fence.held());
    }
}
