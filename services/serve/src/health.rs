//! gRPC health for every name a server serves (`""` and each service), as a
//! container orchestrator reads it: SERVING while the server works, and
//! NOT_SERVING while what it depends on fails (the orchestrator's database, a
//! separate tool-exec's orchestrator) or once it drains for shutdown — from
//! then on for good.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tracing::{info, warn};

/// The health a server reports, one status for all its names.
#[derive(Clone)]
pub struct Health {
    reporter: HealthReporter,
    /// `""` and the served services' full names.
    names: Arc<[String]>,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    draining: bool,
    /// Why each failing dependency fails (by what it is); empty while every
    /// one answers.
    problems: std::collections::BTreeMap<String, String>,
}

impl State {
    fn status(&self) -> ServingStatus {
        if self.draining || !self.problems.is_empty() {
            ServingStatus::NotServing
        } else {
            ServingStatus::Serving
        }
    }
}

impl Health {
    /// SERVING for `""` and each of `services`.
    pub async fn new(services: &[&str]) -> Self {
        let reporter = HealthReporter::new();
        let names: Arc<[String]> = std::iter::once(String::new())
            .chain(services.iter().map(|s| (*s).to_owned()))
            .collect();
        let health = Self {
            reporter,
            names,
            state: Arc::new(Mutex::new(State::default())),
        };
        health.publish(&*health.state.lock().await).await;
        health
    }

    /// The gRPC health service that reports it.
    pub fn service(&self) -> HealthServer<HealthService> {
        HealthServer::new(self.checks())
    }

    fn checks(&self) -> HealthService {
        HealthService::from_health_reporter(self.reporter.clone())
    }

    /// NOT_SERVING on every name, for good: the server is about to stop.
    pub async fn drain(&self) {
        let mut state = self.state.lock().await;
        state.draining = true;
        self.publish(&state).await;
    }

    /// NOT_SERVING until the first check of `what` passes (a dependency
    /// not known to answer yet).
    pub async fn unchecked(&self, what: &str) {
        let mut state = self.state.lock().await;
        state
            .problems
            .insert(what.to_owned(), format!("{what} has not been checked yet"));
        self.publish(&state).await;
    }

    /// Records whether `what` (a dependency: "the database", "the run
    /// leases") answers. Changes are logged; while any dependency fails every
    /// name is NOT_SERVING.
    pub async fn depends(&self, what: &str, outcome: Result<(), String>) {
        let mut state = self.state.lock().await;
        match (state.problems.get(what), outcome) {
            (None, Ok(())) => return,
            (Some(_), Ok(())) => {
                state.problems.remove(what);
                if state.problems.is_empty() {
                    info!(dependency = what, "{what} answers; health SERVING");
                } else {
                    info!(dependency = what, still = ?state.problems.keys().collect::<Vec<_>>(), "{what} answers");
                }
            }
            (before, Err(problem)) => {
                if before != Some(&problem) {
                    warn!(dependency = what, %problem, "{what} fails; health NOT_SERVING until it answers");
                }
                state.problems.insert(what.to_owned(), problem);
            }
        }
        self.publish(&state).await;
    }

    /// Whether every name is SERVING now.
    pub async fn serving(&self) -> bool {
        self.state.lock().await.status() == ServingStatus::Serving
    }

    async fn publish(&self, state: &State) {
        let status = state.status();
        for name in self.names.iter() {
            self.reporter.set_service_status(name, status).await;
        }
    }
}

/// Checks `what` with `check` every `every`, and at once when `nudge` is
/// notified (a call just failed on it), recording each outcome in `health`,
/// until `stop` fires.
pub async fn watch_dependency<F, Fut>(
    health: Health,
    what: &'static str,
    every: Duration,
    nudge: Arc<Notify>,
    stop: CancellationToken,
    check: F,
) where
    F: Fn() -> Fut + Send,
    Fut: Future<Output = Result<(), String>> + Send,
{
    loop {
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            outcome = check() => outcome,
        };
        health.depends(what, outcome).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
            () = nudge.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_server::Health as _;

    async fn status(service: &HealthService, name: &str) -> i32 {
        service
            .check(tonic::Request::new(HealthCheckRequest {
                service: name.to_owned(),
            }))
            .await
            .expect("known name")
            .into_inner()
            .status
    }

    #[tokio::test]
    async fn every_name_follows_the_dependency_and_draining_is_for_good() {
        let names = ["demo.v1.A", "demo.v1.B"];
        let health = Health::new(&names).await;
        let service = health.checks();
        for name in ["", "demo.v1.A", "demo.v1.B"] {
            assert_eq!(status(&service, name).await, ServingStatus::Serving as i32);
        }
        health.depends("the database", Err("gone".to_owned())).await;
        for name in ["", "demo.v1.A", "demo.v1.B"] {
            assert_eq!(
                status(&service, name).await,
                ServingStatus::NotServing as i32
            );
        }
        // Two dependencies: SERVING only once both answer.
        health.depends("the leases", Err("late".to_owned())).await;
        health.depends("the database", Ok(())).await;
        assert!(!health.serving().await, "the leases still fail");
        health.depends("the leases", Ok(())).await;
        assert!(health.serving().await);
        health.drain().await;
        health.depends("the database", Ok(())).await;
        for name in ["", "demo.v1.A", "demo.v1.B"] {
            assert_eq!(
                status(&service, name).await,
                ServingStatus::NotServing as i32
            );
        }
    }
}
