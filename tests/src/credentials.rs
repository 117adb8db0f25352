//! Credentials for test clients: an admin key made in the store before a
//! server starts, and an interceptor that presents a credential.

use chorus_auth::{ApiKey, Role};
use chorus_orchestrator::domain::{ApiKeyRecord, Name, now_ms};
use chorus_orchestrator::secrets::SecretBox;
use chorus_orchestrator::store::Store;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A channel whose calls present a credential.
pub type AuthChannel = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <credential>` to requests that carry none.
#[derive(Debug, Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    pub fn new(credential: &str) -> Self {
        Self(Some(
            format!("Bearer {}", credential.trim())
                .parse()
                .expect("credential is ASCII"),
        ))
    }

    /// Presents nothing.
    pub fn none() -> Self {
        Self(None)
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0
            && !request.metadata().contains_key("authorization")
        {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Makes an API key of `role` named `name` directly in the database at
/// `database_url` (before or beside a running orchestrator) and returns it.
pub async fn make_key(database_url: &str, name: &str, role: Role) -> String {
    // API keys only: provider keys are never sealed with this throwaway key.
    let store = Store::open(database_url, SecretBox::ephemeral())
        .await
        .expect("open the store");
    let key = ApiKey::generate();
    store
        .create_api_key(ApiKeyRecord {
            id: key.id().to_owned(),
            name: Name::parse("name", &format!("{name}-{}", key.id())).expect("name"),
            role,
            hash: key.hash(),
            created_ms: now_ms(),
            revoked_ms: None,
        })
        .await
        .expect("create the key");
    key.expose().to_owned()
}

/// An admin key for a test harness.
pub async fn admin_key(database_url: &str) -> String {
    make_key(database_url, "test-admin", Role::Admin).await
}
