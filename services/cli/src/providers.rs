//! `chorus provider list|show|create|update|delete`: the models and CLIs
//! agents run on. Keys are write-only: a reference the orchestrator resolves
//! (--key-env, --key-file) or the key itself read from standard input.

use std::path::PathBuf;

use chorus_proto::orchestrator::v1 as pb;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use crate::admin::workspace_id;
use crate::client::Client;
use crate::fail::{Exit, Fail};
use crate::output::{self, Out};
use crate::prompt;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProviderKind {
    ClaudeCode,
    Opencode,
    OpenaiCompatible,
    /// A remote A2A agent: --base-url is where its agent card is.
    A2a,
}

/// How a CLI provider's agents reach their tools.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Transport {
    /// `chorus-tools mcp` is the CLI's only MCP server: each granted tool a
    /// native tool, no shell, no built-in tool (the default).
    Mcp,
    /// Every tool through `chorus-tools '<json>'` in the CLI's shell tool,
    /// fenced to that one program: for CLIs without MCP.
    Shell,
}

impl Transport {
    fn wire(self) -> pb::ToolTransport {
        match self {
            Self::Mcp => pb::ToolTransport::Mcp,
            Self::Shell => pb::ToolTransport::Shell,
        }
    }
}

/// Where its API key comes from.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The orchestrator's environment variable holding the key.
    #[arg(long, conflicts_with_all = ["key_file", "key_stdin"])]
    key_env: Option<String>,
    /// A file on the orchestrator's machine holding the key.
    #[arg(long, conflicts_with = "key_stdin")]
    key_file: Option<PathBuf>,
    /// Read the key itself from standard input (stored encrypted).
    #[arg(long)]
    key_stdin: bool,
}

impl KeyArgs {
    /// The key as the API takes it; None when none is given.
    fn key(self) -> Result<Option<String>, Fail> {
        Ok(match (self.key_env, self.key_file, self.key_stdin) {
            (Some(var), _, _) => Some(format!("env:{var}")),
            (_, Some(file), _) => Some(format!("file:{}", file.display())),
            (_, _, true) => Some(prompt::secret("provider API key: ")?),
            _ => None,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    List {
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
    },
    /// Shows a provider: its kind, URL, model, where its key comes from and
    /// how its CLI agents reach their tools.
    Show {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
    },
    /// Creates a provider.
    Create {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
        /// What runs the agents: a CLI Chorus starts, or a tool loop against
        /// an OpenAI-compatible API.
        #[arg(long, value_enum)]
        kind: ProviderKind,
        /// The API's base URL (openai-compatible; e.g. http://127.0.0.1:11434/v1).
        #[arg(long)]
        base_url: Option<String>,
        /// The model its agents use unless theirs names another.
        #[arg(long)]
        model: Option<String>,
        /// How its CLI agents reach their tools (claude-code, opencode).
        #[arg(long, value_enum)]
        tool_transport: Option<Transport>,
        #[command(flatten)]
        key: KeyArgs,
    },
    /// Changes a provider: only what is given ("" clears the URL or model).
    Update {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
        #[arg(long)]
        base_url: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// How its CLI agents reach their tools (claude-code, opencode).
        #[arg(long, value_enum)]
        tool_transport: Option<Transport>,
        #[command(flatten)]
        key: KeyArgs,
        /// Removes its API key.
        #[arg(long, conflicts_with_all = ["key_env", "key_file", "key_stdin"])]
        no_key: bool,
    },
    Delete {
        name: String,
        /// The workspace, by name or id.
        #[arg(long, short)]
        workspace: String,
    },
}

const FIELDS: &[(&str, &str)] = &[
    ("NAME", "name"),
    ("KIND", "kind"),
    ("BASE URL", "baseUrl"),
    ("MODEL", "model"),
    ("API KEY", "apiKey"),
    ("TOOLS VIA", "toolTransport"),
];

pub async fn run(command: ProviderCommand, mut client: Client, out: &Out) -> Result<Exit, Fail> {
    let c = &mut client;
    match command {
        ProviderCommand::List { workspace } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            let providers = c
                .list_providers(pb::ListProvidersRequest { workspace_id })
                .await
                .map_err(|s| Fail::call("list the providers", &s))?
                .into_inner()
                .providers;
            let rows: Vec<Value> = providers.iter().map(output::provider).collect();
            out.table(&rows, FIELDS);
        }
        ProviderCommand::Show { name, workspace } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            let p = c
                .get_provider(pb::GetProviderRequest { workspace_id, name })
                .await
                .map_err(|s| Fail::call("read the provider", &s))?
                .into_inner();
            out.value(&output::provider(&p), FIELDS);
        }
        ProviderCommand::Create {
            name,
            workspace,
            kind,
            base_url,
            model,
            tool_transport,
            key,
        } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            let api_key = key.key()?.unwrap_or_default();
            let kind = match kind {
                ProviderKind::ClaudeCode => pb::ProviderKind::ClaudeCode,
                ProviderKind::Opencode => pb::ProviderKind::Opencode,
                ProviderKind::OpenaiCompatible => pb::ProviderKind::OpenaiCompatible,
                ProviderKind::A2a => pb::ProviderKind::A2a,
            };
            let p = c
                .create_provider(pb::CreateProviderRequest {
                    workspace_id,
                    name,
                    kind: kind as i32,
                    base_url: base_url.unwrap_or_default(),
                    model: model.unwrap_or_default(),
                    api_key,
                    tool_transport: tool_transport.map_or(0, |t| t.wire() as i32),
                })
                .await
                .map_err(|s| Fail::call("create the provider", &s))?
                .into_inner();
            out.value(&output::provider(&p), FIELDS);
        }
        ProviderCommand::Update {
            name,
            workspace,
            base_url,
            model,
            tool_transport,
            key,
            no_key,
        } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            let api_key = if no_key {
                Some(String::new())
            } else {
                key.key()?
            };
            let p = c
                .update_provider(pb::UpdateProviderRequest {
                    workspace_id,
                    name,
                    base_url,
                    model,
                    api_key,
                    tool_transport: tool_transport.map_or(0, |t| t.wire() as i32),
                })
                .await
                .map_err(|s| Fail::call("update the provider", &s))?
                .into_inner();
            out.value(&output::provider(&p), FIELDS);
        }
        ProviderCommand::Delete { name, workspace } => {
            let workspace_id = workspace_id(c, &workspace).await?;
            c.delete_provider(pb::DeleteProviderRequest {
                workspace_id,
                name: name.clone(),
            })
            .await
            .map_err(|s| Fail::call("delete the provider", &s))?;
            out.note(&format!("provider {name} deleted"));
        }
    }
    Ok(Exit::Ok)
}
