//! Run tokens: what an agent process presents on every tool call.
//!
//! A run token is a JWT signed with Ed25519 (`alg: EdDSA`) whose header names
//! the signing key (`kid`, a fingerprint of its public key). The orchestrator
//! holds the private keys ([`RunTokenSigner`], a key set that rotates) and mints
//! one token per run; tool-exec holds only public keys ([`RunTokenVerifier`]), so
//! it can verify tokens but never mint them. The claims name the run, its task,
//! the agent, the tools it may call (already expanded from profiles) and the
//! workspace root every path is confined to.
#![forbid(unsafe_code)]

mod keys;
mod keyset;
mod verifier;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub use keys::{KeyError, key_id};
pub use keyset::{
    KEY_SET_FILE, PUBLIC_KEY_FILE, PublicKey, RunTokenSigner, SharedKey, load_or_create_signer,
    load_or_create_signer_file,
};
pub use verifier::{RunTokenVerifier, VerifiedToken, load_verifier};

const ISSUER: &str = "chorus-orchestrator";
const AUDIENCE: &str = "chorus-tools";

/// The longest a run token may live. Retired signing keys are kept this long
/// after a rotation, so every token they signed stays valid until it expires.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(48 * 60 * 60);

/// What a run may do, as carried in its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunGrant {
    /// The run id (JWT `sub`).
    #[serde(rename = "sub")]
    pub run_id: String,
    pub task_id: String,
    pub agent: String,
    /// Tool names the run may call (profiles already expanded).
    pub tools: Vec<String>,
    /// Absolute path of the workspace root.
    pub root: PathBuf,
    /// Where bash and git of a run with the `network` grant may connect, as
    /// `host:port` rules (the agent's egress list; empty: nowhere). Absent in
    /// tokens minted before it existed, which read as empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    /// How many times the run had been taken over by another driver when the
    /// token was minted: a token of an earlier driver (a lower epoch) no
    /// longer acts for the run. Absent (0) in tokens of runs never taken over.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if takes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RunGrant {
    /// True when the grant names this tool.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    #[serde(flatten)]
    grant: RunGrant,
    iss: String,
    aud: String,
    iat: u64,
    exp: u64,
}

/// Why a token was refused. Every variant means "unauthenticated".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no run token: pass it as 'authorization: Bearer <token>' (chorus-tools reads CHORUS_RUN_TOKEN)"
    )]
    Missing,
    #[error("run token expired; the run has ended or the token is stale")]
    Expired,
    #[error("run token signature does not verify; it was not minted by this deployment's key")]
    BadSignature,
    /// Signed by a key this verifier does not hold (yet): a verifier that
    /// fetches keys refreshes them and tries once more.
    #[error(
        "run token was signed with key '{0}', which this service does not know; it was not minted by this deployment"
    )]
    UnknownKey(String),
    #[error("run token is malformed: {0}")]
    Malformed(String),
    #[error("run token is not valid: {0}")]
    Invalid(String),
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
