//! File tools act as the workspace's user, as the run's processes do.
//!
//! A root service would otherwise read and change any file of a workspace —
//! a root-only 0600 file bash cannot read, a file the user may not write —
//! because root's capabilities pass every permission check. Linux keeps the
//! identity the kernel checks file access against per thread (the filesystem
//! uid and gid), and switching it from 0 to another user drops the
//! filesystem capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
//! CAP_CHOWN, ...) from that thread until it is switched back. So the thread
//! that runs a file tool switches to the workspace's user for the duration of
//! the work, and back afterwards: what it opens, makes and lists is what that
//! user could, and what it makes belongs to that user.
//!
//! Supplementary groups are per process in practice (glibc changes them in
//! every thread): a root service gives up its own once, at start
//! ([`drop_supplementary_groups`]), so that only the workspace's group counts.

use nix::unistd::{Gid, Uid, setfsgid, setfsuid};

use crate::error::ToolError;

/// The calling thread acts as a user until this is dropped.
#[derive(Debug)]
#[must_use = "the thread acts as the user only while this lives"]
pub struct ActingAs {
    previous: Option<(Uid, Gid)>,
}

impl ActingAs {
    /// The calling thread acts as `owner` (uid, gid) until the result is
    /// dropped; `None` leaves it as it is (a service that is not root, or a
    /// root-owned workspace with no user configured).
    ///
    /// # Errors
    /// The kernel refused the switch (the thread keeps its identity, and the
    /// work must not run).
    pub fn user(owner: Option<(u32, u32)>) -> Result<Self, ToolError> {
        let Some((uid, gid)) = owner else {
            return Ok(Self { previous: None });
        };
        let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
        // The group first: once the uid is not 0, the thread may no longer
        // choose its group.
        let old_gid = setfsgid(gid);
        let old_uid = setfsuid(uid);
        let acting = Self {
            previous: Some((old_uid, old_gid)),
        };
        // setfs*id return the previous id whether or not they changed it:
        // asking again tells what holds now.
        if setfsuid(uid) != uid || setfsgid(gid) != gid {
            return Err(ToolError::Internal(format!(
                "cannot act as the workspace's user {uid}:{gid} for a file tool"
            )));
        }
        Ok(acting)
    }
}

impl Drop for ActingAs {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.previous.take() {
            // Back to root first, so that the group may change again.
            setfsuid(uid);
            setfsgid(gid);
        }
    }
}

/// A root service keeps no supplementary group of its own (root's `0` would
/// let file tools acting as a user read group-root files). Once per process;
/// a service that is not root keeps its groups.
pub fn drop_supplementary_groups() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        if let Err(e) = nix::unistd::setgroups(&[]) {
            tracing::warn!(error = %e, "cannot drop the service's supplementary groups; file tools acting as a workspace's user may still read files of root's groups");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's filesystem ids, from /proc/thread-self/status
    /// (`Uid: real effective saved fs`).
    fn fs_ids() -> (u32, u32) {
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
        let field = |name: &str| -> u32 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().nth(3))
                .and_then(|v| v.parse().ok())
                .expect("fs id")
        };
        (field("Uid:"), field("Gid:"))
    }

    #[test]
    fn a_thread_acts_as_the_user_while_the_guard_lives_and_is_itself_again_after() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var("CHORUS_TEST_REQUIRE_ROOT").as_deref() != Ok("1"),
                "CHORUS_TEST_REQUIRE_ROOT=1 but the tests do not run as root: run them as root (CI does)"
            );
            // A service that is not root acts as itself: nothing to switch.
            let acting = ActingAs::user(None).expect("none");
            drop(acting);
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let before = fs_ids();
        let dir = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let (secret, open) = (dir.path().join("secret"), dir.path().join("open"));
        for (file, mode) in [(&secret, 0o600), (&open, 0o644)] {
            std::fs::write(file, "root's").expect("write");
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        {
            let _acting = ActingAs::user(Some((65_534, 65_533))).expect("act");
            assert_eq!(fs_ids(), (65_534, 65_533));
            // Root's file capabilities are gone for this thread.
            let err = std::fs::read(&secret).expect_err("a root-only file was read");
            assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
            assert_eq!(std::fs::read(&open).expect("a readable file"), b"root's");
        }
        assert_eq!(fs_ids(), before, "the thread is root again");
    }
}
