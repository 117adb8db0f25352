//! The TLS flags both services take.

use std::path::PathBuf;

use clap::Args;

use crate::tls::{ClientTls, PeerRoles, ServerTls};

/// TLS for this process's listeners and for its own calls.
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// PEM certificate (chain) this process serves TLS with, on every listener;
    /// with --tls-key. Without it, plaintext.
    #[arg(long, env = "CHORUS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "CHORUS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA whose client certificates are accepted (mTLS); what such a client
    /// may do is set with --tls-client-role.
    #[arg(long, env = "CHORUS_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// NAME=ROLE: a client certificate whose subject CN or DNS name is NAME acts
    /// with ROLE (admin, operator, viewer, tool-exec); repeatable or comma-separated.
    #[arg(
        long,
        env = "CHORUS_TLS_CLIENT_ROLES",
        value_delimiter = ',',
        requires = "tls_client_ca"
    )]
    pub tls_client_role: Vec<String>,
    /// PEM CA that signed the services' certificates: this process calls them
    /// over TLS with it, and agents are given it (CHORUS_TLS_CA).
    #[arg(long, env = "CHORUS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM certificate this process presents when it calls a service (mTLS);
    /// with --tls-client-key.
    #[arg(long, env = "CHORUS_TLS_CLIENT_CERT", requires = "tls_client_key")]
    pub tls_client_cert: Option<PathBuf>,
    /// PEM private key of --tls-client-cert.
    #[arg(long, env = "CHORUS_TLS_CLIENT_KEY", requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The server side; None: plaintext.
    pub fn server(&self) -> Option<ServerTls> {
        Some(ServerTls {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }

    pub fn client(&self) -> ClientTls {
        ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_client_cert.clone(),
            key: self.tls_client_key.clone(),
        }
    }

    pub fn peers(&self) -> Result<PeerRoles, String> {
        PeerRoles::parse(&self.tls_client_role)
    }
}
