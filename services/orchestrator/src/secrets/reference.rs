//! Resolving a key reference when a run starts: `env:NAME` reads the
//! orchestrator's environment, `file:/path` a regular file of at most 64 KiB
//! (surrounding whitespace, such as a final newline, is not part of the key).
//! A reference to the orchestrator's own secrets is refused here too, whatever
//! was accepted when it was stored.

use std::ffi::OsString;

use crate::domain::{DomainError, KeyReference, KeyReferenceRules};

/// A key file larger than this is not a key.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// Why a reference gave no key. Each message names the reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// It points at the orchestrator's own secrets.
    #[error(transparent)]
    Refused(#[from] DomainError),
    #[error(
        "{reference}: {name} is not set (or empty) in the orchestrator's environment; set it where the orchestrator starts, or give the provider another key with UpdateProvider"
    )]
    Unset {
        reference: KeyReference,
        name: String,
    },
    #[error(
        "{reference} cannot be read: {reason}; make it a file the orchestrator's user can read, or give the provider another key with UpdateProvider"
    )]
    Unreadable {
        reference: KeyReference,
        reason: String,
    },
}

/// The key `reference` points to now, if `rules` (the operator's, as they are
/// now) allow it.
///
/// # Errors
/// The variable is unset or empty, the file is missing, unreadable, not a
/// regular file, empty or too large, or the reference points at Chorus's own data.
pub async fn resolve(
    reference: &KeyReference,
    rules: &KeyReferenceRules,
) -> Result<String, ReferenceError> {
    resolve_with(reference, rules, |name| std::env::var_os(name)).await
}

async fn resolve_with(
    reference: &KeyReference,
    rules: &KeyReferenceRules,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<String, ReferenceError> {
    reference.check(rules)?;
    let unreadable = |reason: String| ReferenceError::Unreadable {
        reference: reference.clone(),
        reason,
    };
    let key = match reference {
        KeyReference::Env(name) => {
            let unset = || ReferenceError::Unset {
                reference: reference.clone(),
                name: name.clone(),
            };
            env(name)
                .ok_or_else(unset)?
                .into_string()
                .map_err(|_| unreadable(format!("{name} is not valid UTF-8")))?
        }
        KeyReference::File(path) => {
            let meta = tokio::fs::metadata(path)
                .await
                .map_err(|e| unreadable(e.to_string()))?;
            if !meta.is_file() {
                return Err(unreadable("it is not a regular file".to_owned()));
            }
            if meta.len() > MAX_KEY_FILE_BYTES {
                return Err(unreadable(format!(
                    "it has {} bytes, more than a key file may ({MAX_KEY_FILE_BYTES})",
                    meta.len()
                )));
            }
            tokio::fs::read_to_string(path)
                .await
                .map_err(|e| unreadable(e.to_string()))?
        }
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(match reference {
            KeyReference::Env(name) => ReferenceError::Unset {
                reference: reference.clone(),
                name: name.clone(),
            },
            KeyReference::File(_) => unreadable("it is empty".to_owned()),
        });
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(name: &'static str, value: &'static str) -> impl Fn(&str) -> Option<OsString> {
        move |asked| (asked == name).then(|| OsString::from(value))
    }

    #[tokio::test]
    async fn a_variable_gives_its_value_and_an_unset_one_is_named() {
        let rules = KeyReferenceRules::default();
        let reference = KeyReference::Env("PROVIDER_KEY_OPENAI".into());
        let key = resolve_with(
            &reference,
            &rules,
            env_with("PROVIDER_KEY_OPENAI", "sk-env\n"),
        )
        .await;
        assert_eq!(key.as_deref(), Ok("sk-env"));

        for env in [env_with("OTHER", "x"), env_with("PROVIDER_KEY_OPENAI", " ")] {
            let err = resolve_with(&reference, &rules, env)
                .await
                .expect_err("unset")
                .to_string();
            assert!(
                err.starts_with("env:PROVIDER_KEY_OPENAI: PROVIDER_KEY_OPENAI is not set"),
                "{err}"
            );
        }
        let own = KeyReference::Env("CHORUS_SECRETS_KEY".into());
        let err = resolve_with(&own, &rules, env_with("CHORUS_SECRETS_KEY", "k"))
            .await
            .expect_err("own");
        assert!(matches!(err, ReferenceError::Refused(_)), "{err}");
    }

    #[tokio::test]
    async fn a_file_gives_its_trimmed_text_and_anything_else_is_named() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("openai.key");
        std::fs::write(&file, "sk-file\n").expect("key file");
        let reference = KeyReference::File(file.clone());
        let rules = KeyReferenceRules::new(Some(dir.path()), "PROVIDER_KEY_").expect("rules");
        assert_eq!(resolve(&reference, &rules).await.as_deref(), Ok("sk-file"));

        let empty = dir.path().join("empty.key");
        std::fs::write(&empty, "\n").expect("empty");
        let big = dir.path().join("big.key");
        std::fs::write(&big, vec![b'k'; 70_000]).expect("big");
        for (path, says) in [
            (dir.path().join("missing.key"), "No such file"),
            (dir.path().to_owned(), "not a regular file"),
            (empty, "it is empty"),
            (big, "more than a key file may"),
        ] {
            let reference = KeyReference::File(path.clone());
            let err = resolve(&reference, &rules)
                .await
                .expect_err("unreadable")
                .to_string();
            assert!(
                err.starts_with(&format!("file:{} cannot be read", path.display()))
                    && err.contains(says),
                "{err}"
            );
        }

        let own = KeyReferenceRules {
            protected: vec![dir.path().canonicalize().expect("canonical")],
            ..rules
        };
        let err = resolve(&reference, &own).await.expect_err("own data");
        assert!(matches!(err, ReferenceError::Refused(_)), "{err}");
    }
}
