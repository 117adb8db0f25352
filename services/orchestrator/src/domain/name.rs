//! Names of agents and providers: validated identifiers.

use std::fmt;

use super::DomainError;

/// A name: 1–64 characters, lowercase ASCII letters, digits, `-` and `_`, starting
/// with a letter. Safe in file names, URLs, CLI flags and log lines.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(into = "String", try_from = "String")]
pub struct Name(String);

impl TryFrom<String> for Name {
    type Error = DomainError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse("name", &value)
    }
}

impl From<Name> for String {
    fn from(name: Name) -> Self {
        name.0
    }
}

impl Name {
    /// Checks `value` against the name rule; `field` names it in the error.
    pub fn parse(field: &'static str, value: &str) -> Result<Self, DomainError> {
        let bad = |reason: &str| DomainError::invalid(field, format!("'{value}' {reason}"));
        if value.is_empty() {
            return Err(DomainError::invalid(field, "must not be empty"));
        }
        if value.len() > 64 {
            return Err(bad("is longer than 64 characters"));
        }
        if !value.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(bad("must start with a lowercase letter"));
        }
        if let Some(c) = value
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(bad(&format!(
                "contains '{c}'; use lowercase letters, digits, '-' and '_'"
            )));
        }
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_pass() {
        for name in [
            "writer",
            "fact-checker",
            "task_validator",
            "a1",
            &"a".repeat(64),
        ] {
            assert_eq!(Name::parse("name", name).expect(name).as_str(), name);
        }
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for (name, reason) in [
            ("", "must not be empty"),
            ("Writer", "must start with a lowercase letter"),
            ("1st", "must start with a lowercase letter"),
            ("../etc", "must start with a lowercase letter"),
            ("a/b", "contains '/'"),
            ("a b", "contains ' '"),
            ("naïve", "contains 'ï'"),
        ] {
            let err = Name::parse("agent name", name).expect_err(name).to_string();
            assert!(err.contains(reason), "{name}: {err}");
            assert!(err.starts_with("invalid agent name"), "{err}");
        }
        assert!(Name::parse("name", &"a".repeat(65)).is_err());
    }
}
