//! The replica's fence: one file, in a directory of this process's own, that
//! every CLI agent's launcher watches (see `chorus_sandbox::fence`). Each
//! heartbeat that reaches the database moves it to two thirds of a lease after
//! the heartbeat began — before any lease it wrote runs out, so before any
//! other replica may claim one of its runs. A replica that is paused, cut from
//! its database or hung moves it no more, and its runs' processes are killed
//! by their launchers at that time, with nobody's help.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chorus_sandbox::fence::Fences;
use tokio::sync::watch;

/// The fence's name in its directory.
const NAME: &str = "replica";

/// This process's fence.
#[derive(Debug)]
pub struct ReplicaFence {
    fences: Fences,
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
            until: watch::Sender::new(0),
        })
    }

    /// The file launchers watch.
    pub fn path(&self) -> PathBuf {
        self.fences.path(NAME)
    }

    /// Holds the fence until two thirds of `lease` after `since_ms` (when
    /// the write that extended the leases by `lease` began).
    ///
    /// # Errors
    /// The file cannot be written (the fence then runs out at its last time).
    pub fn hold(&self, since_ms: i64, lease: Duration) -> std::io::Result<()> {
        let two_thirds = i64::try_from((lease * 2 / 3).as_millis()).unwrap_or(i64::MAX);
        let until = since_ms.saturating_add(two_thirds);
        self.fences.set(NAME, until)?;
        self.until.send_replace(until);
        Ok(())
    }

    /// Takes the fence down: every CLI agent of this process dies.
    pub fn drop_all(&self) {
        self.until.send_replace(0);
        self.fences.remove(NAME);
    }

    /// Whether the fence is up now: a launcher started now would run its
    /// program.
    pub fn held(&self) -> bool {
        *self.until.borrow() > chorus_sandbox::fence::now_ms()
    }

    /// Waits up to `patience` for the fence to be up (a heartbeat that
    /// reached the database moved it); whether it is.
    pub async fn wait_held(&self, patience: Duration) -> bool {
        let mut until = self.until.subscribe();
        let up = until.wait_for(|until| *until > chorus_sandbox::fence::now_ms());
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
        fence
            .hold(chorus_sandbox::fence::now_ms(), lease)
            .expect("hold");
        assert!(waiting.await.expect("waited"));
        assert!(fence.held());
        // A hold whose time has passed (a replica that was paused) is down.
        fence
            .hold(chorus_sandbox::fence::now_ms() - 60_000, lease)
            .expect("hold");
        assert!(!fence.held());
        fence
            .hold(chorus_sandbox::fence::now_ms(), lease)
            .expect("hold");
        fence.drop_all();
        assert!(!fence.held());
    }
}
