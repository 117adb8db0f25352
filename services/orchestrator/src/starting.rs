//! A first start whose PostgreSQL database does not answer yet (it starts
//! beside Chorus, a network policy is being applied, its password is not in
//! place): instead of exiting — which Kubernetes would answer with restarts
//! and a back-off — the port is served at once, health NOT_SERVING and every
//! other call UNAVAILABLE saying what it waits for, while the database is
//! tried again with a backoff, up to `--database-wait-secs`. Then the port is
//! handed on to the real services, as after a start the database watch
//! keeps the port up through an outage.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::server::{OrchestratorConfig, ReplicaLock, SERVICES, open_replica};
use crate::store::{Store, StoreError};

/// The first wait between tries, and the longest.
const FIRST_WAIT: Duration = Duration::from_secs(1);
const LONGEST_WAIT: Duration = Duration::from_secs(10);

/// The store opened as this replica (and the port, given back), once the
/// database answers; None when a shutdown was asked for first.
pub(crate) async fn open_when_it_answers(
    config: &OrchestratorConfig,
    listener: TcpListener,
    stop: &CancellationToken,
) -> anyhow::Result<Option<(Store, ReplicaLock, TcpListener)>> {
    let first = match open_replica(config).await {
        Ok((store, lock)) => return Ok(Some((store, lock, listener))),
        Err(e) if unreachable(&e) && !config.database_wait.is_zero() => e,
        Err(e) => return Err(e),
    };
    let why = format!(
        "the orchestrator is starting and waits for its database: {first:#}; it tries again for up to {} s (--database-wait-secs)",
        config.database_wait.as_secs()
    );
    let addr = listener.local_addr()?;
    warn!(%addr, error = %format!("{first:#}"), wait_secs = config.database_wait.as_secs(), "the database does not answer: the port answers health NOT_SERVING (other calls UNAVAILABLE) while it is tried again");
    let listener = Arc::new(listener);
    let answered = CancellationToken::new();
    let waiting = tokio::spawn(serve_waiting(
        Arc::clone(&listener),
        config.tls.clone(),
        why,
        answered.clone(),
    ));
    let deadline = tokio::time::Instant::now() + config.database_wait;
    let mut wait = FIRST_WAIT;
    let outcome = loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break Ok(None),
        }
        match open_replica(config).await {
            Ok(opened) => {
                info!("the database answers: starting");
                break Ok(Some(opened));
            }
            Err(e) if unreachable(&e) && tokio::time::Instant::now() < deadline => {
                warn!(error = %format!("{e:#}"), retry_in = ?wait, "the database still does not answer");
                wait = (wait * 2).min(LONGEST_WAIT);
            }
            Err(e) => {
                break Err(e.context(format!(
                    "gave up waiting for the database after {} s (--database-wait-secs)",
                    config.database_wait.as_secs()
                )));
            }
        }
    };
    answered.cancel();
    match waiting.await {
        Ok(Err(e)) => warn!(error = %e, "the port's answer while waiting for the database failed"),
        Err(e) => warn!(error = %e, "the port's answer while waiting for the database failed"),
        Ok(Ok(())) => {}
    }
    let listener = Arc::try_unwrap(listener)
        .map_err(|_| anyhow::anyhow!("the port is still held by the wait for the database"))?;
    outcome.map(|opened| opened.map(|(store, lock)| (store, lock, listener)))
}

/// Whether opening the store failed because the database does not answer
/// (as opposed to a wrong URL or a failed migration, which waiting mends not).
fn unreachable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<StoreError>(),
            Some(StoreError::Unreachable(_))
        )
    })
}

/// Health on `listener` (every service NOT_SERVING) and UNAVAILABLE with
/// `why` for any other call, until `done`; then the connections are closed
/// (GOAWAY: clients connect again, to the services).
async fn serve_waiting(
    listener: Arc<TcpListener>,
    tls: Option<chorus_auth::tls::ServerTls>,
    why: String,
    done: CancellationToken,
) -> anyhow::Result<()> {
    use tonic_health::ServingStatus;
    let (reporter, health) = tonic_health::server::health_reporter();
    for service in std::iter::once("").chain(SERVICES.iter().copied()) {
        reporter
            .set_service_status(service, ServingStatus::NotServing)
            .await;
    }
    let router = tonic::service::Routes::new(health)
        .into_axum_router()
        .fallback(move || {
            let status = tonic::Status::unavailable(why.clone());
            async move { status.into_http::<tonic::body::Body>() }
        });
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        server = server.tls_config(tls.config()?)?;
    }
    server
        .add_routes(tonic::service::Routes::from(router))
        .serve_with_incoming_shutdown(Accepting(listener), done.cancelled_owned())
        .await?;
    Ok(())
}

/// Connections accepted on a listener that outlives the server.
struct Accepting(Arc<TcpListener>);

impl Stream for Accepting {
    type Item = io::Result<TcpStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0
            .poll_accept(cx)
            .map(|accepted| Some(accepted.map(|(stream, _)| stream)))
    }
}
