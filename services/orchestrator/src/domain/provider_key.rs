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

    /// Refuses a reference the operator's `rules` do not allow: a variable
    /// without the configured prefix (or one of the orchestrator's own
    /// `CHORUS_*`), a file outside the configured key directory or in one of
    /// Chorus's own places, symlinks resolved.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming the rule and how to meet it.
    pub fn check(&self, rules: &KeyReferenceRules) -> Result<(), DomainError> {
        let refuse = |why: String| Err(DomainError::invalid("api_key", why));
        match self {
            Self::Env(name) if name.starts_with(OWN_VARIABLES) => refuse(format!(
                "env:{name} is the orchestrator's own configuration, which a provider key may not read; put the key in a variable of its own named {}<NAME>",
                rules.env_prefix
            )),
            Self::Env(name) if !name.starts_with(&rules.env_prefix) => refuse(format!(
                "env:{name} is not a provider key variable: references may name only variables starting with {} (--provider-key-env-prefix), so that no other secret of the orchestrator's environment can be sent to a model; set {}<NAME> where the orchestrator starts and reference that",
                rules.env_prefix, rules.env_prefix
            )),
            Self::Env(_) => Ok(()),
            Self::File(path) => {
                let Some(dir) = &rules.dir else {
                    return refuse(format!(
                        "file:{} cannot be read: file references are off until the operator names the directory key files are kept in (--provider-key-dir)",
                        path.display()
                    ));
                };
                let resolved = resolve_file(path);
                if let Some(own) = rules.protected.iter().find(|own| resolved.starts_with(own)) {
                    return refuse(format!(
                        "file:{} lies in Chorus's own data ({}), which a provider key may not read; keep the key file elsewhere",
                        path.display(),
                        own.display()
                    ));
                }
                if !resolved.starts_with(dir) {
                    return refuse(format!(
                        "file:{} is not in the provider key directory {} (--provider-key-dir), symlinks resolved; put the key file there",
                        path.display(),
                        dir.display()
                    ));
                }
                Ok(())
            }
        }
    }
}

/// `path` with its symlinks resolved; a file that does not exist (yet) as its
/// resolved directory and name, so that `..` and links in its directory
/// cannot make it look like it lies elsewhere.
fn resolve_file(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    let parent = path.parent().and_then(|p| p.canonicalize().ok());
    match (parent, path.file_name()) {
        (Some(parent), Some(name)) => parent.join(name),
        // Nothing resolvable: a path no rule accepts.
        _ => PathBuf::new(),
    }
}

/// Where provider key references may point, as the operator configured it:
/// so that an admin cannot have any file or variable the orchestrator can
/// read sent to a model URL of their choosing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReferenceRules {
    /// `file:` references must lie in this directory (symlinks resolved);
    /// None: file references are refused.
    pub dir: Option<PathBuf>,
    /// `env:` references must name variables starting with this.
    pub env_prefix: String,
    /// Chorus's own directories and files, never read (symlinks resolved).
    pub protected: Vec<PathBuf>,
}

/// The prefix of provider key variables unless the operator names another.
pub const DEFAULT_KEY_ENV_PREFIX: &str = "PROVIDER_KEY_";

impl Default for KeyReferenceRules {
    fn default() -> Self {
        Self {
            dir: None,
            env_prefix: DEFAULT_KEY_ENV_PREFIX.to_owned(),
            protected: Vec::new(),
        }
    }
}

impl KeyReferenceRules {
    /// Rules over the key directory `dir` (symlinks resolved where it exists)
    /// and the variable prefix `env_prefix`.
    ///
    /// # Errors
    /// The prefix is empty, is not a variable name's start, or would let a
    /// reference name the orchestrator's own `CHORUS_*` variables.
    pub fn new(dir: Option<&Path>, env_prefix: &str) -> Result<Self, String> {
        let valid = !env_prefix.is_empty()
            && env_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !env_prefix.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(format!(
                "--provider-key-env-prefix '{env_prefix}' must be the start of a variable name (letters, digits and _), e.g. {DEFAULT_KEY_ENV_PREFIX}"
            ));
        }
        if env_prefix.starts_with(OWN_VARIABLES) || OWN_VARIABLES.starts_with(env_prefix) {
            return Err(format!(
                "--provider-key-env-prefix '{env_prefix}' overlaps the orchestrator's own {OWN_VARIABLES}* variables; pick another, e.g. {DEFAULT_KEY_ENV_PREFIX}"
            ));
        }
        Ok(Self {
            dir: dir.map(|d| d.canonicalize().unwrap_or_else(|_| d.to_owned())),
            env_prefix: env_prefix.to_owned(),
            protected: Vec::new(),
        })
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
        // Even a key directory around the data directory does not open it.
        let rules = KeyReferenceRules {
            dir: Some(own.parent().expect("parent").to_owned()),
            protected: vec![own.clone()],
            ..KeyReferenceRules::default()
        };
        for refused in [
            KeyReference::Env("CHORUS_SECRETS_KEY".into()),
            KeyReference::Env("CHORUS_DATABASE_URL".into()),
            KeyReference::File(own.join("secrets.key")),
            KeyReference::File(own.join("chorus.db")),
        ] {
            let err = refused.check(&rules).expect_err("refused");
            assert!(err.to_string().contains("may not read"), "{err}");
        }
    }

    /// The attack: an admin points a provider at a model URL of their own and
    /// its key at any file or variable the orchestrator can read.
    #[test]
    fn references_reach_only_the_key_directory_and_the_key_variables() {
        let keys = tempfile::tempdir().expect("keys");
        std::fs::write(keys.path().join("openai"), "sk").expect("key");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        std::fs::write(elsewhere.path().join("admin.key"), "chorus_x").expect("other");
        let link = keys.path().join("innocent");
        std::os::unix::fs::symlink(elsewhere.path().join("admin.key"), &link).expect("link");
        let rules = KeyReferenceRules::new(Some(keys.path()), "PROVIDER_KEY_").expect("rules");

        for refused in [
            KeyReference::Env("DATABASE_URL".into()),
            KeyReference::Env("OPENAI_API_KEY".into()),
            KeyReference::Env("HOME".into()),
            KeyReference::File("/etc/machine-id".into()),
            KeyReference::File(elsewhere.path().join("admin.key")),
            KeyReference::File(keys.path().join("../x")),
            KeyReference::File(link),
        ] {
            let err = refused.check(&rules).expect_err("refused").to_string();
            assert!(
                err.contains("--provider-key-env-prefix") || err.contains("--provider-key-dir"),
                "{refused}: {err}"
            );
        }
        for allowed in [
            KeyReference::Env("PROVIDER_KEY_OPENAI".into()),
            KeyReference::File(keys.path().join("openai")),
        ] {
            assert_eq!(allowed.check(&rules), Ok(()), "{allowed}");
        }
        // Without a key directory, no file at all.
        let no_files = KeyReferenceRules::default();
        let err = KeyReference::File(keys.path().join("openai"))
            .check(&no_files)
            .expect_err("no key directory");
        assert!(err.to_string().contains("file references are off"), "{err}");
    }

    #[test]
    fn the_variable_prefix_is_checked_once_at_start() {
        for bad in ["", "1X_", "A-B", "CHORUS_", "CHORUS_PROVIDER_", "CH"] {
            assert!(KeyReferenceRules::new(None, bad).is_err(), "{bad}");
        }
        assert!(KeyReferenceRules::new(None, "MODEL_KEY_").is_ok());
    }
}
