//! Providers: how agents are run (a CLI, or an OpenAI-compatible API).

use super::{DomainError, KeySource, Name};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// The Claude Code CLI (`claude`).
    ClaudeCode,
    /// The OpenCode CLI (`opencode`).
    Opencode,
    /// Any OpenAI-compatible chat-completions API.
    OpenaiCompatible,
    /// A remote agent that speaks A2A (its card's base URL).
    A2a,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 4] = [
        Self::ClaudeCode,
        Self::Opencode,
        Self::OpenaiCompatible,
        Self::A2a,
    ];

    /// Whether agents of this kind have a web search of their own (web.search
    /// maps to it; Chorus has none to offer the others).
    pub fn has_web_search(self) -> bool {
        self == Self::ClaudeCode
    }

    /// How people name the kind.
    pub fn label(self) -> &'static str {
        match self {
            Self::ClaudeCode => "Claude Code",
            Self::Opencode => "OpenCode",
            Self::OpenaiCompatible => "OpenAI-compatible",
            Self::A2a => "A2A agent",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude_code",
            Self::Opencode => "opencode",
            Self::OpenaiCompatible => "openai_compatible",
            Self::A2a => "a2a",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                DomainError::invalid(
                    "provider kind",
                    format!(
                        "unknown kind '{s}'; one of: claude_code, opencode, openai_compatible, a2a"
                    ),
                )
            })
    }
}

/// How a CLI provider's agents reach Chorus's tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ToolTransport {
    /// `chorus-tools mcp` is the CLI's only MCP server: each granted tool is a
    /// native tool of the model, and the CLI gets no shell and no built-in
    /// tools at all.
    #[default]
    Mcp,
    /// Every tool through `chorus-tools '<json>'` in the CLI's shell tool,
    /// fenced to that one program: for CLIs without MCP.
    Shell,
}

impl ToolTransport {
    pub const ALL: [ToolTransport; 2] = [Self::Mcp, Self::Shell];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mcp => "mcp",
            Self::Shell => "shell",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                DomainError::invalid(
                    "tool_transport",
                    format!("unknown '{s}'; one of: mcp, shell"),
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
    /// Where its API key comes from (None: it has none). The key itself is
    /// never returned; references are not secret and are shown.
    pub api_key_source: Option<KeySource>,
    /// How its CLI agents reach the tools (an API agent calls them natively).
    pub tool_transport: ToolTransport,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl Provider {
    /// Whether it has an API key, stored or referenced.
    pub fn api_key_set(&self) -> bool {
        self.api_key_source.is_some()
    }

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
                check_base_url(url)?;
                if model.is_none_or(str::is_empty) {
                    return Err(DomainError::invalid(
                        "model",
                        "an openai_compatible provider needs a default model",
                    ));
                }
            }
            ProviderKind::A2a => {
                let url = base_url.ok_or_else(|| {
                    DomainError::invalid(
                        "base_url",
                        "an a2a provider needs the remote agent's base URL, where its card is (<base URL>/.well-known/agent-card.json)",
                    )
                })?;
                check_base_url(url)?;
            }
            ProviderKind::ClaudeCode | ProviderKind::Opencode => {
                // Optional: a gateway or local model server, and its key. Without
                // them the CLI uses its own login or the passed environment.
                if let Some(url) = base_url {
                    check_base_url(url)?;
                }
                let _ = api_key_set;
            }
        }
        Ok(())
    }
}

impl Provider {
    /// Checks the tool transport against the kind: an API agent's loop calls
    /// the tools itself, so only the default (MCP, meaning native) fits it.
    pub fn check_transport(
        kind: ProviderKind,
        transport: ToolTransport,
    ) -> Result<(), DomainError> {
        if kind == ProviderKind::A2a && transport == ToolTransport::Shell {
            return Err(DomainError::invalid(
                "tool_transport",
                "an a2a provider's agents are remote: they call no Chorus tool; tool_transport shell is for CLI providers (claude_code, opencode)",
            ));
        }
        if kind == ProviderKind::OpenaiCompatible && transport == ToolTransport::Shell {
            return Err(DomainError::invalid(
                "tool_transport",
                "an openai_compatible provider's agents call the tools natively, with no shell; \
                 tool_transport shell is for CLI providers (claude_code, opencode)",
            ));
        }
        Ok(())
    }
}

/// Checks a base URL: http or https, with a host, at most 2 KiB.
fn check_base_url(text: &str) -> Result<(), DomainError> {
    const MAX_URL_BYTES: usize = 2048;
    let refuse = |why: String| Err(DomainError::invalid("base_url", why));
    if text.len() > MAX_URL_BYTES {
        return refuse(format!("longer than {MAX_URL_BYTES} bytes"));
    }
    match url::Url::parse(text) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => {
            refuse(format!("'{text}' must start with http:// or https://"))
        }
        Ok(url) if url.host_str().is_none_or(str::is_empty) => refuse(format!(
            "'{text}' names no host, e.g. http://localhost:11434/v1"
        )),
        Ok(_) => Ok(()),
        Err(e) => refuse(format!(
            "'{text}' is not a URL ({e}), e.g. http://localhost:11434/v1"
        )),
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
        for bad in ["http://", "ftp://x", "localhost:11434", "http://:80"] {
            let err = Provider::check(ProviderKind::Opencode, Some(bad), None, false)
                .expect_err(bad)
                .to_string();
            assert!(err.contains("base_url"), "{bad}: {err}");
        }
        assert!(Provider::check(ProviderKind::ClaudeCode, None, None, true).is_ok());
        assert!(
            Provider::check(ProviderKind::ClaudeCode, Some("localhost:1"), None, true).is_err()
        );
    }

    #[test]
    fn a_shell_transport_is_for_clis_only() {
        for kind in [ProviderKind::ClaudeCode, ProviderKind::Opencode] {
            for transport in ToolTransport::ALL {
                assert!(Provider::check_transport(kind, transport).is_ok());
            }
        }
        let err = Provider::check_transport(ProviderKind::OpenaiCompatible, ToolTransport::Shell)
            .expect_err("shell for an API")
            .to_string();
        assert!(err.contains("tool_transport"), "{err}");
        for transport in ToolTransport::ALL {
            assert_eq!(ToolTransport::parse(transport.as_str()), Ok(transport));
        }
        assert!(ToolTransport::parse("stdio").is_err());
    }

    #[test]
    fn kinds_round_trip() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(kind.as_str()), Ok(kind));
        }
        assert!(ProviderKind::parse("gpt").is_err());
    }
}
