//! TLS on every listener when certificates are given; client certificates as
//! credentials (mTLS) for services; and the client side, for a process's own
//! calls and for the agents it starts.

use std::path::{Path, PathBuf};

use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::transport::{
    Certificate, CertificateDer, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig,
};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::principal::Principal;
use crate::role::Role;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// A server's certificate, and the CA its clients' certificates must come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerTls {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA; clients may then present a certificate it signed. Optional for
    /// them: a caller without one presents a bearer credential instead.
    pub client_ca: Option<PathBuf>,
}

impl ServerTls {
    /// The tonic configuration, the files read now.
    pub fn config(&self) -> Result<ServerTlsConfig, TlsError> {
        let identity = Identity::from_pem(
            read("the TLS certificate", &self.cert)?,
            read("the TLS key", &self.key)?,
        );
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            config = config
                .client_ca_root(Certificate::from_pem(read("the client CA", ca)?))
                .client_auth_optional(true);
        }
        Ok(config)
    }
}

/// How this process calls the services: the CA that signed their certificates
/// (TLS is on when one is given) and, for mTLS, its own certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl ClientTls {
    pub fn enabled(&self) -> bool {
        self.ca.is_some()
    }

    /// `addr` (`host:port` or a URL) as the URL to call: `https://` with TLS.
    pub fn url(&self, addr: &str) -> String {
        match addr.split_once("://") {
            Some(_) => addr.to_owned(),
            None if self.enabled() => format!("https://{addr}"),
            None => format!("http://{addr}"),
        }
    }

    /// An endpoint for `addr`, with TLS when it is on.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, TlsError> {
        let url = self.url(addr);
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| TlsError::Invalid(format!("'{addr}' is not a valid address: {e}")))?;
        if !url.starts_with("https://") {
            return Ok(endpoint);
        }
        let mut config = ClientTlsConfig::new();
        match &self.ca {
            Some(ca) => config = config.ca_certificate(Certificate::from_pem(read("the CA", ca)?)),
            None => config = config.with_enabled_roots(),
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            config = config.identity(Identity::from_pem(
                read("the client certificate", cert)?,
                read("the client key", key)?,
            ));
        }
        endpoint
            .tls_config(config)
            .map_err(|e| TlsError::Invalid(format!("TLS for {addr}: {e}")))
    }
}

/// Client certificate names that act with a role: a certificate (verified
/// against the server's client CA) whose subject CN or a DNS name is one of
/// them is that role's principal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerRoles(Vec<(String, Role)>);

impl PeerRoles {
    /// From `NAME=ROLE` entries.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        entries
            .iter()
            .filter(|e| !e.trim().is_empty())
            .map(|entry| {
                let (name, role) = entry.split_once('=').ok_or_else(|| {
                    format!("'{entry}' is not NAME=ROLE (e.g. tool-exec=tool-exec)")
                })?;
                Ok((name.trim().to_owned(), role.trim().parse::<Role>()?))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(Self)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The principal of the connection's client certificate, if it has one
    /// that is named here.
    pub fn principal(&self, extensions: &http::Extensions) -> Option<Principal> {
        if self.0.is_empty() {
            return None;
        }
        let info = extensions.get::<TlsConnectInfo<TcpConnectInfo>>()?;
        let certs = info.peer_certs()?;
        let names = names(certs.first()?);
        self.0
            .iter()
            .find(|(name, _)| names.iter().any(|n| n == name))
            .map(|(name, role)| Principal::Key {
                id: format!("cert:{name}"),
                name: name.clone(),
                role: *role,
            })
    }
}

/// The subject CNs and DNS names of a certificate.
fn names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = X509Certificate::from_der(cert.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        names.extend(san.value.general_names.iter().filter_map(|n| match n {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        }));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_roles_read_name_equals_role() {
        let roles = PeerRoles::parse(&["tool-exec=tool-exec".into(), " ci = operator ".into()])
            .expect("parses");
        assert_eq!(
            roles,
            PeerRoles(vec![
                ("tool-exec".into(), Role::ToolExec),
                ("ci".into(), Role::Operator)
            ])
        );
        assert!(
            PeerRoles::parse(&["ci".into()])
                .expect_err("no role")
                .contains("NAME=ROLE")
        );
        assert!(
            PeerRoles::parse(&["ci=root".into()])
                .expect_err("bad role")
                .contains("unknown role")
        );
    }

    #[test]
    fn urls_follow_tls() {
        let plain = ClientTls::default();
        assert_eq!(plain.url("127.0.0.1:1"), "http://127.0.0.1:1");
        let tls = ClientTls {
            ca: Some("/ca.pem".into()),
            ..ClientTls::default()
        };
        assert_eq!(tls.url("127.0.0.1:1"), "https://127.0.0.1:1");
        assert_eq!(tls.url("http://x:1"), "http://x:1");
    }
}
