//! The books the registry keeps of its connections: those not yet proven
//! (per address and in all), and those proven, per credential and for the
//! credentials without reserved room.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::ConnState;

/// Connections that carried no call with a credential yet: how many, and
/// (oldest first) which — some of them since proven or gone — per address
/// and in all.
#[derive(Debug, Default)]
pub(super) struct Book {
    pub(super) by_ip: HashMap<IpAddr, Queue>,
    pub(super) all: Queue,
}

/// Connections counted for something, oldest first: the count, and a queue
/// that may still hold some that no longer count (pruned as they pile up).
#[derive(Debug, Default)]
pub(super) struct Queue {
    pub(super) count: usize,
    queue: VecDeque<Weak<ConnState>>,
}

impl Queue {
    pub(super) fn add(&mut self, state: &Arc<ConnState>) {
        self.count += 1;
        self.queue.push_back(Arc::downgrade(state));
    }

    /// One fewer; once most of the queue no longer counts, keeps only the
    /// connections that still do (`counts`).
    pub(super) fn remove_one(&mut self, counts: impl Fn(&ConnState) -> bool) {
        self.count = self.count.saturating_sub(1);
        if self.queue.len() > 2 * self.count + 64 {
            self.queue
                .retain(|w| w.upgrade().is_some_and(|c| counts(&c)));
        }
    }
}

/// How many of the oldest unproven connections are searched for one that has
/// asked for nothing, before the oldest of all is closed instead.
const SILENT_SEARCHED: usize = 64;

impl Queue {
    /// The oldest connection still unproven that has asked for nothing (among
    /// the [`SILENT_SEARCHED`] oldest), else the oldest of all, taken out of
    /// the count and closing for `why` (see [`ConnState::evict`]): a
    /// connection whose call is on its way is about to be proven, and a flood
    /// of silent ones must not push it out first.
    pub(super) fn evict_oldest(&mut self, why: &str) -> Option<Arc<ConnState>> {
        let mut searched = 0;
        let mut at = 0;
        while at < self.queue.len() && searched < SILENT_SEARCHED {
            if let Some(state) = self.queue[at].upgrade()
                && !state.proven.load(Ordering::Acquire)
            {
                searched += 1;
                if !state.asked.load(Ordering::Acquire) && state.evict(why) {
                    self.queue.remove(at);
                    self.count = self.count.saturating_sub(1);
                    return Some(state);
                }
            }
            at += 1;
        }
        while let Some(oldest) = self.queue.pop_front() {
            if let Some(oldest) = oldest.upgrade()
                && oldest.evict(why)
            {
                self.count = self.count.saturating_sub(1);
                return Some(oldest);
            }
        }
        None
    }

    /// One fewer; drops entries of connections since proven or gone once they
    /// are most of the queue.
    pub(super) fn remove_unproven(&mut self) {
        self.remove_one(|c| !c.proven.load(Ordering::Acquire));
    }
}

/// The credential whose call proved a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// "key <id>", "run <id>".
    pub name: String,
    /// An admin's key or an agent: theirs is the room keys of other roles
    /// cannot take (see [`Registry::unreserved_max`]).
    pub reserved: bool,
}

/// Proven connections by credential, and those of credentials without
/// reserved room, oldest first.
#[derive(Debug, Default)]
pub(super) struct Holders {
    pub(super) by_name: HashMap<String, Queue>,
    pub(super) unreserved: Queue,
}

/// How many of a holder's oldest connections are searched for an idle one
/// to close.
const IDLE_SEARCHED: usize = 64;

impl Queue {
    /// Closes the oldest connection other than `newest` with no call in
    /// flight (among the [`IDLE_SEARCHED`] oldest live ones), for `why`.
    pub(super) fn close_oldest_idle(&mut self, newest: &Arc<ConnState>, why: &str) {
        let mut searched = 0;
        let mut at = 0;
        while at < self.queue.len() && searched < IDLE_SEARCHED {
            let Some(state) = self.queue[at].upgrade() else {
                self.queue.remove(at);
                continue;
            };
            if !Arc::ptr_eq(&state, newest) && !state.is_closing() {
                searched += 1;
                if state.calls.load(Ordering::Acquire) == 0 {
                    self.queue.remove(at);
                    state.close(why.to_owned());
                    return;
                }
            }
            at += 1;
        }
    }
}
