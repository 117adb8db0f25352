//! `chorus-health-probe`: asks a Chorus service's gRPC health service about one
//! service name and exits 0 only when the answer is SERVING.
//!
//! Shipped in both images so that a container health check (compose, podman,
//! docker) or a Kubernetes `exec` probe needs no other program. Kubernetes'
//! own `grpc:` probe does the same without it, but speaks only plaintext.
//!
//! Exit codes: 0 SERVING; 1 any other status (NOT_SERVING, SERVICE_UNKNOWN, or the
//! name is not served: NOT_FOUND); 2 usage; 3 the service cannot be reached or
//! the call failed otherwise.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Checks gRPC health: exit 0 when SERVING, 1 when not, 3 when unreachable.
#[derive(Debug, Parser)]
#[command(name = "chorus-health-probe", version)]
struct Cli {
    /// Address of the service: `host:port`, `http://host:port` or `https://host:port`.
    #[arg(default_value = "127.0.0.1:50051", env = "CHORUS_HEALTH_PROBE_ADDR")]
    addr: String,
    /// Service name to ask about; "" (the default) is the server as a whole.
    #[arg(long, default_value = "", env = "CHORUS_HEALTH_PROBE_SERVICE")]
    service: String,
    /// Seconds for connecting and for the call, each.
    #[arg(long, default_value_t = 3, env = "CHORUS_HEALTH_PROBE_TIMEOUT_SECS")]
    timeout_secs: u64,
    /// PEM CA of the service's certificate, for an `https://` address (else
    /// the system's roots).
    #[arg(long, env = "CHORUS_TLS_CA")]
    tls_ca: Option<PathBuf>,
}

/// Why the probe did not see SERVING.
#[derive(Debug)]
enum Failure {
    Usage(String),
    Unreachable(String),
    NotServing(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::NotServing(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Unreachable(_) => 3,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::Usage(m) | Failure::Unreachable(m) | Failure::NotServing(m) => m,
        }
    }
}

/// `host:port` gets `http://`; an address with a scheme is kept.
fn uri(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    }
}

/// What the service's name is called in messages.
fn shown(service: &str) -> &str {
    if service.is_empty() {
        "the server (\"\")"
    } else {
        service
    }
}

async fn probe(cli: &Cli) -> Result<(), Failure> {
    let uri = uri(&cli.addr);
    let timeout = Duration::from_secs(cli.timeout_secs.max(1));
    let mut endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| Failure::Usage(format!("'{}' is not a valid address: {e}", cli.addr)))?
        .connect_timeout(timeout)
        .timeout(timeout);
    if uri.starts_with("https://") {
        let tls = match &cli.tls_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Failure::Usage(format!("cannot read the CA {}: {e}", path.display()))
                })?;
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
            }
            None => ClientTlsConfig::new().with_enabled_roots(),
        };
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| Failure::Usage(format!("TLS for {uri}: {e}")))?;
    }
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Failure::Unreachable(format!("cannot reach {uri}: {}", chain(&e))))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: cli.service.clone(),
        })
        .await;
    match answer {
        Ok(answer) => {
            let status = answer.into_inner().status();
            if status == ServingStatus::Serving {
                Ok(())
            } else {
                Err(Failure::NotServing(format!(
                    "{} at {uri} is {}",
                    shown(&cli.service),
                    status.as_str_name()
                )))
            }
        }
        Err(status) if status.code() == tonic::Code::NotFound => Err(Failure::NotServing(format!(
            "{uri} does not report health for {}",
            shown(&cli.service)
        ))),
        Err(status) => Err(Failure::Unreachable(format!(
            "health check of {} at {uri} failed: {:?}: {}",
            shown(&cli.service),
            status.code(),
            status.message()
        ))),
    }
}

/// An error with its sources, `a: b: c`.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chorus-health-probe: cannot start: {e}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(probe(&cli)) {
        Ok(()) => {
            println!("{} at {} is SERVING", shown(&cli.service), uri(&cli.addr));
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("chorus-health-probe: {}", failure.message());
            ExitCode::from(failure.code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_address_is_plaintext_and_a_scheme_is_kept() {
        assert_eq!(uri("127.0.0.1:50051"), "http://127.0.0.1:50051");
        assert_eq!(uri("https://chorus:50051"), "https://chorus:50051");
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable() {
        // A port that was free a moment ago: bound, then released.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let cli = Cli::parse_from([
            "chorus-health-probe",
            &addr.to_string(),
            "--timeout-secs",
            "1",
        ]);
        let failure = probe(&cli).await.expect_err("nothing serves there");
        assert_eq!(failure.code(), 3, "{failure:?}");
    }
}
