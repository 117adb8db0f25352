//! Who may call tool-exec: agents with their run token (ExecuteTool, ListTools,
//! GetStatus), and people or services with an API key of role viewer or more
//! (ListTools, GetStatus), checked through the gate's orchestrator. Health and
//! reflection are open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_auth::{Access, ApiKey, Authenticator, Principal, Role};
use chorus_run_token::{RunTokenVerifier, TokenError, VerifiedToken};
use tonic::Status;
use tracing::{info, warn};

use crate::error::ToolError;
use crate::gate::RunGate;

/// Least time between two key refreshes caused by unknown key ids, so that
/// tokens naming made-up keys cannot flood the orchestrator (a caller waits
/// for its turn rather than being refused).
const REFRESH_SPACING: Duration = Duration::from_millis(200);

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
    /// When keys were last fetched for an unknown key id; held while fetching,
    /// so concurrent callers share one fetch.
    last_refresh: tokio::sync::Mutex<Option<Instant>>,
}

impl ToolExecAuthenticator {
    pub fn new(verifier: RunTokenVerifier, gate: Option<Arc<dyn RunGate>>) -> Self {
        Self {
            verifier,
            gate,
            last_refresh: tokio::sync::Mutex::new(None),
        }
    }

    /// Fetches the keys through the gate because a token names `kid`, at most
    /// once per [`REFRESH_SPACING`]; true when `kid` is known afterwards.
    async fn refresh(&self, kid: &str) -> bool {
        let Some(gate) = &self.gate else {
            return false;
        };
        let mut last = self.last_refresh.lock().await;
        // Another caller may have fetched it while this one waited.
        if self.verifier.kids().iter().any(|k| k == kid) {
            return true;
        }
        if let Some(at) = *last {
            tokio::time::sleep(REFRESH_SPACING.saturating_sub(at.elapsed())).await;
        }
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
