//! The A2A face: the Agent2Agent protocol's gRPC binding
//! (`lf.a2a.v1.A2AService`) on the orchestrator's port, over the same core
//! as the Chorus API (decision 0033). A workspace is a tenant; a message
//! becomes a task that is planned and then started by itself; the task's
//! history, mapped, is what A2A clients stream. Like every face it only
//! converts, calls the core and maps errors.

mod card;
mod convert;
mod decode;
mod errors;
mod follow;
pub mod push;
mod service;

pub use decode::ExplainDecodeErrors;
pub use errors::check_version;
pub use service::{A2aFace, AFTER_SEQUENCE_HEADER};

pub use card::SEEN_HOST_HEADER;

/// The public agent card of the workspace `tenant` names (its name or id),
/// which anyone may read: the console serves it at
/// `/a2a/<workspace>/.well-known/agent-card.json`. `seen_host` is the host
/// the client reached the console by.
pub async fn public_card(
    state: &crate::state::AppState,
    tenant: &str,
    seen_host: Option<&str>,
) -> Result<chorus_proto::a2a::v1::AgentCard, tonic::Status> {
    let workspace = service::workspace(state, tenant).await?;
    Ok(card::public_card(state, &workspace, seen_host))
}

/// The A2A protocol version served.
pub const PROTOCOL_VERSION: &str = "1.0";
