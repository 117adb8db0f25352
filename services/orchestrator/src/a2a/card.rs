//! A workspace's agent card: who it is, where and how to call it, what it
//! can do. Anyone may read the public card (it names no agent); the
//! extended card, for a viewer key, lists the workspace's agents as skills.

use chorus_proto::a2a::v1 as pb;

use super::PROTOCOL_VERSION;
use super::convert::{INPUT_MODES, OUTPUT_MODES};
use crate::domain::{Agent, AgentKind, Workspace};
use crate::state::AppState;

/// The security scheme's name in the card.
const SCHEME: &str = "chorusApiKey";

/// The card anyone may read: the workspace, where its gRPC interface is,
/// the key it takes, and one skill (a task, planned and carried out).
pub fn public_card(state: &AppState, workspace: &Workspace) -> pb::AgentCard {
    card(state, workspace, &[])
}

/// The card for a caller with a key: every user-defined agent of the
/// workspace is a skill (`metadata.skill` of a message names it).
pub fn extended_card(state: &AppState, workspace: &Workspace, agents: &[Agent]) -> pb::AgentCard {
    card(state, workspace, agents)
}

fn card(state: &AppState, workspace: &Workspace, agents: &[Agent]) -> pb::AgentCard {
    let url = state
        .addresses
        .orchestrator
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .to_owned();
    let mut skills = vec![pb::AgentSkill {
        id: "task".to_owned(),
        name: "Plan and carry out a task".to_owned(),
        description: format!(
            "Describe the work: Chorus plans it (asking questions when it must, as input-required), then one of workspace {}'s agents carries it out in the workspace, with only the tools it was granted; the completion report and the files changed are the artifacts.",
            workspace.name
        ),
        tags: vec![
            "planning".to_owned(),
            "coding".to_owned(),
            "files".to_owned(),
        ],
        examples: vec!["Add a README section on configuration".to_owned()],
        ..pb::AgentSkill::default()
    }];
    skills.extend(
        agents
            .iter()
            .filter(|a| a.kind == AgentKind::UserDefined)
            .map(|agent| pb::AgentSkill {
                id: agent.name.to_string(),
                name: agent.name.to_string(),
                description: match agent.instructions.trim() {
                    "" => format!("Agent {} of the workspace", agent.name),
                    text => crate::providers::cut(text, 1024),
                },
                tags: agent.allowed_tools.clone(),
                ..pb::AgentSkill::default()
            }),
    );
    let scheme = pb::SecurityScheme {
        scheme: Some(pb::security_scheme::Scheme::HttpAuthSecurityScheme(
            pb::HttpAuthSecurityScheme {
                description: "A Chorus API key (chorus key create): operator to send messages and cancel, viewer to read"
                    .to_owned(),
                scheme: "bearer".to_owned(),
                bearer_format: "chorus API key".to_owned(),
            },
        )),
    };
    pb::AgentCard {
        name: format!("Chorus · {}", workspace.name),
        description: format!(
            "Chorus runs teams of AI agents on the files of workspace {}: every tool call checked against the agent's allow-list, in a sandbox, recorded, within the task's budget.",
            workspace.name
        ),
        supported_interfaces: vec![pb::AgentInterface {
            url,
            protocol_binding: "GRPC".to_owned(),
            tenant: workspace.name.to_string(),
            protocol_version: PROTOCOL_VERSION.to_owned(),
        }],
        provider: None,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        documentation_url: None,
        capabilities: Some(pb::AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(true),
            extensions: Vec::new(),
            extended_agent_card: Some(true),
        }),
        security_schemes: [(SCHEME.to_owned(), scheme)].into_iter().collect(),
        security_requirements: vec![pb::SecurityRequirement {
            schemes: [(SCHEME.to_owned(), pb::StringList::default())]
                .into_iter()
                .collect(),
        }],
        default_input_modes: INPUT_MODES.map(str::to_owned).to_vec(),
        default_output_modes: OUTPUT_MODES.map(str::to_owned).to_vec(),
        skills,
        signatures: Vec::new(),
        icon_url: None,
    }
}
