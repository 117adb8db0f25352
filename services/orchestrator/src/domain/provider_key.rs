//! A provider's API key as it is given: the key itself, which the store keeps
//! encrypted, or a reference — `env:NAME`, `file:/path` — which is not a secret,
//! is stored as written and is resolved when a run starts.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::DomainError;

/// Environment variables of the orchestrator's own configuration (its secrets
/// key, its database URL) start so; a reference may not name them.
const OWN_VARIABLES: &str = "CHORUS_";

/// What a reference points to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyReference {
    /// `env:NAME`: a variable of the orchestrator's environment.
    Env(String),
    /// `file:/path`: a file the orchestrator reads (an absolute path).
    File(PathBuf),
}

/// A provider's API key as a request gives it. Its `Debug` hides the key.
#[derive(Clone, PartialEq, Eq)]
pub enum ProviderKey {
    /// The key itself.
    Secret(String),
    Reference(KeyReference),
}

/// Where a provider's key comes from, as reads show it (never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The key is stored, encrypted.
    Stored,
    Reference(KeyReference),
}

impl fmt::Debug for ProviderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Secret(_) => f.write_str("Secret(<hidden>)"),
            Self::Reference(reference) => f.debug_tuple("Reference").field(reference).finish(),
        }
    }
}

impl ProviderKey {
    /// Reads a key as a request writes it: `env:NAME` and `file:/absolute/path`
    /// are references, anything else is the key itself.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a reference that names no variable or no absolute path.
    pub fn parse(text: &str) -> Result<Self, DomainError> {
        Ok(match KeyReference::parse(text.trim()) {
            Some(reference) => Self::Reference(reference?),
            None => Self::Secret(text.to_owned()),
        })
    }

    pub fn source(&self) -> KeySource {
        match self {
            Self::Secret(_) => KeySource::Stored,
            Self::Reference(reference) => KeySource::Reference(reference.clone()),
        }
    }
}

impl KeyReference {
    /// `env:NAME` or `file:/path`; None for text that is neither (a key itself).
    pub fn parse(text: &str) -> Option<Result<Self, DomainError>> {
        if let Some(name) = text.strip_prefix("env:") {
            return Some(env(name));
        }
        text.strip_prefix("file:").map(file)
    }

    /// Refuses a reference to the orchestrator's own secrets: a `CHORUS_*`
    /// variable, or a file in one of the `protected` directories or files (the
    /// data directory, the secrets key file), symlinks resolved.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming the rule.
    pub fn check(&self, protected: &[PathBuf]) -> Result<(), DomainError> {
        match self {
            Self::Env(name) if name.starts_with(OWN_VARIABLES) => Err(DomainError::invalid(
                "api_key",
                format!(
                    "env:{name} is the orchestrator's own configuration, which a provider key may not read; put the key in a variable of its own"
                ),
            )),
            Self::Env(_) => Ok(()),
            Self::File(path) => {
                let resolved = path.canonicalize().unwrap_or_else(|_| path.clone());
                match protected.iter().find(|own| resolved.starts_with(own)) {
                    Some(own) => Err(DomainError::invalid(
                        "api_key",
                        format!(
                            "file:{} lies in Chorus's own data ({}), which a provider key may not read; keep the key file elsewhere",
                            path.display(),
                            own.display()
                        ),
                    )),
                    None => Ok(()),
                }
            }
        }
    }
}

fn env(name: &str) -> Result<KeyReference, DomainError> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(DomainError::invalid(
            "api_key",
            format!(
                "'env:{name}' must name an environment variable (letters, digits and _), e.g. env:OPENAI_API_KEY"
            ),
        ));
    }
    Ok(KeyReference::Env(name.to_owned()))
}

fn file(path: &str) -> Result<KeyReference, DomainError> {
    let path = Path::new(path);
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(DomainError::invalid(
            "api_key",
            format!(
                "'file:{}' must name an absolute path without '..', e.g. file:/run/secrets/openai-key",
                path.display()
            ),
        ));
    }
    Ok(KeyReference::File(path.to_owned()))
}

impl fmt::Display for KeyReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(name) => write!(f, "env:{name}"),
            Self::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stored => f.write_str("stored"),
            Self::Reference(reference) => reference.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_read_from_their_prefix_and_anything_else_is_the_key() {
        assert_eq!(
            ProviderKey::parse("env:OPENAI_API_KEY"),
            Ok(ProviderKey::Reference(KeyReference::Env(
                "OPENAI_API_KEY".into()
            )))
        );
        assert_eq!(
            ProviderKey::parse("file:/run/secrets/openai"),
            Ok(ProviderKey::Reference(KeyReference::File(
                "/run/secrets/openai".into()
            )))
        );
        assert_eq!(
            ProviderKey::parse("sk-proj-abc"),
            Ok(ProviderKey::Secret("sk-proj-abc".into()))
        );
        for bad in ["env:", "env:1X", "env:A-B", "file:relative", "file:/a/../b"] {
            let err = ProviderKey::parse(bad).expect_err(bad);
            assert!(
                matches!(
                    err,
                    DomainError::Invalid {
                        field: "api_key",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            format!("{:?}", ProviderKey::Secret("sk-proj-abc".into())),
            "Secret(<hidden>)"
        );
    }

    #[test]
    fn sources_show_references_and_never_the_key() {
        let key = ProviderKey::parse("sk-1").expect("key");
        assert_eq!(key.source().to_string(), "stored");
        for text in ["env:OPENAI_API_KEY", "file:/run/secrets/openai"] {
            let key = ProviderKey::parse(text).expect(text);
            assert_eq!(key.source().to_string(), text);
        }
    }

    #[test]
    fn references_to_the_orchestrators_own_secrets_are_refused() {
        let data = tempfile::tempdir().expect("data");
        let own = data.path().canonicalize().expect("canonical");
        std::fs::write(own.join("secrets.key"), "k").expect("key");
        let protected = vec![own.clone()];
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        let link = elsewhere.path().join("innocent");
        std::os::unix::fs::symlink(own.join("secrets.key"), &link).expect("symlink");

        for refused in [
            KeyReference::Env("CHORUS_SECRETS_KEY".into()),
            KeyReference::Env("CHORUS_DATABASE_URL".into()),
            KeyReference::File(own.join("secrets.key")),
            KeyReference::File(own.join("chorus.db")),
            KeyReference::File(link),
        ] {
            let err = refused.check(&protected).expect_err("refused");
            assert!(err.to_string().contains("may not read"), "{err}");
        }
        for allowed in [
            KeyReference::Env("OPENAI_API_KEY".into()),
            KeyReference::File(elsewhere.path().join("key")),
        ] {
            assert_eq!(allowed.check(&protected), Ok(()), "{allowed}");
        }
    }
}
