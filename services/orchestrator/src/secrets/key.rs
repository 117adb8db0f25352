//! The secrets key: 32 random bytes in base64, from a file or from the
//! environment variable [`SECRETS_KEY_VAR`]. The default file
//! (`<data-dir>/secrets.key`) is made owner-only when missing, so the
//! all-in-one start needs no set-up; a key file named explicitly must exist.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{KeyInit, OsRng};

use super::SecretBox;
use crate::owner_only;

/// File of the secrets key in a data directory (mode 0600).
pub const SECRETS_KEY_FILE: &str = "secrets.key";
/// The environment variable that may hold the key itself (base64).
pub const SECRETS_KEY_VAR: &str = "CHORUS_SECRETS_KEY";

/// Where the key comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file holding the key in base64. `create`: make one (0600, its
    /// directory 0700) when it is missing.
    File { path: PathBuf, create: bool },
    /// The key itself in base64, as the variable `var` gave it.
    Value { base64: String, var: &'static str },
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { path, create } => f
                .debug_struct("File")
                .field("path", path)
                .field("create", create)
                .finish(),
            Self::Value { var, .. } => f
                .debug_struct("Value")
                .field("var", var)
                .field("base64", &"<hidden>")
                .finish(),
        }
    }
}

impl KeySource {
    /// The default: `<data_dir>/secrets.key`, made when missing.
    pub fn default_file(data_dir: &Path) -> Self {
        Self::File {
            path: data_dir.join(SECRETS_KEY_FILE),
            create: true,
        }
    }

    /// The key file, if the key comes from one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::File { path, .. } => Some(path),
            Self::Value { .. } => None,
        }
    }
}

/// A key ready to use.
#[derive(Debug)]
pub struct LoadedKey {
    pub secrets: SecretBox,
    /// The key file was made just now.
    pub created: bool,
}

/// Why the key could not be had. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error(
        "the secrets key file {p} does not exist; create it (head -c 32 /dev/urandom | base64 > {p}; chmod 600 {p}) or restore the one the stored provider keys were encrypted with",
        p = path.display()
    )]
    Missing { path: PathBuf },
    #[error("cannot read the secrets key file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the secrets key file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{origin} does not hold a secrets key: {reason}; it must be 32 random bytes in base64 (head -c 32 /dev/urandom | base64)"
    )]
    Invalid { origin: String, reason: String },
}

/// Loads the key `source` names; makes the default file when it is missing.
/// An existing key file readable by others is tightened to 0600 (logged).
///
/// # Errors
/// A named file is missing or unreadable, the file cannot be made, or the
/// text is not 32 bytes in base64.
pub fn load(source: &KeySource) -> Result<LoadedKey, SecretsError> {
    match source {
        KeySource::Value { base64, var } => Ok(LoadedKey {
            secrets: SecretBox::new(&decode(base64, var)?, *var),
            created: false,
        }),
        KeySource::File { path, create } => {
            let origin = format!("the key file {}", path.display());
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    owner_only::tighten_logged(path, "secrets key file");
                    Ok(LoadedKey {
                        secrets: SecretBox::new(&decode(&text, &origin)?, origin),
                        created: false,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && *create => {
                    let key = XChaCha20Poly1305::generate_key(&mut OsRng);
                    write_key(path, &STANDARD.encode(key)).map_err(|source| {
                        SecretsError::Write {
                            path: path.clone(),
                            source,
                        }
                    })?;
                    let key: [u8; 32] = key.into();
                    Ok(LoadedKey {
                        secrets: SecretBox::new(&key, origin),
                        created: true,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Err(SecretsError::Missing { path: path.clone() })
                }
                Err(source) => Err(SecretsError::Read {
                    path: path.clone(),
                    source,
                }),
            }
        }
    }
}

fn decode(text: &str, origin: &str) -> Result<[u8; 32], SecretsError> {
    let invalid = |reason: String| SecretsError::Invalid {
        origin: origin.to_owned(),
        reason,
    };
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| invalid(format!("not base64 ({e})")))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| invalid(format!("{} bytes instead of 32", bytes.len())))
}

/// Writes a new key file: its directory owner-only, the file 0600 from the
/// start (a temporary file renamed into place, so no reader sees half a key).
fn write_key(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        owner_only::create_dir(dir)?;
    }
    let temp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.sync_all()?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))?;
    // Never replace a key another process wrote meanwhile.
    let linked = std::fs::hard_link(&temp, path);
    std::fs::remove_file(&temp)?;
    linked
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("exists").mode() & 0o777
    }

    #[test]
    fn the_default_file_is_made_owner_only_and_read_back() {
        let base = tempfile::tempdir().expect("dir");
        let data = base.path().join("data");
        let source = KeySource::default_file(&data);
        let made = load(&source).expect("made");
        assert!(made.created);
        let file = data.join(SECRETS_KEY_FILE);
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&data), 0o700);
        let sealed = made.secrets.seal("sk", b"row");

        let again = load(&source).expect("read");
        assert!(!again.created);
        assert_eq!(again.secrets.open(&sealed, b"row").as_deref(), Ok("sk"));
        assert!(again.secrets.origin().contains(&file.display().to_string()));
    }

    #[test]
    fn a_named_file_must_exist_and_hold_32_bytes() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("named.key");
        let named = KeySource::File {
            path: path.clone(),
            create: false,
        };
        let err = load(&named).expect_err("missing").to_string();
        assert!(
            err.contains("does not exist") && err.contains("head -c 32"),
            "{err}"
        );
        assert!(!path.exists(), "a named key file is never made");

        std::fs::write(&path, STANDARD.encode([1u8; 16])).expect("short key");
        let err = load(&named).expect_err("short").to_string();
        assert!(err.contains("16 bytes instead of 32"), "{err}");
        std::fs::write(&path, "not base64!").expect("text");
        let err = load(&named).expect_err("text").to_string();
        assert!(err.contains("not base64"), "{err}");

        std::fs::write(&path, format!("{}\n", STANDARD.encode([1u8; 32]))).expect("key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        load(&named).expect("a good key");
        assert_eq!(mode(&path), 0o600, "tightened on load");
    }

    #[test]
    fn the_variable_gives_the_key_itself() {
        let value = KeySource::Value {
            base64: STANDARD.encode([3u8; 32]),
            var: SECRETS_KEY_VAR,
        };
        assert!(!format!("{value:?}").contains(&STANDARD.encode([3u8; 32])));
        let loaded = load(&value).expect("key");
        assert_eq!(loaded.secrets.origin(), SECRETS_KEY_VAR);
        let same = SecretBox::new(&[3; 32], "x");
        let sealed = same.seal("sk", b"row");
        assert_eq!(loaded.secrets.open(&sealed, b"row").as_deref(), Ok("sk"));

        let bad = KeySource::Value {
            base64: "AAAA".into(),
            var: SECRETS_KEY_VAR,
        };
        let err = load(&bad).expect_err("short").to_string();
        assert!(err.starts_with("CHORUS_SECRETS_KEY does not hold"), "{err}");
    }
}
