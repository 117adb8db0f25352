//! API keys: `chorus_<id>_<secret>`, where the id (16 hex digits) finds the key
//! and the secret (32 random bytes, base64url) proves it. Only a SHA-256 of the
//! whole key is stored: the secret is random and long, so a slow password hash
//! would add cost and no strength.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand_core::{OsRng, RngCore};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How every API key starts (and how a credential is told from a run token).
pub const KEY_PREFIX: &str = "chorus_";
const ID_HEX: usize = 16;
const SECRET_BYTES: usize = 32;

/// An API key as presented by a caller or just made. Its `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    id: String,
    text: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    /// A new random key.
    pub fn generate() -> Self {
        let mut id = [0u8; ID_HEX / 2];
        let mut secret = [0u8; SECRET_BYTES];
        OsRng.fill_bytes(&mut id);
        OsRng.fill_bytes(&mut secret);
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{KEY_PREFIX}{id}_{}", URL_SAFE_NO_PAD.encode(secret));
        Self { id, text }
    }

    /// Reads a key presented by a caller; None when it is not shaped like one.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(KEY_PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        let id_ok = id.len() == ID_HEX && id.bytes().all(|b| b.is_ascii_hexdigit());
        let secret_ok = URL_SAFE_NO_PAD
            .decode(secret)
            .is_ok_and(|bytes| bytes.len() == SECRET_BYTES);
        (id_ok && secret_ok).then(|| Self {
            id: id.to_ascii_lowercase(),
            text: text.to_owned(),
        })
    }

    /// The public part that names the key (shown in lists and logs).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What is stored: `sha256:<hex>` of the whole key.
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(self.text.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }

    /// True when `stored` is this key's hash (compared in constant time).
    pub fn matches(&self, stored: &str) -> bool {
        self.hash().as_bytes().ct_eq(stored.as_bytes()).into()
    }

    /// The whole key, to hand to its owner once.
    pub fn expose(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_parses_back_and_matches_only_its_own_hash() {
        let key = ApiKey::generate();
        let back = ApiKey::parse(key.expose()).expect("parses");
        assert_eq!(back.id(), key.id());
        assert!(back.matches(&key.hash()));
        assert!(!ApiKey::generate().matches(&key.hash()));
        assert!(!format!("{key:?}").contains(key.expose()));
    }

    #[test]
    fn a_key_with_its_secret_changed_does_not_match() {
        let key = ApiKey::generate();
        // A character in the middle of the secret carries six whole bits (the
        // last one only four, and not every change of it is valid base64).
        let mut chars: Vec<char> = key.expose().chars().collect();
        let middle = chars.len() - 10;
        chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
        let text: String = chars.into_iter().collect();
        let forged = ApiKey::parse(&text).expect("same shape");
        assert_eq!(forged.id(), key.id());
        assert!(!forged.matches(&key.hash()));
    }

    #[test]
    fn malformed_keys_are_not_keys() {
        for text in [
            "",
            "chorus_",
            "chorus_abc_def",
            "chorus_0123456789abcdeg_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "eyJhbGciOiJFZERTQSJ9.e30.sig",
        ] {
            assert!(ApiKey::parse(text).is_none(), "{text}");
        }
    }
}
