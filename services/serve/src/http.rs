//! A plain HTTP face beside the gRPC port (the MCP endpoint): HTTP/1.1 and
//! HTTP/2 on a listener of its own, TLS with the services' certificate when
//! they have one, connections bounded in number and in how long a client may
//! take to send its request head or its TLS handshake, and a stop that ends
//! it (connections finish the request in hand, within a grace).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chorus_auth::tls::ServerTls;
use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How long a client has for its TLS handshake, and for a request's head.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long connections get to finish after the stop.
const GRACE: Duration = Duration::from_secs(5);

/// The rustls configuration of `tls` (HTTP/2 and HTTP/1.1 offered by ALPN).
pub fn rustls_config(tls: &ServerTls) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| anyhow::anyhow!("the TLS certificate {}: {e}", tls.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| anyhow::anyhow!("the TLS key {}: {e}", tls.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `service` on `listener` (over TLS with `tls`) until `stop` fires,
/// holding at most `max_connections` at once (one more is closed at once).
/// `name` names the face in the log.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
    name: &'static str,
    stop: CancellationToken,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let places = Arc::new(Semaphore::new(max_connections));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let connections = tokio_util::task::TaskTracker::new();
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, tls = acceptor.is_some(), "{name} serving");
    }
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or the like: the next accept may do.
                    warn!(error = %e, "{name}: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            debug!(%peer, "{name}: at its connection limit; a connection is closed");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_connection(
            stream,
            peer,
            TowerToHyperService::new(service.clone()),
            acceptor.clone(),
            name,
            stop.clone(),
            place,
        ));
    }
    connections.close();
    if tokio::time::timeout(GRACE, connections.wait())
        .await
        .is_err()
    {
        warn!(grace = ?GRACE, "{name}: connections still open after the grace; dropped");
    }
}

/// Serves one connection (after its TLS handshake, when TLS is on) until it
/// ends; at the stop, the request in hand is answered, then it ends.
async fn serve_connection<S, B>(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    service: TowerToHyperService<S>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    name: &'static str,
    stop: CancellationToken,
    _place: tokio::sync::OwnedSemaphorePermit,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE);
    let stream = match acceptor {
        Some(acceptor) => {
            let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await
            else {
                debug!(%peer, "{name}: TLS handshake failed or took too long");
                return;
            };
            Either::Right(stream)
        }
        None => Either::Left(stream),
    };
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(GRACE, connection).await;
        }
    }
}
