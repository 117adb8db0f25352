//! Who is calling, once their credential checked out.

use chorus_run_token::VerifiedToken;

use crate::api_key::{ApiKey, KEY_PREFIX};
use crate::role::Role;

/// A credential as presented, before it is checked.
#[derive(Debug, Clone)]
pub enum Credential {
    ApiKey(ApiKey),
    RunToken(String),
}

impl Credential {
    /// Reads `Bearer <credential>`; Err says what is wrong with the header.
    pub fn from_header(value: &str) -> Result<Self, String> {
        let credential = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or("the authorization header must be 'Bearer <API key or run token>'")?
            .trim();
        if credential.starts_with(KEY_PREFIX) {
            return ApiKey::parse(credential)
                .map(Credential::ApiKey)
                .ok_or_else(|| {
                    "the API key is malformed (expected chorus_<id>_<secret>)".to_owned()
                });
        }
        Ok(Credential::RunToken(credential.to_owned()))
    }
}

/// The caller of an RPC, put in the request's extensions by the auth layer.
#[derive(Debug, Clone)]
pub enum Principal {
    /// An API key (or a client certificate mapped to a role).
    Key {
        id: String,
        name: String,
        role: Role,
    },
    /// An agent run, by a token whose signature verified. The service still
    /// checks its claims against the stored run before it acts.
    Run {
        verified: VerifiedToken,
        token: String,
    },
    /// A call made inside the process (the embedded tool-exec's gate).
    Internal,
}

impl Principal {
    /// How logs and messages name the caller.
    pub fn describe(&self) -> String {
        match self {
            Principal::Key { id, name, role } => format!("key '{name}' ({id}, role {role})"),
            Principal::Run { verified, .. } => {
                format!("the run token of run {}", verified.grant.run_id)
            }
            Principal::Internal => "this process".to_owned(),
        }
    }
}
