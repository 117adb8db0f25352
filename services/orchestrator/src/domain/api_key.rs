//! API keys as the orchestrator keeps them: a name, a role and a hash.

use chorus_auth::Role;

use super::Name;

/// A stored API key. The key itself is never kept, only its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The public part of the key (`chorus_<id>_...`).
    pub id: String,
    pub name: Name,
    pub role: Role,
    /// `sha256:<hex>` of the whole key.
    pub hash: String,
    pub created_ms: i64,
    /// Set once it is revoked; a revoked key is refused.
    pub revoked_ms: Option<i64>,
}

impl ApiKeyRecord {
    pub fn is_active(&self) -> bool {
        self.revoked_ms.is_none()
    }
}
