//! The listener's own PostgreSQL connection (tokio-postgres), from the same
//! libpq URL the store's connections (diesel, libpq) use, with TLS as the URL's
//! `sslmode` says, as libpq reads it:
//!
//! | sslmode | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | no | — |
//! | `allow`, `prefer` (libpq's default) | when the server offers it | not checked |
//! | `require` | always | not checked (checked when `sslrootcert` names a file, as libpq does) |
//! | `verify-ca`, `verify-full` | always | checked against `sslrootcert`, else the Mozilla roots; the host name too |
//!
//! Parameters tokio-postgres has no use for (`sslrootcert`, `sslcert`, …) are
//! read here or left out, instead of failing the connection.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::SslMode;

/// How the listener connects.
pub struct Connect {
    pub config: tokio_postgres::Config,
    /// None: without TLS.
    pub tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

/// Reads a `postgres://` URL.
///
/// # Errors
/// The URL does not parse, or `sslrootcert` cannot be read; the message says
/// which.
pub fn from_url(url: &str) -> Result<Connect, String> {
    let parsed =
        url::Url::parse(url).map_err(|e| format!("the database URL does not parse: {e}"))?;
    let (mut config, mut ssl) = from_parts(&parsed)?;
    libpq_defaults(&mut config, &mut ssl, &parsed);
    let (mode, tls) = ssl.client()?;
    config.ssl_mode(mode);
    Ok(Connect {
        config,
        tls: tls.map(tokio_postgres_rustls::MakeRustlsConnect::new),
    })
}

/// What the URL says of TLS: `sslmode` (libpq's default `prefer`) and
/// `sslrootcert`.
struct Ssl {
    mode: String,
    root: Option<String>,
}

/// The connection settings the URL's parts and query name.
fn from_parts(parsed: &url::Url) -> Result<(tokio_postgres::Config, Ssl), String> {
    let mut config = tokio_postgres::Config::new();
    let decode = |s: &str| percent_encoding_decode(s);
    if let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) {
        config.host(decode(host));
    }
    if let Some(port) = parsed.port() {
        config.port(port);
    }
    if !parsed.username().is_empty() {
        config.user(decode(parsed.username()));
    }
    if let Some(password) = parsed.password() {
        config.password(decode(password));
    }
    let dbname = parsed.path().trim_start_matches('/');
    if !dbname.is_empty() {
        config.dbname(decode(dbname));
    }
    let mut ssl = Ssl {
        mode: "prefer".to_owned(),
        root: None,
    };
    for (key, value) in parsed.query_pairs() {
        let value = value.into_owned();
        match key.as_ref() {
            "host" => {
                config.host(&value);
            }
            "port" => {
                config.port(
                    value
                        .parse()
                        .map_err(|_| format!("port '{value}' is not a number"))?,
                );
            }
            "user" => {
                config.user(&value);
            }
            "password" => {
                config.password(value.as_bytes());
            }
            "dbname" => {
                config.dbname(&value);
            }
            "options" => {
                config.options(&value);
            }
            "application_name" => {
                config.application_name(&value);
            }
            "connect_timeout" => {
                if let Ok(secs) = value.parse::<u64>() {
                    config.connect_timeout(Duration::from_secs(secs));
                }
            }
            "sslmode" => ssl.mode = value,
            "sslrootcert" => ssl.root = Some(value),
            _ => {}
        }
    }
    Ok((config, ssl))
}

/// What the URL leaves out, libpq takes from its environment variables (a
/// password from PGPASSWORD, or the password file), then defaults.
fn libpq_defaults(config: &mut tokio_postgres::Config, ssl: &mut Ssl, parsed: &url::Url) {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if config.get_hosts().is_empty() {
        config.host(env("PGHOST").unwrap_or_else(|| "/var/run/postgresql".to_owned()));
    }
    if config.get_ports().is_empty()
        && let Some(port) = env("PGPORT").and_then(|p| p.parse().ok())
    {
        config.port(port);
    }
    if config.get_user().is_none()
        && let Some(user) = env("PGUSER").or_else(|| env("USER"))
    {
        config.user(&user);
    }
    if config.get_dbname().is_none()
        && let Some(dbname) = env("PGDATABASE")
    {
        config.dbname(&dbname);
    }
    if config.get_options().is_none()
        && let Some(options) = env("PGOPTIONS")
    {
        config.options(&options);
    }
    if !parsed.query_pairs().any(|(k, _)| k == "sslmode")
        && let Some(mode) = env("PGSSLMODE")
    {
        ssl.mode = mode;
    }
    if ssl.root.is_none() {
        ssl.root = env("PGSSLROOTCERT");
    }
    if config.get_password().is_none() {
        if let Some(password) = env("PGPASSWORD") {
            config.password(password);
        } else if let Some(password) = password_file(config, env("PGPASSFILE")) {
            config.password(password);
        }
    }
}

impl Ssl {
    /// The TLS of the connection, as libpq's `sslmode` means it.
    fn client(&self) -> Result<(SslMode, Option<rustls::ClientConfig>), String> {
        let root = &self.root;
        let roots = || -> Result<rustls::RootCertStore, String> {
            let mut store = rustls::RootCertStore::empty();
            match &root {
                Some(path) if path != "system" => {
                    for cert in CertificateDer::pem_file_iter(path)
                        .map_err(|e| format!("sslrootcert {path}: {e}"))?
                    {
                        let cert = cert.map_err(|e| format!("sslrootcert {path}: {e}"))?;
                        store
                            .add(cert)
                            .map_err(|e| format!("sslrootcert {path}: {e}"))?;
                    }
                }
                _ => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            Ok(store)
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = || {
            rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))
        };
        let unchecked = || -> Result<rustls::ClientConfig, String> {
            Ok(builder()?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(Arc::clone(&provider))))
                .with_no_client_auth())
        };
        let checked = || -> Result<rustls::ClientConfig, String> {
            Ok(builder()?
                .with_root_certificates(roots()?)
                .with_no_client_auth())
        };
        let answer = match self.mode.as_str() {
            "disable" => (SslMode::Disable, None),
            "allow" | "prefer" => (SslMode::Prefer, Some(unchecked()?)),
            "require" if root.is_some() => (SslMode::Require, Some(checked()?)),
            "require" => (SslMode::Require, Some(unchecked()?)),
            "verify-ca" | "verify-full" => (SslMode::Require, Some(checked()?)),
            other => return Err(format!("sslmode '{other}' is not one libpq knows")),
        };
        Ok(answer)
    }
}

/// The password libpq's password file (`PGPASSFILE`, else `~/.pgpass`) has
/// for this connection: the first line `host:port:database:user:password`
/// that matches (`*` matches anything).
fn password_file(config: &tokio_postgres::Config, file: Option<String>) -> Option<String> {
    let file = file.or_else(|| {
        std::env::var("HOME")
            .ok()
            .map(|home| format!("{home}/.pgpass"))
    })?;
    let text = std::fs::read_to_string(file).ok()?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default().to_owned();
    let dbname = config
        .get_dbname()
        .map_or_else(|| user.clone(), str::to_owned);
    let wanted = [host, port, dbname, user];
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let fields = split_pgpass(line);
            if fields.len() != 5 {
                return None;
            }
            let matches = wanted
                .iter()
                .zip(&fields)
                .all(|(want, field)| field == "*" || field == want);
            matches.then(|| fields[4].clone())
        })
}

/// The fields of a password file line (`:` separates, `\` escapes).
fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(field)) = (chars.next(), fields.last_mut()) {
                    field.push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    fields
}

/// `%xx` sequences of a URL part, decoded.
fn percent_encoding_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map_or_else(|| s.to_owned(), |(_, v)| v.into_owned())
}

/// Encrypts without checking the server's certificate (libpq's `prefer` and
/// `require`): the handshake's signatures are still verified.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_libpq_url_becomes_the_same_connection() {
        let c = from_url(
            "postgres://chorus:p%40ss@db.local:6543/chorus?options=-c%20search_path%3Ds1&sslrootcert=/nonexistent-is-read-only-for-verify&application_name=x&sslmode=disable",
        )
        .expect("parses");
        assert_eq!(c.config.get_user(), Some("chorus"));
        assert_eq!(c.config.get_password(), Some(&b"p@ss"[..]));
        assert_eq!(c.config.get_dbname(), Some("chorus"));
        assert_eq!(c.config.get_ports(), [6543]);
        assert_eq!(c.config.get_options(), Some("-c search_path=s1"));
        assert!(c.tls.is_none(), "sslmode=disable");
    }

    #[test]
    fn a_password_file_line_that_matches_gives_the_password() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:chorus:nope\ndb.local:*:chorus:chorus:s\\:cret\n",
        )
        .expect("file");
        let c = from_url("postgres://chorus@db.local/chorus?sslmode=disable").expect("parses");
        assert_eq!(
            password_file(&c.config, Some(file.display().to_string())).as_deref(),
            Some("s:cret")
        );
        let elsewhere =
            from_url("postgres://chorus@db.remote/chorus?sslmode=disable").expect("parses");
        assert_eq!(
            password_file(&elsewhere.config, Some(file.display().to_string())),
            None
        );
    }

    #[test]
    fn sslmode_chooses_tls_as_libpq_does() {
        for (mode, tls, ssl) in [
            ("prefer", true, SslMode::Prefer),
            ("allow", true, SslMode::Prefer),
            ("require", true, SslMode::Require),
            ("verify-full", true, SslMode::Require),
            ("disable", false, SslMode::Disable),
        ] {
            let c = from_url(&format!("postgres://u@h/db?sslmode={mode}")).expect(mode);
            assert_eq!(c.tls.is_some(), tls, "{mode}");
            assert_eq!(c.config.get_ssl_mode(), ssl, "{mode}");
        }
        let bad = from_url("postgres://u@h/db?sslmode=sometimes")
            .err()
            .expect("refused");
        assert!(bad.contains("sometimes"), "{bad}");
        let missing = from_url("postgres://u@h/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem")
            .err()
            .expect("refused");
        assert!(missing.contains("/no/such/ca.pem"), "{missing}");
    }
}
