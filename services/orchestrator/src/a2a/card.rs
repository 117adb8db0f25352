//! A workspace's agent card: who it is, where and how to call it, what it
//! can do. Anyone may read the public card (it names no agent); the
//! extended card, for a viewer key, lists the workspace's agents as skills.

use chorus_proto::a2a::v1 as pb;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use super::PROTOCOL_VERSION;
use super::convert::{INPUT_MODES, OUTPUT_MODES};
use crate::domain::{Agent, AgentKind, Workspace};
use crate::state::AppState;

/// The security scheme's name in the card.
const SCHEME: &str = "chorusApiKey";

/// The request header the console names the host a client reached it by
/// with (its `Host`), for a card whose services listen on every address.
pub use chorus_console::SEEN_HOST_HEADER;

/// The card anyone may read: the workspace, where its interfaces are, the
/// key it takes, and one skill (a task, planned and carried out).
/// `seen_host` is the host the client reached the card by.
pub fn public_card(
    state: &AppState,
    workspace: &Workspace,
    seen_host: Option<&str>,
) -> pb::AgentCard {
    card(state, workspace, &[], seen_host)
}

/// The card for a caller with a key: every user-defined agent of the
/// workspace is a skill (`metadata.skill` of a message names it).
pub fn extended_card(
    state: &AppState,
    workspace: &Workspace,
    agents: &[Agent],
    seen_host: Option<&str>,
) -> pb::AgentCard {
    card(state, workspace, agents, seen_host)
}

/// Where the workspace's three bindings are: JSON-RPC and HTTP+JSON under
/// the console's `/a2a/<workspace>`, gRPC at the orchestrator's port (the
/// workspace its tenant). JSON-RPC comes first: the binding A2A's SDKs
/// choose by default.
fn interfaces(
    state: &AppState,
    workspace: &Workspace,
    seen_host: Option<&str>,
) -> Vec<pb::AgentInterface> {
    let interface = |url: String, binding: &str, tenant: &str| pb::AgentInterface {
        url,
        protocol_binding: binding.to_owned(),
        tenant: tenant.to_owned(),
        protocol_version: PROTOCOL_VERSION.to_owned(),
    };
    let mut out = Vec::with_capacity(3);
    if !state.addresses.console.is_empty() {
        let base = format!(
            "{}/a2a/{}",
            reachable(&state.addresses.console, seen_host),
            utf8_percent_encode(workspace.name.as_str(), PATH_SEGMENT)
        );
        out.push(interface(base.clone(), "JSONRPC", ""));
        out.push(interface(base, "HTTP+JSON", ""));
    }
    let grpc = reachable(&state.addresses.orchestrator, seen_host);
    let grpc = grpc
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    out.push(interface(grpc.to_owned(), "GRPC", workspace.name.as_str()));
    out
}

/// What needs escaping in a path segment (RFC 3986's pchar, less `%`).
const PATH_SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// `address` (`scheme://host:port` or `host:port`) as a client can reach
/// it: a service listening on every address (`0.0.0.0`, `::`) with no
/// advertised address is named by the host the client reached the card
/// by — or, when that is not known (a card asked for over gRPC), by this
/// machine's host name — with the service's own port. Never `0.0.0.0`.
pub fn reachable(address: &str, seen_host: Option<&str>) -> String {
    let (scheme, rest) = match address.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, address),
    };
    let listening = match rest.parse::<std::net::SocketAddr>() {
        Ok(listening) if listening.ip().is_unspecified() => listening,
        _ => return address.to_owned(),
    };
    let machine = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok());
    let host = seen_host
        .and_then(host_of)
        .or_else(|| machine.as_deref().and_then(host_of));
    let Some(host) = host else {
        return address.to_owned();
    };
    let named = format!("{host}:{}", listening.port());
    match scheme {
        Some(scheme) => format!("{scheme}://{named}"),
        None => named,
    }
}

/// The host of a `Host` header (`name:port`, `[v6]:port` or a bare name),
/// when it is one.
fn host_of(header: &str) -> Option<&str> {
    let host = match header.strip_prefix('[') {
        Some(v6) => &header[..v6.find(']')? + 2],
        None => header.rsplit_once(':').map_or(header, |(host, _)| host),
    };
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
    valid.then_some(host)
}

fn card(
    state: &AppState,
    workspace: &Workspace,
    agents: &[Agent],
    seen_host: Option<&str>,
) -> pb::AgentCard {
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
        supported_interfaces: interfaces(state, workspace, seen_host),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_on_every_address_is_named_by_the_host_the_client_used() {
        assert_eq!(
            reachable("http://0.0.0.0:50053", Some("chorus.example:8443")),
            "http://chorus.example:50053"
        );
        assert_eq!(
            reachable("[::]:50051", Some("[2001:db8::1]:80")),
            "[2001:db8::1]:50051"
        );
        assert_eq!(
            reachable("0.0.0.0:50051", Some("chorus.example")),
            "chorus.example:50051"
        );
        // An advertised or specific address is kept; a Host that is not a host is not used.
        assert_eq!(
            reachable("10.0.0.5:50051", Some("evil:1")),
            "10.0.0.5:50051"
        );
        // A Host that is not a host is not used: the machine's name is.
        let machine = nix::unistd::gethostname().expect("host name");
        let machine = machine.to_str().expect("UTF-8");
        assert_eq!(
            reachable("0.0.0.0:50051", Some("a/b@c")),
            format!("{machine}:50051")
        );
        assert_eq!(reachable("0.0.0.0:50051", None), format!("{machine}:50051"));
        assert_eq!(
            reachable("grpc.example:443", Some("other")),
            "grpc.example:443"
        );
    }
}
