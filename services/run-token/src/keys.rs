//! Ed25519 key pairs: generation, PEM encoding, key ids.

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand_core::OsRng;
use sha2::{Digest, Sha256};

use std::path::PathBuf;

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

/// One key pair in PEM form, with its id.
#[derive(Clone)]
pub(crate) struct KeyPair {
    pub kid: String,
    pub private_pem: String,
    pub public_pem: String,
}

pub(crate) fn generate() -> KeyPair {
    let key = SigningKey::generate(&mut OsRng);
    from_key(&key).expect("a freshly generated Ed25519 key encodes to PEM")
}

pub(crate) fn from_private_pem(pem: &str) -> Result<KeyPair, KeyError> {
    let key = SigningKey::from_pkcs8_pem(pem)
        .map_err(|e| KeyError::Invalid(format!("not an Ed25519 PKCS#8 PEM private key: {e}")))?;
    from_key(&key)
}

fn from_key(key: &SigningKey) -> Result<KeyPair, KeyError> {
    let private_pem = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| KeyError::Invalid(e.to_string()))?;
    let verifying = key.verifying_key();
    let public_pem = verifying
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| KeyError::Invalid(e.to_string()))?;
    Ok(KeyPair {
        kid: fingerprint(&verifying),
        private_pem: private_pem.to_string(),
        public_pem,
    })
}

/// The key id of an SPKI PEM Ed25519 public key: the first 8 bytes of the
/// SHA-256 of the raw key, in hex. The same key always has the same id, so a
/// verifier given only a public key file knows the id too.
pub fn key_id(public_pem: &str) -> Result<String, KeyError> {
    let key = VerifyingKey::from_public_key_pem(public_pem)
        .map_err(|e| KeyError::Invalid(format!("not an Ed25519 SPKI PEM public key: {e}")))?;
    Ok(fingerprint(&key))
}

fn fingerprint(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The PEM blocks of `text` (a file may hold several public keys).
pub(crate) fn pem_blocks(text: &str) -> Vec<String> {
    const END: &str = "-----END PUBLIC KEY-----";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN PUBLIC KEY-----") {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let stop = start + end + END.len();
        blocks.push(format!("{}\n", &rest[start..stop]));
        rest = &rest[stop..];
    }
    blocks
}
