//! Who a call is from, and what one credential may hold at once: the
//! per-credential defaults and the `--quota` of its key, its role or agents.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chorus_auth::Principal;

/// Whose quota a [`Quota`] sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaOf {
    /// Every API key (or client certificate) of a role.
    Role(chorus_auth::Role),
    /// One API key, by id (or a client certificate, `cert:<name>`).
    Key(String),
    /// Every run (agents' run tokens).
    Agents,
}

/// Unary calls and streams one credential may hold at once, for a role, a
/// key or agents, over the per-credential defaults (`--quota`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    pub of: QuotaOf,
    pub requests: usize,
    pub streams: usize,
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.of {
            QuotaOf::Role(role) => write!(f, "{}", role.as_str())?,
            QuotaOf::Key(id) => write!(f, "key:{id}")?,
            QuotaOf::Agents => f.write_str("agents")?,
        }
        write!(f, "={}/{}", self.requests, self.streams)
    }
}

impl std::str::FromStr for Quota {
    type Err = String;

    /// `viewer=16/64`, `key:3f1c…=128/512`, `agents=32/8`: whose, then unary
    /// calls / streams.
    fn from_str(text: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "'{text}' is not a quota: write WHO=CALLS/STREAMS, WHO being a role (admin, operator, viewer, tool-exec), key:<id> or agents, e.g. viewer=16/64"
            )
        };
        let (who, counts) = text.split_once('=').ok_or_else(usage)?;
        let (requests, streams) = counts.split_once('/').ok_or_else(usage)?;
        let count = |n: &str| {
            n.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(usage)
        };
        let of = match who.trim() {
            "agents" => QuotaOf::Agents,
            key if key.starts_with("key:") && key.len() > 4 => QuotaOf::Key(key[4..].to_owned()),
            role => QuotaOf::Role(
                role.parse()
                    .map_err(|e: String| format!("{e} (in '{text}')"))?,
            ),
        };
        Ok(Self {
            of,
            requests: count(requests)?,
            streams: count(streams)?,
        })
    }
}

/// What one credential holds now: unary calls, streams, bytes of answers
/// not yet read.
#[derive(Debug)]
pub(super) struct PerCredential {
    pub(super) held: Arc<Mutex<HashMap<String, [usize; 3]>>>,
    /// The defaults (`--max-concurrent-requests-per-credential`, …).
    pub(super) limits: [usize; 3],
    /// Over the defaults, most specific first: keys, then roles and agents.
    pub(super) quotas: Vec<Quota>,
}

pub(super) const UNARY: usize = 0;
pub(super) const STREAMS: usize = 1;
pub(super) const ANSWER_BYTES: usize = 2;

/// What one credential holds of one kind, given back when dropped.
#[derive(Debug)]
pub(super) struct CredentialPlace {
    held: Arc<Mutex<HashMap<String, [usize; 3]>>>,
    who: String,
    pool: usize,
    amount: usize,
}

impl Drop for CredentialPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(counts) = held.get_mut(&self.who) {
            counts[self.pool] = counts[self.pool].saturating_sub(self.amount);
            if *counts == [0, 0, 0] {
                held.remove(&self.who);
            }
        }
    }
}

impl PerCredential {
    /// The limits of `caller`: its key's quota, else its role's (or agents'),
    /// else the defaults.
    pub(super) fn limits_of(&self, caller: &Caller) -> [usize; 3] {
        let applies = |q: &&Quota| match (&q.of, caller) {
            (QuotaOf::Key(id), Caller::Key(mine, _)) => id == mine,
            (QuotaOf::Role(role), Caller::Key(_, mine)) => role == mine,
            (QuotaOf::Agents, Caller::Agent(_)) => true,
            _ => false,
        };
        let by_key = self
            .quotas
            .iter()
            .find(|q| matches!(q.of, QuotaOf::Key(_)) && applies(q));
        match by_key.or_else(|| self.quotas.iter().find(applies)) {
            Some(q) => [q.requests, q.streams, self.limits[ANSWER_BYTES]],
            None => self.limits,
        }
    }

    /// `amount` of `caller` in `pool`, unless that takes it past its limit.
    pub(super) fn take(
        &self,
        caller: &Caller,
        pool: usize,
        amount: usize,
    ) -> Option<CredentialPlace> {
        let who = caller.who()?;
        let limit = self.limits_of(caller)[pool];
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let counts = held.entry(who.clone()).or_insert([0, 0, 0]);
        if counts[pool].saturating_add(amount) > limit {
            if *counts == [0, 0, 0] {
                held.remove(&who);
            }
            return None;
        }
        counts[pool] += amount;
        Some(CredentialPlace {
            held: Arc::clone(&self.held),
            who,
            pool,
            amount,
        })
    }

    pub(super) fn refusal_of(
        &self,
        caller: &Caller,
        pool: usize,
    ) -> (usize, &'static str, &'static str) {
        let limits = self.limits_of(caller);
        let quota = limits != self.limits;
        match pool {
            UNARY => (
                limits[UNARY],
                "calls",
                if quota {
                    "--quota"
                } else {
                    "--max-concurrent-requests-per-credential"
                },
            ),
            STREAMS => (
                limits[STREAMS],
                "streams",
                if quota {
                    "--quota"
                } else {
                    "--max-concurrent-streams-per-credential"
                },
            ),
            _ => (
                self.limits[ANSWER_BYTES],
                "bytes of answers not yet read",
                "--max-unread-answer-bytes-per-credential",
            ),
        }
    }
}

/// Who a call is from, as the auth layer found.
#[derive(Debug, Clone)]
pub(super) enum Caller {
    Agent(String),
    Key(String, chorus_auth::Role),
    Anonymous,
}

impl Caller {
    pub(super) fn of(extensions: &http::Extensions) -> Self {
        match extensions.get::<Principal>() {
            Some(Principal::Run { verified, .. }) => Self::Agent(verified.grant.run_id.clone()),
            Some(Principal::Key { id, role, .. }) => Self::Key(id.clone(), *role),
            Some(Principal::Internal) => Self::Agent("internal".to_owned()),
            None => Self::Anonymous,
        }
    }

    /// How the credential is named in refusals and its own counts.
    pub(super) fn who(&self) -> Option<String> {
        match self {
            Self::Agent(run) => Some(format!("run {run}")),
            Self::Key(id, _) => Some(format!("key {id}")),
            Self::Anonymous => None,
        }
    }

    /// Whose connection a call of this caller proves: the credential, and
    /// whether it has reserved room (admins' keys, tool-exec's, agents).
    pub(super) fn holder(&self) -> Option<crate::connections::Holder> {
        Some(crate::connections::Holder {
            name: self.who()?,
            reserved: self.reserved(),
        })
    }

    /// Whether the caller has reserved room: admins' keys, tool-exec's,
    /// agents (see [`crate::unreserved_share`]).
    pub(super) fn reserved(&self) -> bool {
        match self {
            Self::Agent(_) => true,
            Self::Key(_, role) => {
                matches!(role, chorus_auth::Role::Admin | chorus_auth::Role::ToolExec)
            }
            Self::Anonymous => false,
        }
    }

    /// The kind, and the key's id, for the refusal metric.
    pub(super) fn labels(&self) -> (&'static str, Option<&str>) {
        match self {
            Self::Agent(_) => ("agent", None),
            Self::Key(id, _) => ("key", Some(id)),
            Self::Anonymous => ("anonymous", None),
        }
    }
}
