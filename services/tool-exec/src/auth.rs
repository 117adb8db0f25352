//! Who may call tool-exec: agents with their run token (ExecuteTool, ListTools,
//! GetStatus), and people or services with an API key of role viewer or more
//! (ListTools, GetStatus), checked through the gate's orchestrator. Health and
//! reflection are open.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chorus_auth::{Access, ApiKey, Authenticator, Principal, Role};
use chorus_run_token::{RunTokenVerifier, TokenError, VerifiedToken};
use tonic::Status;
use tracing::{info, warn};

use crate::error::ToolError;
use crate::gate::RunGate;

/// Least time between two key refreshes caused by unknown key ids, so that
/// tokens naming made-up keys cannot flood the orchestrator: every caller
/// that arrives meanwhile shares the next refresh instead of queueing one of
/// its own.
const REFRESH_SPACING: Duration = Duration::from_millis(200);

/// Longest a caller waits for a refresh to begin; past it the token is
/// refused as naming an unknown key.
const REFRESH_WAIT: Duration = Duration::from_secs(5);

/// What the method at gRPC `path` takes; a method not listed needs an admin key.
pub fn access(path: &str) -> Access {
    listed(path).unwrap_or(Access::role(Role::Admin))
}

fn listed(path: &str) -> Option<Access> {
    let (service, method) = path.trim_start_matches('/').split_once('/')?;
    match (service, method) {
        (
            "grpc.health.v1.Health"
            | "grpc.reflection.v1.ServerReflection"
            | "grpc.reflection.v1alpha.ServerReflection",
            _,
        ) => Some(Access::OPEN),
        ("chorus.tools.v1.ToolExec", "ExecuteTool") => Some(Access::run()),
        ("chorus.tools.v1.ToolExec", "ListTools" | "GetStatus") => {
            Some(Access::run_or(Role::Viewer))
        }
        _ => None,
    }
}

/// tool-exec's [`Authenticator`]: run tokens by its verifier (refreshed through
/// the gate when a token names a key it does not hold), API keys by the gate.
#[derive(Debug)]
pub struct ToolExecAuthenticator {
    verifier: RunTokenVerifier,
    gate: Option<Arc<dyn RunGate>>,
    /// When keys were last fetched for an unknown key id; held while fetching.
    last_refresh: tokio::sync::Mutex<Option<Instant>>,
    /// Refreshes begun so far: a caller that finds one begun after it arrived
    /// takes that one's answer rather than asking again.
    begun: AtomicU64,
}

impl ToolExecAuthenticator {
    pub fn new(verifier: RunTokenVerifier, gate: Option<Arc<dyn RunGate>>) -> Self {
        Self {
            verifier,
            gate,
            last_refresh: tokio::sync::Mutex::new(None),
            begun: AtomicU64::new(0),
        }
    }

    /// Fetches the keys through the gate because a token names `kid`; true
    /// when `kid` is known afterwards. Refreshes begin at most once per
    /// [`REFRESH_SPACING`], one at a time, and every caller that arrived
    /// before one began takes its answer: a burst of tokens naming made-up
    /// keys costs two fetches, and a real new key's first token waits for at
    /// most the spacing and two fetches.
    async fn refresh(&self, kid: &str) -> bool {
        let Some(gate) = &self.gate else {
            return false;
        };
        let arrived = self.begun.load(Ordering::Acquire);
        let Ok(mut last) = tokio::time::timeout(REFRESH_WAIT, self.last_refresh.lock()).await
        else {
            return false;
        };
        // A refresh begun since this caller arrived has answered for it.
        if self.begun.load(Ordering::Acquire) > arrived || self.knows(kid) {
            return self.knows(kid);
        }
        if let Some(at) = *last {
            tokio::time::sleep(REFRESH_SPACING.saturating_sub(at.elapsed())).await;
        }
        self.begun.fetch_add(1, Ordering::AcqRel);
        // A channel whose last connection failed answers one call with that
        // failure before it connects again.
        let mut result = gate.refresh_keys(&self.verifier).await;
        if result.is_err() {
            result = gate.refresh_keys(&self.verifier).await;
        }
        *last = Some(Instant::now());
        match result {
            Ok(()) => info!(kids = ?self.verifier.kids(), "run-token keys refreshed"),
            Err(e) => warn!(error = %e, "cannot refresh the run-token keys"),
        }
        self.knows(kid)
    }

    fn knows(&self, kid: &str) -> bool {
        self.verifier.kids().iter().any(|k| k == kid)
    }
}

#[tonic::async_trait]
impl Authenticator for ToolExecAuthenticator {
    async fn api_key(&self, key: &ApiKey) -> Result<Principal, Status> {
        match &self.gate {
            Some(gate) => gate
                .authenticate_key(key.expose())
                .await
                .map_err(Status::from),
            None => Err(Status::unauthenticated(
                "this tool-exec runs standalone (no orchestrator to check API keys): it takes run tokens only",
            )),
        }
    }

    async fn run_token(&self, token: &str) -> Result<VerifiedToken, Status> {
        match self.verifier.verify_token(token) {
            Err(TokenError::UnknownKey(kid)) if self.refresh(&kid).await => self
                .verifier
                .verify_token(token)
                .map_err(|e| ToolError::from(e).into()),
            other => other.map_err(|e| ToolError::from(e).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn every_method_tool_exec_serves_has_its_own_rule() {
        let set = prost_types::FileDescriptorSet::decode(chorus_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptor set");
        let file = set
            .file
            .iter()
            .find(|f| f.package() == "chorus.tools.v1")
            .expect("tools package");
        for service in &file.service {
            for method in &service.method {
                let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                assert!(listed(&path).is_some(), "{path} has no access rule");
            }
        }
        assert_eq!(
            access("/chorus.orchestrator.v1.Orchestrator/ListWorkspaces"),
            Access::role(Role::Admin)
        );
    }
}

#[cfg(test)]
mod refresh_tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    use chorus_run_token::{RunGrant, RunTokenSigner};

    use crate::gate::{Authorized, ToolCallRecord};

    /// A gate whose orchestrator holds `signer`'s keys; counts the fetches.
    #[derive(Debug)]
    struct KeysGate {
        signer: Arc<RunTokenSigner>,
        fetches: AtomicUsize,
    }

    #[tonic::async_trait]
    impl RunGate for KeysGate {
        async fn authorize(
            &self,
            _: &str,
            _: &str,
            _: crate::gate::Question<'_>,
        ) -> Result<Authorized, ToolError> {
            Err(ToolError::Internal("not asked here".into()))
        }
        async fn record(
            &self,
            _: &str,
            _: ToolCallRecord,
            _: Option<&str>,
        ) -> Result<(), ToolError> {
            Err(ToolError::Internal("not asked here".into()))
        }
        async fn authenticate_key(&self, _: &str) -> Result<Principal, ToolError> {
            Err(ToolError::Internal("not asked here".into()))
        }
        async fn refresh_keys(&self, verifier: &RunTokenVerifier) -> Result<(), ToolError> {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            verifier.replace(
                self.signer
                    .public_keys()
                    .into_iter()
                    .map(|k| (k.kid, k.pem))
                    .collect(),
            );
            Ok(())
        }
    }

    fn grant() -> RunGrant {
        RunGrant {
            run_id: "r".into(),
            task_id: "t".into(),
            agent: "a".into(),
            tools: vec!["file.read".into()],
            root: "/w".into(),
            egress: Vec::new(),
            epoch: 0,
        }
    }

    #[tokio::test]
    async fn a_burst_of_made_up_key_ids_costs_two_fetches_and_a_new_keys_token_still_passes() {
        let signer = Arc::new(RunTokenSigner::generate());
        let gate = Arc::new(KeysGate {
            signer: signer.clone(),
            fetches: AtomicUsize::new(0),
        });
        // tool-exec's own copy of the keys, as fetched at its start.
        let verifier = RunTokenVerifier::from_keys(
            signer
                .public_keys()
                .into_iter()
                .map(|k| (k.kid, k.pem))
                .collect(),
        );
        let auth = Arc::new(ToolExecAuthenticator::new(verifier, Some(gate.clone())));
        // Tokens of a key the orchestrator never had.
        let stranger = RunTokenSigner::generate().mint(&grant(), Duration::from_secs(60));
        let burst: Vec<_> = (0..300)
            .map(|_| {
                let auth = auth.clone();
                let token = stranger.clone();
                tokio::spawn(async move { auth.run_token(&token).await })
            })
            .collect();
        for caller in burst {
            let refused = caller.await.expect("caller").expect_err("unknown key");
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        }
        let fetches = gate.fetches.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&fetches),
            "300 tokens naming an unknown key made {fetches} key fetches; callers that arrived before a fetch began should share it"
        );

        // The orchestrator rotates: the new key's first token is taken after
        // one more fetch.
        signer.rotate().expect("rotate");
        let fresh = signer.mint(&grant(), Duration::from_secs(60));
        let verified = auth.run_token(&fresh).await.expect("a rotated key's token");
        assert_eq!(verified.grant.run_id, "r");
        assert_eq!(gate.fetches.load(Ordering::SeqCst), fetches + 1);
    }
}
