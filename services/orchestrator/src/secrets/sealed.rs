//! The sealed form of a secret: `enc:v1:<base64 of nonce || ciphertext>`, with
//! XChaCha20-Poly1305, a random 24-byte nonce per value, and associated data that
//! binds the value to the row it was written for. A value copied to another row,
//! changed in any bit, or read with another key does not open.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// What every sealed value starts with; the version names the cipher and layout.
pub const SEALED_PREFIX: &str = "enc:v1:";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// Seals and opens secrets with one 32-byte key. Cheap to clone; its `Debug`
/// says where the key came from, never the key.
#[derive(Clone)]
pub struct SecretBox {
    cipher: Arc<XChaCha20Poly1305>,
    /// Where the key came from, for messages: "the key file /x/secrets.key".
    origin: Arc<str>,
}

impl fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBox")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Why a sealed value did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("it is not a sealed value ({SEALED_PREFIX}<base64>)")]
    Malformed,
    #[error(
        "it does not decrypt with {0}: that is not the key it was stored with, or the value was copied from another provider"
    )]
    Refused(String),
}

impl SecretBox {
    /// A box over `key`; `origin` says where the key came from.
    pub fn new(key: &[u8; 32], origin: impl Into<String>) -> Self {
        let origin: String = origin.into();
        Self {
            cipher: Arc::new(XChaCha20Poly1305::new(key.into())),
            origin: origin.into(),
        }
    }

    /// A box over a random key that is kept nowhere: for stores that never hold
    /// provider keys (a client making API keys) and for tests.
    pub fn ephemeral() -> Self {
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        Self {
            cipher: Arc::new(XChaCha20Poly1305::new(&key)),
            origin: "a key kept only in memory".into(),
        }
    }

    /// Where the key came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Whether `text` is in the sealed form (it may still not open).
    pub fn is_sealed(text: &str) -> bool {
        text.starts_with(SEALED_PREFIX)
    }

    /// Seals `secret` for the row `bound_to` names (its associated data).
    pub fn seal(&self, secret: &str, bound_to: &[u8]) -> String {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: secret.as_bytes(),
                    aad: bound_to,
                },
            )
            .expect("XChaCha20-Poly1305 seals any message shorter than 256 GiB");
        let mut bytes = Vec::with_capacity(NONCE_LEN + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        format!("{SEALED_PREFIX}{}", STANDARD.encode(bytes))
    }

    /// Opens a value [`SecretBox::seal`] made for the same row.
    ///
    /// # Errors
    /// [`OpenError::Malformed`] when `sealed` is not in the sealed form;
    /// [`OpenError::Refused`] when it does not decrypt with this key for this row.
    pub fn open(&self, sealed: &str, bound_to: &[u8]) -> Result<String, OpenError> {
        let encoded = sealed
            .strip_prefix(SEALED_PREFIX)
            .ok_or(OpenError::Malformed)?;
        let bytes = STANDARD.decode(encoded).map_err(|_| OpenError::Malformed)?;
        if bytes.len() < NONCE_LEN + TAG_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| OpenError::Malformed)?;
        let opened = self
            .cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: bound_to,
                },
            )
            .map_err(|_| OpenError::Refused(self.origin.to_string()))?;
        String::from_utf8(opened).map_err(|_| OpenError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_for_its_row_and_with_its_key() {
        let keys = SecretBox::new(&[7; 32], "the key file /k");
        let sealed = keys.seal("sk-secret", b"ws-1\0openai");
        assert!(SecretBox::is_sealed(&sealed), "{sealed}");
        assert!(!sealed.contains("sk-secret"), "{sealed}");
        assert_eq!(
            keys.open(&sealed, b"ws-1\0openai").as_deref(),
            Ok("sk-secret")
        );

        // Copied to another provider, or the same name in another workspace.
        for other_row in [&b"ws-1\0ollama"[..], b"ws-2\0openai", b""] {
            assert_eq!(
                keys.open(&sealed, other_row),
                Err(OpenError::Refused("the key file /k".into()))
            );
        }
        // Another key.
        let other = SecretBox::new(&[8; 32], "CHORUS_SECRETS_KEY");
        let err = other.open(&sealed, b"ws-1\0openai").expect_err("other key");
        assert!(err.to_string().contains("CHORUS_SECRETS_KEY"), "{err}");
    }

    #[test]
    fn every_seal_has_its_own_nonce_and_a_changed_bit_is_refused() {
        let keys = SecretBox::ephemeral();
        let first = keys.seal("sk", b"row");
        let second = keys.seal("sk", b"row");
        assert_ne!(first, second, "a random nonce per value");

        let mut bytes = STANDARD
            .decode(first.strip_prefix(SEALED_PREFIX).expect("prefix"))
            .expect("base64");
        assert_eq!(bytes.len(), NONCE_LEN + "sk".len() + TAG_LEN);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = format!("{SEALED_PREFIX}{}", STANDARD.encode(&bytes));
        assert!(matches!(
            keys.open(&tampered, b"row"),
            Err(OpenError::Refused(_))
        ));
    }

    #[test]
    fn what_is_not_a_sealed_value_is_malformed() {
        let keys = SecretBox::ephemeral();
        for text in ["sk-plain", "enc:v1:", "enc:v1:!!!", "enc:v1:AAAA"] {
            assert_eq!(keys.open(text, b"row"), Err(OpenError::Malformed), "{text}");
        }
    }
}
