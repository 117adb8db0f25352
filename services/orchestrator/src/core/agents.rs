//! Agents of a workspace: their instructions, allow-lists, providers and
//! egress. The rules of what an agent may hold are the domain's and the
//! store's; what is decided here is what "reset" means for instructions.

use crate::domain::{Agent, Name, WorkspaceId};
use crate::error::ServiceError;
use crate::state::AppState;
use crate::store::AgentChanges;

/// What becomes of an agent's instructions when it is changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instructions {
    Keep,
    Set(String),
    /// Back to what a default agent (the planner too) was created with.
    Reset,
}

/// Changes agent `name` of `workspace`: `instructions` as said, the rest as
/// `changes` say (their `instructions` is ignored).
pub async fn update(
    state: &AppState,
    workspace: WorkspaceId,
    name: Name,
    instructions: Instructions,
    mut changes: AgentChanges,
) -> Result<Agent, ServiceError> {
    changes.instructions = match instructions {
        Instructions::Keep => None,
        Instructions::Set(text) => Some(text),
        Instructions::Reset => Some(default_instructions(&name)?),
    };
    Ok(state.store.update_agent(workspace, name, changes).await?)
}

/// The instructions a default agent was created with.
fn default_instructions(name: &Name) -> Result<String, ServiceError> {
    crate::domain::default_agents()
        .into_iter()
        .find(|(default, ..)| *default == name.as_str())
        .map(|(.., instructions)| instructions.to_owned())
        .ok_or_else(|| {
            ServiceError::Invalid(format!(
                "reset_instructions: '{name}' is not one of the agents a workspace starts with, so it has no original instructions"
            ))
        })
}
