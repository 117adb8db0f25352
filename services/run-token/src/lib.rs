//! Run tokens: what an agent process presents on every tool call.
//!
//! A run token is a JWT signed with Ed25519 (`alg: EdDSA`). The orchestrator holds
//! the private key and mints one token per run; tool-exec holds only the public key,
//! so it can verify tokens but never mint them. The claims name the run, its task,
//! the agent, the tools it may call (already expanded from profiles) and the
//! workspace root every path is confined to.
#![forbid(unsafe_code)]

mod keys;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};

pub use keys::{KeyError, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, load_or_create_signer, load_verifier};

const ISSUER: &str = "chorus-orchestrator";
const AUDIENCE: &str = "chorus-tools";

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
    #[error("run token is malformed: {0}")]
    Malformed(String),
    #[error("run token is not valid: {0}")]
    Invalid(String),
}

/// Mints run tokens. Holds the private key.
pub struct RunTokenSigner {
    encoding: EncodingKey,
    private_pem: String,
    public_pem: String,
}

impl std::fmt::Debug for RunTokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTokenSigner").finish_non_exhaustive()
    }
}

impl RunTokenSigner {
    /// A signer with a fresh random key.
    pub fn generate() -> Self {
        keys::generate()
    }

    /// A signer from a PKCS#8 PEM private key.
    pub fn from_private_pem(pem: &str) -> Result<Self, KeyError> {
        keys::signer_from_pem(pem)
    }

    fn from_parts(private_pem: String, public_pem: String) -> Result<Self, KeyError> {
        let encoding = EncodingKey::from_ed_pem(private_pem.as_bytes())
            .map_err(|e| KeyError::Invalid(e.to_string()))?;
        Ok(Self {
            encoding,
            private_pem,
            public_pem,
        })
    }

    pub fn private_pem(&self) -> &str {
        &self.private_pem
    }

    /// The SPKI PEM public key tool-exec needs to verify this signer's tokens.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    /// A verifier for this signer's tokens.
    pub fn verifier(&self) -> RunTokenVerifier {
        RunTokenVerifier::from_public_pem(&self.public_pem)
            .expect("a signer's own public key is valid PEM")
    }

    /// Mints a token for `grant` that expires after `ttl`.
    pub fn mint(&self, grant: &RunGrant, ttl: Duration) -> String {
        self.mint_until(grant, SystemTime::now() + ttl.max(Duration::from_secs(1)))
    }

    /// Mints a token for `grant` that expires at `expires_at` (whole seconds; a
    /// time in the past gives a token every verifier refuses as expired).
    pub fn mint_until(&self, grant: &RunGrant, expires_at: SystemTime) -> String {
        let claims = Claims {
            grant: grant.clone(),
            iss: ISSUER.to_owned(),
            aud: AUDIENCE.to_owned(),
            iat: unix_now(),
            exp: expires_at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &self.encoding)
            .expect("signing serializable claims with a valid Ed25519 key cannot fail")
    }
}

/// Verifies run tokens. Holds only the public key.
#[derive(Clone)]
pub struct RunTokenVerifier {
    decoding: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for RunTokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTokenVerifier").finish_non_exhaustive()
    }
}

impl RunTokenVerifier {
    /// A verifier from an SPKI PEM public key.
    pub fn from_public_pem(pem: &str) -> Result<Self, KeyError> {
        let decoding = DecodingKey::from_ed_pem(pem.as_bytes())
            .map_err(|e| KeyError::Invalid(e.to_string()))?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = 0;
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        Ok(Self {
            decoding,
            validation,
        })
    }

    /// Checks signature, expiry, issuer and audience, and returns the grant.
    pub fn verify(&self, token: &str) -> Result<RunGrant, TokenError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(TokenError::Missing);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                ErrorKind::InvalidSignature
                | ErrorKind::InvalidAlgorithm
                | ErrorKind::InvalidKeyFormat => TokenError::BadSignature,
                ErrorKind::InvalidToken
                | ErrorKind::Base64(_)
                | ErrorKind::Json(_)
                | ErrorKind::Utf8(_) => {
                    TokenError::Malformed(format!("not a JWT with valid claims ({e})"))
                }
                _ => TokenError::Invalid(e.to_string()),
            })?;
        if !data.claims.grant.root.is_absolute() {
            return Err(TokenError::Invalid(
                "workspace root in the token is not an absolute path".to_owned(),
            ));
        }
        Ok(data.claims.grant)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
