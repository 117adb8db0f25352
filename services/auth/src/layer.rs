//! The tower layer in front of every service of a server: it finds the
//! method's [`Access`], checks the caller's credential, and passes the request
//! on with the [`Principal`] in its extensions — or answers the refusal itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use chorus_run_token::VerifiedToken;
use chorus_telemetry::LogRate;
use http::header::AUTHORIZATION;
use tonic::Status;
use tonic::body::Body;
use tower::{Layer, Service};
use tracing::info;

use crate::access::Access;
use crate::api_key::ApiKey;
use crate::principal::{Credential, Principal};
use crate::tls::PeerRoles;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a service knows about credentials.
#[tonic::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The principal of an API key; UNAUTHENTICATED for an unknown or revoked key.
    async fn api_key(&self, key: &ApiKey) -> Result<Principal, Status>;
    /// A run token whose key, signature and expiry verify; UNAUTHENTICATED otherwise.
    async fn run_token(&self, token: &str) -> Result<VerifiedToken, Status>;
}

/// Refusals logged at most this often a second; the rest are counted, and
/// the count is given with the next line logged.
pub const REFUSALS_LOGGED_PER_SECOND: u32 = 10;

struct Shared {
    authenticator: Arc<dyn Authenticator>,
    refusals: LogRate,
    /// Client certificates that act with a role (mTLS).
    peers: PeerRoles,
    access: fn(&str) -> Access,
    /// Where a caller without a credential can get one.
    hint: String,
}

/// Checks every request's credential against the access its method needs.
#[derive(Clone)]
pub struct AuthLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AuthLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthLayer").finish_non_exhaustive()
    }
}

impl AuthLayer {
    /// `access` maps a gRPC path (`/package.Service/Method`) to what it takes;
    /// `hint` tells a caller without a credential where to get one.
    pub fn new(
        authenticator: Arc<dyn Authenticator>,
        access: fn(&str) -> Access,
        hint: impl Into<String>,
    ) -> Self {
        Self::with_peers(authenticator, access, hint, PeerRoles::default())
    }

    /// [`AuthLayer::new`] that also takes client certificates named in `peers`
    /// as credentials (when the call presents no bearer credential).
    pub fn with_peers(
        authenticator: Arc<dyn Authenticator>,
        access: fn(&str) -> Access,
        hint: impl Into<String>,
        peers: PeerRoles,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                authenticator,
                refusals: LogRate::new(REFUSALS_LOGGED_PER_SECOND),
                peers,
                access,
                hint: hint.into(),
            }),
        }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// [`AuthLayer`]'s service.
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for AuthService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthService").finish_non_exhaustive()
    }
}

impl<S> Service<http::Request<Body>> for AuthService<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // The service that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let path = request.uri().path().to_owned();
        let access = (self.shared.access)(&path);
        if access.open {
            return Box::pin(inner.call(request));
        }
        let header = request
            .headers()
            .get(AUTHORIZATION)
            .map(|v| v.to_str().map(str::to_owned).map_err(|_| ()));
        let peer = match header {
            None => self.shared.peers.principal(request.extensions()),
            Some(_) => None,
        };
        let has_credential = header.is_some() || peer.is_some();
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let principal = match peer {
                Some(peer) => access.check(&method_name(&path), &peer).map(|()| peer),
                None => shared.authenticate(&path, access, header).await,
            };
            match principal {
                Ok(principal) => {
                    request.extensions_mut().insert(principal);
                    inner.call(request).await
                }
                Err(status) => {
                    let reason = match status.code() {
                        tonic::Code::Unauthenticated => "unauthenticated",
                        tonic::Code::PermissionDenied => "permission-denied",
                        _ => "credential-unusable",
                    };
                    let caller = if has_credential {
                        "credential"
                    } else {
                        "anonymous"
                    };
                    chorus_telemetry::metrics().refused(reason, caller, None);
                    if let Some(unlogged) = shared.refusals.admit() {
                        info!(method = %path, code = ?status.code(), reason = %status.message(), not_logged_before = unlogged, "call refused");
                    }
                    Ok(status.into_http())
                }
            }
        })
    }
}

impl Shared {
    async fn authenticate(
        &self,
        path: &str,
        access: Access,
        header: Option<Result<String, ()>>,
    ) -> Result<Principal, Status> {
        let method = method_name(path);
        let header = match header {
            None => {
                return Err(Status::unauthenticated(format!(
                    "{method} needs {}: pass it as 'authorization: Bearer <credential>' ({})",
                    access.needs(),
                    self.hint
                )));
            }
            Some(Err(())) => {
                return Err(Status::unauthenticated(
                    "the authorization header is not ASCII".to_owned(),
                ));
            }
            Some(Ok(header)) => header,
        };
        let credential = Credential::from_header(&header)
            .map_err(|reason| Status::unauthenticated(format!("{method}: {reason}")))?;
        let principal = match credential {
            Credential::ApiKey(key) => self.authenticator.api_key(&key).await?,
            Credential::RunToken(token) => {
                let verified = self.authenticator.run_token(&token).await?;
                Principal::Run { verified, token }
            }
        };
        access.check(&method, &principal)?;
        Ok(principal)
    }
}

/// `Service/Method` of a gRPC path, as messages name it.
fn method_name(path: &str) -> String {
    let path = path.trim_start_matches('/');
    match path.split_once('/') {
        Some((service, method)) => {
            let service = service.rsplit('.').next().unwrap_or(service);
            format!("{service}/{method}")
        }
        None => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;

    #[test]
    fn methods_are_named_without_their_package() {
        assert_eq!(
            method_name("/chorus.orchestrator.v1.Orchestrator/StartTask"),
            "Orchestrator/StartTask"
        );
        assert_eq!(method_name("/Plain/Call"), "Plain/Call");
    }

    struct Keys;

    #[tonic::async_trait]
    impl Authenticator for Keys {
        async fn api_key(&self, key: &ApiKey) -> Result<Principal, Status> {
            Ok(Principal::Key {
                id: key.id().to_owned(),
                name: "test".into(),
                role: Role::Viewer,
            })
        }
        async fn run_token(&self, _token: &str) -> Result<VerifiedToken, Status> {
            Err(Status::unauthenticated("run token expired"))
        }
    }

    fn shared() -> Shared {
        Shared {
            authenticator: Arc::new(Keys),
            refusals: LogRate::new(REFUSALS_LOGGED_PER_SECOND),
            peers: PeerRoles::default(),
            access: |_| Access::role(Role::Operator),
            hint: "ask an admin".into(),
        }
    }

    #[tokio::test]
    async fn a_missing_credential_is_unauthenticated_and_says_what_is_needed() {
        let err = shared()
            .authenticate("/p.S/M", Access::role(Role::Operator), None)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert!(
            err.message()
                .contains("S/M needs an API key with role operator or admin")
        );
        assert!(err.message().contains("ask an admin"));
    }

    #[tokio::test]
    async fn a_good_key_with_too_small_a_role_is_permission_denied() {
        let key = ApiKey::generate();
        let err = shared()
            .authenticate(
                "/p.S/M",
                Access::role(Role::Operator),
                Some(Ok(format!("Bearer {}", key.expose()))),
            )
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
    }

    #[tokio::test]
    async fn bad_headers_and_tokens_are_unauthenticated() {
        for header in ["Basic abc", "Bearer chorus_short", "Bearer eyJ.x.y"] {
            let err = shared()
                .authenticate("/p.S/M", Access::run(), Some(Ok(header.into())))
                .await
                .expect_err("refused");
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{header}");
        }
    }

    /// A flood of refusals logs a few lines a second; the next line logged
    /// says how many were not.
    #[tokio::test(start_paused = true)]
    async fn refusals_are_logged_a_few_a_second() {
        let log = LogRate::new(REFUSALS_LOGGED_PER_SECOND);
        let logged = (0..1000).filter(|_| log.admit().is_some()).count();
        assert_eq!(logged, REFUSALS_LOGGED_PER_SECOND as usize);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(
            log.admit(),
            Some(1000 - u64::from(REFUSALS_LOGGED_PER_SECOND))
        );
        assert_eq!(log.admit(), Some(0));
    }
}
