//! Verifying run tokens with a set of public keys, chosen by the token's `kid`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};

use crate::keys::{KeyError, key_id, pem_blocks};
use crate::{AUDIENCE, Claims, ISSUER, RunGrant, TokenError};

/// A token that verified: its grant, the key that signed it and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    pub grant: RunGrant,
    pub kid: String,
    /// Unix seconds.
    pub expires_at: u64,
}

/// Tokens remembered as verified, at most: past it, they are all forgotten
/// (each verifies again at its next use).
const REMEMBERED: usize = 4096;

/// Verifies run tokens. Holds only public keys; clones share them, so a
/// rotation or a refresh reaches every clone.
///
/// A token that verified is remembered by its text with what it carries, for
/// the keys held now: one tool call presents its run's token three or four
/// times (the auth layer, tool-exec, the check before the call and its
/// record), and a signature is checked once instead of each time. The
/// remembered tokens are forgotten whenever the keys change, and a
/// remembered one is still refused once it has expired.
#[derive(Clone)]
pub struct RunTokenVerifier {
    keys: Arc<RwLock<HashMap<String, DecodingKey>>>,
    validation: Validation,
    verified: Arc<Mutex<HashMap<String, VerifiedToken>>>,
}

impl std::fmt::Debug for RunTokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTokenVerifier")
            .field("kids", &self.kids())
            .finish_non_exhaustive()
    }
}

impl RunTokenVerifier {
    /// A verifier of the SPKI PEM public key(s) in `pem` (one or more blocks).
    pub fn from_public_pem(pem: &str) -> Result<Self, KeyError> {
        let blocks = pem_blocks(pem);
        if blocks.is_empty() {
            return Err(KeyError::Invalid(
                "no PEM public key ('-----BEGIN PUBLIC KEY-----') found".to_owned(),
            ));
        }
        let keys = blocks
            .into_iter()
            .map(|block| Ok((key_id(&block)?, block)))
            .collect::<Result<Vec<_>, KeyError>>()?;
        Ok(Self::with_keys(keys))
    }

    /// A verifier of `(kid, SPKI PEM)` pairs (none: it takes its keys later with
    /// [`RunTokenVerifier::replace`]).
    pub fn from_keys(keys: Vec<(String, String)>) -> Self {
        Self::with_keys(keys)
    }

    /// A verifier of `(kid, SPKI PEM)` pairs. Keys that do not parse are left out.
    pub(crate) fn with_keys(keys: Vec<(String, String)>) -> Self {
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = 0;
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let verifier = Self {
            keys: Arc::new(RwLock::new(HashMap::new())),
            validation,
            verified: Arc::default(),
        };
        verifier.replace(keys);
        verifier
    }

    /// Replaces the keys with `(kid, SPKI PEM)` pairs (a refresh or a rotation);
    /// returns how many were taken. A pair whose kid is not its key's is left out.
    pub fn replace(&self, keys: Vec<(String, String)>) -> usize {
        let decoded: HashMap<String, DecodingKey> = keys
            .into_iter()
            .filter(|(kid, pem)| key_id(pem).is_ok_and(|id| &id == kid))
            .filter_map(|(kid, pem)| Some((kid, DecodingKey::from_ed_pem(pem.as_bytes()).ok()?)))
            .collect();
        let taken = decoded.len();
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        *keys = decoded;
        // Under the keys' lock: no token verified with the old keys is
        // remembered after it.
        self.remembered().clear();
        taken
    }

    /// The tokens remembered as verified, by their text. Taken after the
    /// keys' lock wherever both are held.
    pub(crate) fn remembered(&self) -> std::sync::MutexGuard<'_, HashMap<String, VerifiedToken>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ids of the keys held, sorted.
    pub fn kids(&self) -> Vec<String> {
        let mut kids: Vec<String> = self
            .keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        kids.sort();
        kids
    }

    /// Checks key, signature, expiry, issuer and audience, and returns the grant.
    pub fn verify(&self, token: &str) -> Result<RunGrant, TokenError> {
        self.verify_token(token).map(|t| t.grant)
    }

    /// [`RunTokenVerifier::verify`], with the key id and the expiry.
    pub fn verify_token(&self, token: &str) -> Result<VerifiedToken, TokenError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(TokenError::Missing);
        }
        let remembered = self.remembered().get(token).cloned();
        if let Some(verified) = remembered {
            // As the validation says (no leeway): expired once past `exp`.
            if verified.expires_at < crate::unix_now() {
                self.remembered().remove(token);
                return Err(TokenError::Expired);
            }
            return Ok(verified);
        }
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let verified = self.check(token, &keys)?;
        let mut remembered = self.remembered();
        if remembered.len() >= REMEMBERED {
            remembered.clear();
        }
        remembered.insert(token.to_owned(), verified.clone());
        Ok(verified)
    }

    /// Checks key, signature, expiry, issuer and audience of `token` with
    /// `keys`.
    fn check(
        &self,
        token: &str,
        keys: &HashMap<String, DecodingKey>,
    ) -> Result<VerifiedToken, TokenError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| TokenError::Malformed(format!("not a JWT ({e})")))?;
        if header.alg != Algorithm::EdDSA {
            return Err(TokenError::BadSignature);
        }
        let kid = header.kid.ok_or_else(|| {
            TokenError::Malformed(
                "its header names no signing key (kid); it was minted by an older version: start the run again".to_owned(),
            )
        })?;
        let key = keys
            .get(&kid)
            .ok_or_else(|| TokenError::UnknownKey(kid.clone()))?;
        let data =
            jsonwebtoken::decode::<Claims>(token, key, &self.validation).map_err(|e| {
                match e.kind() {
                    ErrorKind::ExpiredSignature => TokenError::Expired,
                    ErrorKind::InvalidSignature
                    | ErrorKind::InvalidAlgorithm
                    | ErrorKind::InvalidKeyFormat => TokenError::BadSignature,
                    ErrorKind::InvalidToken
                    | ErrorKind::Base64(_)
                    | ErrorKind::Json(_)
                    | ErrorKind::Utf8(_) => {
                        TokenError::Malformed(format!("not a JWT with valid claims ({e})"))
                    }
                    _ => TokenError::Invalid(e.to_string()),
                }
            })?;
        if !data.claims.grant.root.is_absolute() {
            return Err(TokenError::Invalid(
                "workspace root in the token is not an absolute path".to_owned(),
            ));
        }
        Ok(VerifiedToken {
            grant: data.claims.grant,
            kid,
            expires_at: data.claims.exp,
        })
    }
}

/// Loads a verifier from a file of PEM public keys.
pub fn load_verifier(path: &Path) -> Result<RunTokenVerifier, KeyError> {
    let pem = fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_owned(),
        source,
    })?;
    RunTokenVerifier::from_public_pem(&pem)
}
