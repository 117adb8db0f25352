//! Providers: how agents are run (a CLI, or an OpenAI-compatible API).

use super::{DomainError, Name};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// The Claude Code CLI (`claude`).
    ClaudeCode,
    /// The OpenCode CLI (`opencode`).
    Opencode,
    /// Any OpenAI-compatible chat-completions API.
    OpenaiCompatible,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 3] = [Self::ClaudeCode, Self::Opencode, Self::OpenaiCompatible];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude_code",
            Self::Opencode => "opencode",
            Self::OpenaiCompatible => "openai_compatible",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                DomainError::invalid(
                    "provider kind",
                    format!("unknown kind '{s}'; one of: claude_code, opencode, openai_compatible"),
                )
            })
    }
}

/// A provider as everyone but the agent runner sees it: the API key is write-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub name: Name,
    pub kind: ProviderKind,
    /// Base URL of the API (openai_compatible only), e.g. `http://localhost:11434/v1`.
    pub base_url: Option<String>,
    /// Model used when the agent names none.
    pub model: Option<String>,
    /// Whether an API key is stored. The key itself is never returned.
    pub api_key_set: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl Provider {
    /// Checks the kind-specific fields: an openai_compatible provider needs an
    /// http(s) base URL and a model; for CLI providers both are optional (a
    /// base URL is the API the CLI talks to: `ANTHROPIC_BASE_URL` for Claude Code,
    /// a custom OpenAI-compatible provider for OpenCode).
    pub fn check(
        kind: ProviderKind,
        base_url: Option<&str>,
        model: Option<&str>,
        api_key_set: bool,
    ) -> Result<(), DomainError> {
        match kind {
            ProviderKind::OpenaiCompatible => {
                let url = base_url.ok_or_else(|| DomainError::invalid("base_url", "an openai_compatible provider needs a base URL, e.g. http://localhost:11434/v1"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(DomainError::invalid(
                        "base_url",
                        format!("'{url}' must start with http:// or https://"),
                    ));
                }
                if model.is_none_or(str::is_empty) {
                    return Err(DomainError::invalid(
                        "model",
                        "an openai_compatible provider needs a default model",
                    ));
                }
            }
            ProviderKind::ClaudeCode | ProviderKind::Opencode => {
                // Optional: a gateway or local model server, and its key. Without
                // them the CLI uses its own login or the passed environment.
                if let Some(url) = base_url
                    && !(url.starts_with("http://") || url.starts_with("https://"))
                {
                    return Err(DomainError::invalid(
                        "base_url",
                        format!("'{url}' must start with http:// or https://"),
                    ));
                }
                let _ = api_key_set;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_compatible_needs_a_url_and_a_model() {
        assert!(
            Provider::check(
                ProviderKind::OpenaiCompatible,
                Some("http://localhost:11434/v1"),
                Some("llama3"),
                false
            )
            .is_ok()
        );
        assert!(Provider::check(ProviderKind::OpenaiCompatible, None, Some("m"), false).is_err());
        assert!(
            Provider::check(
                ProviderKind::OpenaiCompatible,
                Some("ftp://x"),
                Some("m"),
                false
            )
            .is_err()
        );
        assert!(
            Provider::check(
                ProviderKind::OpenaiCompatible,
                Some("https://x"),
                None,
                true
            )
            .is_err()
        );
    }

    #[test]
    fn cli_providers_may_name_an_api_and_a_key() {
        assert!(Provider::check(ProviderKind::ClaudeCode, None, Some("sonnet"), false).is_ok());
        assert!(Provider::check(ProviderKind::Opencode, Some("http://x"), None, false).is_ok());
        assert!(Provider::check(ProviderKind::ClaudeCode, None, None, true).is_ok());
        assert!(
            Provider::check(ProviderKind::ClaudeCode, Some("localhost:1"), None, true).is_err()
        );
    }

    #[test]
    fn kinds_round_trip() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(kind.as_str()), Ok(kind));
        }
        assert!(ProviderKind::parse("gpt").is_err());
    }
}
