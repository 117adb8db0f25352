//! Ed25519 key pairs: generation, PEM encoding and the data-dir key files.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use rand_core::OsRng;

use crate::{RunTokenSigner, RunTokenVerifier};

/// File name of the private key in a data directory (mode 0600).
pub const PRIVATE_KEY_FILE: &str = "run-token.key";
/// File name of the public key in a data directory.
pub const PUBLIC_KEY_FILE: &str = "run-token.pub";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("invalid run-token key: {0}")]
    Invalid(String),
    #[error("cannot read run-token key {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write run-token key {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) fn generate() -> RunTokenSigner {
    let key = SigningKey::generate(&mut OsRng);
    from_key(&key).expect("a freshly generated Ed25519 key encodes to PEM")
}

pub(crate) fn signer_from_pem(pem: &str) -> Result<RunTokenSigner, KeyError> {
    let key = SigningKey::from_pkcs8_pem(pem)
        .map_err(|e| KeyError::Invalid(format!("not an Ed25519 PKCS#8 PEM private key: {e}")))?;
    from_key(&key)
}

fn from_key(key: &SigningKey) -> Result<RunTokenSigner, KeyError> {
    let private_pem = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| KeyError::Invalid(e.to_string()))?;
    let public_pem = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| KeyError::Invalid(e.to_string()))?;
    RunTokenSigner::from_parts(private_pem.to_string(), public_pem)
}

/// Loads the signer from `dir`, or creates a new key pair there (private key 0600).
pub fn load_or_create_signer(dir: &Path) -> Result<RunTokenSigner, KeyError> {
    let private_path = dir.join(PRIVATE_KEY_FILE);
    match fs::read_to_string(&private_path) {
        Ok(pem) => {
            let signer = signer_from_pem(&pem)?;
            write_file(
                &dir.join(PUBLIC_KEY_FILE),
                signer.public_pem(),
                0o644,
                false,
            )?;
            Ok(signer)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|source| KeyError::Write {
                path: dir.to_owned(),
                source,
            })?;
            let signer = generate();
            write_file(&private_path, signer.private_pem(), 0o600, true)?;
            write_file(&dir.join(PUBLIC_KEY_FILE), signer.public_pem(), 0o644, true)?;
            Ok(signer)
        }
        Err(source) => Err(KeyError::Read {
            path: private_path,
            source,
        }),
    }
}

/// Loads a verifier from a public key PEM file.
pub fn load_verifier(path: &Path) -> Result<RunTokenVerifier, KeyError> {
    let pem = fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_owned(),
        source,
    })?;
    RunTokenVerifier::from_public_pem(&pem)
}

fn write_file(path: &Path, content: &str, mode: u32, replace: bool) -> Result<(), KeyError> {
    if !replace && path.exists() {
        return Ok(());
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|source| KeyError::Write {
            path: path.to_owned(),
            source,
        })?;
    file.write_all(content.as_bytes())
        .map_err(|source| KeyError::Write {
            path: path.to_owned(),
            source,
        })
}
