//! A first start whose PostgreSQL database does not answer yet (it starts
//! beside Chorus, a network policy is being applied, its password is not in
//! place): instead of exiting — which Kubernetes would answer with restarts
//! and a back-off — the port is served at once, health NOT_SERVING and every
//! other call UNAVAILABLE saying what it waits for, while the database is
//! tried again with a backoff, up to `--database-wait-secs`. Then the port is
//! handed on to the real services, as after a start the database watch
//! keeps the port up through an outage. Opening the store is this
//! module's too: with the secrets key, as this replica, holding what keeps a
//! second process from acting as it.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::history::relay::Relay;
use crate::secrets::{KeySource, load};
use crate::store::{Backend, ReplicaIdentity, Store, StoreError};

/// How long the connections taken while waiting get to close before the
/// services take the port.
const LAST_WORDS: Duration = Duration::from_secs(2);

/// The first wait between tries, and the longest.
const FIRST_WAIT: Duration = Duration::from_secs(1);
const LONGEST_WAIT: Duration = Duration::from_secs(10);

/// What opening the store as this replica takes.
#[derive(Debug)]
pub(crate) struct Opening<'a> {
    pub database_url: &'a str,
    /// The key provider API keys are sealed with.
    pub secrets_key: &'a KeySource,
    /// None: the host name with PostgreSQL, `local` with SQLite.
    pub replica_id: Option<&'a str>,
    pub lease: Duration,
    /// How long to wait for a database that does not answer.
    pub wait: Duration,
    /// The port's TLS, for its answers while it waits.
    pub tls: Option<&'a chorus_auth::tls::ServerTls>,
    /// The services the port will serve (NOT_SERVING while it waits).
    pub services: &'a [&'a str],
}

/// The store opened as this replica (and the port, given back), once the
/// database answers; None when a shutdown was asked for first.
pub(crate) async fn open_when_it_answers(
    config: &Opening<'_>,
    listener: TcpListener,
    stop: &CancellationToken,
) -> anyhow::Result<Option<(Store, ReplicaLock, TcpListener)>> {
    let first = match open_replica(config).await {
        Ok((store, lock)) => return Ok(Some((store, lock, listener))),
        Err(e) if unreachable(&e) && !config.wait.is_zero() => e,
        Err(e) => return Err(e),
    };
    let why = format!(
        "the orchestrator is starting and waits for its database: {first:#}; it tries again for up to {} s (--database-wait-secs)",
        config.wait.as_secs()
    );
    let addr = listener.local_addr()?;
    warn!(%addr, error = %format!("{first:#}"), wait_secs = config.wait.as_secs(), "the database does not answer: the port answers health NOT_SERVING (other calls UNAVAILABLE) while it is tried again");
    let listener = Arc::new(listener);
    let answered = CancellationToken::new();
    let waiting = tokio::spawn(serve_waiting(
        Arc::clone(&listener),
        config.tls.cloned(),
        config.services.iter().map(|s| (*s).to_owned()).collect(),
        why,
        answered.clone(),
    ));
    let deadline = tokio::time::Instant::now() + config.wait;
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
                    config.wait.as_secs()
                )));
            }
        }
    };
    // Its connections are told to go (GOAWAY); one that never says anything
    // is not waited for.
    answered.cancel();
    let mut waiting = waiting;
    match tokio::time::timeout(LAST_WORDS, &mut waiting).await {
        Ok(Ok(Err(e))) => {
            warn!(error = %e, "the port's answer while waiting for the database failed")
        }
        Ok(Err(e)) => warn!(error = %e, "the port's answer while waiting for the database failed"),
        Ok(Ok(Ok(()))) => {}
        Err(_) => {
            waiting.abort();
            let _ = waiting.await;
        }
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
    services: Vec<String>,
    why: String,
    done: CancellationToken,
) -> anyhow::Result<()> {
    use tonic_health::ServingStatus;
    let (reporter, health) = tonic_health::server::health_reporter();
    for service in std::iter::once("").chain(services.iter().map(String::as_str)) {
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

/// What keeps a second process from acting as this replica.
pub(crate) enum ReplicaLock {
    /// PostgreSQL: the listener's connection holds the replica's advisory lock.
    Relay(Box<Relay>),
    /// SQLite: an exclusive lock on `<database>.lock`, held while it lives.
    File(nix::fcntl::Flock<std::fs::File>),
}

/// Takes the SQLite database's orchestrator lock.
fn lock_sqlite(store: &crate::store::Store) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    let Some(database) = store.sqlite_path() else {
        anyhow::bail!("no SQLite file to lock");
    };
    let mut path = database.as_os_str().to_owned();
    path.push(".lock");
    let path = PathBuf::from(path);
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
    }
    .map_err(|e| anyhow::anyhow!("cannot open the lock file {}: {e}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => anyhow::bail!(
            "another orchestrator uses the SQLite database {} (it holds {}); SQLite serves one orchestrator: stop the other one, or use PostgreSQL to run replicas",
            database.display(),
            path.display()
        ),
        Err((_, e)) => anyhow::bail!("cannot lock {}: {e}", path.display()),
    }
}

/// Opens the store as this replica and takes what keeps a second process
/// from acting as it: the replica's advisory lock, held by the connection
/// that listens for the other replicas' events (PostgreSQL), or a lock file
/// beside the database (SQLite: one orchestrator per file).
async fn open_replica(opening: &Opening<'_>) -> anyhow::Result<(Store, ReplicaLock)> {
    let store = open_store(opening.database_url, opening.secrets_key).await?;
    let replica_id = match (opening.replica_id, store.backend()) {
        (Some(id), _) => id.to_owned(),
        (None, Backend::Sqlite) => "local".to_owned(),
        (None, Backend::Postgres) => host_name().map_err(anyhow::Error::msg)?,
    };
    let store = store.as_replica(ReplicaIdentity::new(&replica_id, opening.lease));
    let replica_lock = match store.backend() {
        Backend::Postgres => ReplicaLock::Relay(Box::new(Relay::start(&store).await?)),
        Backend::Sqlite => ReplicaLock::File(lock_sqlite(&store)?),
    };
    store.register_replica().await?;
    info!(backend = ?store.backend(), replica = %replica_id, lease = ?opening.lease, "store open");
    match store.backend() {
        Backend::Postgres => {
            info!(replica = %replica_id, "PostgreSQL: replicas may share this database, each with its own --replica-id")
        }
        Backend::Sqlite => info!("SQLite serves one orchestrator; use PostgreSQL to run replicas"),
    }
    Ok((store, replica_lock))
}

/// Opens the store with provider keys sealed by the key `source` names, at
/// start: says which key is used (and that a new one was made), seals the keys
/// an earlier version stored in clear (one transaction, logged with a count),
/// and warns about stored keys this key does not open — runs with those
/// providers fail to start until the right key is given or the key is set again.
///
/// # Errors
/// The key cannot be had, or the store cannot be opened or written.
pub async fn open_store(url: &str, source: &KeySource) -> anyhow::Result<Store> {
    let loaded = load(source)?;
    let origin = loaded.secrets.origin().to_owned();
    if loaded.created {
        info!(key = %origin, "made a new secrets key for provider API keys; back it up: without it the stored keys cannot be read");
    }
    info!(key = %origin, "provider API keys are encrypted at rest with {origin}");
    let store = Store::open(url, loaded.secrets).await?;
    let sealed = store.seal_plain_api_keys().await?;
    if sealed > 0 {
        info!(
            count = sealed,
            "encrypted {sealed} provider API key(s) an earlier version stored in clear text"
        );
    }
    let unreadable = store.undecryptable_api_keys().await?;
    if !unreadable.is_empty() {
        warn!(
            count = unreadable.len(),
            providers = %unreadable.join(", "),
            "{} stored provider API key(s) do not decrypt with {origin}; runs with those providers will not start: give the key they were stored with, or set them again with UpdateProvider",
            unreadable.len()
        );
    }
    Ok(store)
}

/// This host's name: the default replica id with PostgreSQL.
///
/// # Errors
/// It cannot be read, or is not a valid replica id; the message says to give
/// `--replica-id`.
pub fn host_name() -> Result<String, String> {
    let name = nix::unistd::gethostname().map_err(|e| {
        format!("cannot read the host name for the replica id ({e}); give --replica-id")
    })?;
    let name = name.to_string_lossy().into_owned();
    check_replica_id(&name).map_err(|e| format!("{e}; give --replica-id"))?;
    Ok(name)
}

/// A replica id: 1 to 128 letters, digits, `.`, `_` or `-`.
///
/// # Errors
/// The message says what is wrong.
pub fn check_replica_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err(format!(
            "replica id '{id}': give 1 to 128 characters (--replica-id)"
        ));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "replica id '{id}': '{bad}' is not allowed; use letters, digits, '.', '_' and '-' (--replica-id)"
        ));
    }
    Ok(())
}
