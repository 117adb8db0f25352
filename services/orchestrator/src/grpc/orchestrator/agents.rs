//! Agents of a workspace: user-defined ones are created, changed and deleted here;
//! internal ones (the planner) can be read and given instructions or a model.

use chorus_proto::orchestrator::v1 as pb;

use crate::core::agents::Instructions;
use crate::domain::{Name, WorkspaceId};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;
use crate::store::{AgentChanges, NewAgent};

/// The workspace id and agent name every per-agent request carries.
fn key(workspace_id: &str, name: &str) -> Result<(WorkspaceId, Name), ServiceError> {
    Ok((
        convert::workspace_id("workspace_id", workspace_id)?,
        Name::parse("name", name)?,
    ))
}

pub(super) async fn create(
    state: &AppState,
    req: pb::CreateAgentRequest,
) -> Result<pb::Agent, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    let new = NewAgent {
        name,
        instructions: req.instructions,
        allowed_tools: req.allowed_tools,
        provider: convert::optional_name("provider", req.provider)?,
        model: convert::non_empty(req.model),
        egress: req.egress,
        budget: convert::budget_from(req.budget)?,
        approval_rules: super::approvals::rules_from(req.approval_rules)?,
    };
    let agent = state.store.create_agent(workspace, new).await?;
    Ok(convert::agent(&workspace.to_string(), &agent))
}

pub(super) async fn get(
    state: &AppState,
    req: pb::GetAgentRequest,
) -> Result<pb::Agent, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    let agent = state.store.get_agent(workspace, name).await?;
    Ok(convert::agent(&workspace.to_string(), &agent))
}

pub(super) async fn list(
    state: &AppState,
    req: pb::ListAgentsRequest,
) -> Result<pb::ListAgentsResponse, ServiceError> {
    let workspace = convert::workspace_id("workspace_id", &req.workspace_id)?;
    let agents = state.store.list_agents(workspace).await?;
    let workspace = workspace.to_string();
    Ok(pb::ListAgentsResponse {
        agents: agents
            .iter()
            .map(|a| convert::agent(&workspace, a))
            .collect(),
    })
}

pub(super) async fn update(
    state: &AppState,
    req: pb::UpdateAgentRequest,
) -> Result<pb::Agent, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    if !req.set_allowed_tools && !req.allowed_tools.is_empty() {
        return Err(ServiceError::Invalid(
            "invalid allowed_tools: set set_allowed_tools to replace the allow-list".to_owned(),
        ));
    }
    if !req.set_egress && !req.egress.is_empty() {
        return Err(ServiceError::Invalid(
            "invalid egress: set set_egress to replace the egress list".to_owned(),
        ));
    }
    let instructions = match (req.instructions, req.reset_instructions) {
        (Some(_), true) => {
            return Err(ServiceError::Invalid(
                "instructions: give new instructions or reset_instructions, not both".to_owned(),
            ));
        }
        (None, true) => Instructions::Reset,
        (Some(text), false) => Instructions::Set(text),
        (None, false) => Instructions::Keep,
    };
    if !req.set_approval_rules && !req.approval_rules.is_empty() {
        return Err(ServiceError::Invalid(
            "invalid approval_rules: set set_approval_rules to replace the rules".to_owned(),
        ));
    }
    let changes = AgentChanges {
        approval_rules: req
            .set_approval_rules
            .then(|| super::approvals::rules_from(req.approval_rules))
            .transpose()?,
        instructions: None,
        allowed_tools: req.set_allowed_tools.then_some(req.allowed_tools),
        // Absent keeps it, "" clears it, anything else sets it.
        provider: req
            .provider
            .map(|p| convert::optional_name("provider", p))
            .transpose()?,
        model: req.model.map(convert::non_empty),
        egress: req.set_egress.then_some(req.egress),
        budget: req
            .budget
            .map(|b| convert::budget_from(Some(b)))
            .transpose()?,
    };
    let agent = crate::core::agents::update(state, workspace, name, instructions, changes).await?;
    Ok(convert::agent(&workspace.to_string(), &agent))
}

pub(super) async fn delete(
    state: &AppState,
    req: pb::DeleteAgentRequest,
) -> Result<pb::DeleteAgentResponse, ServiceError> {
    let (workspace, name) = key(&req.workspace_id, &req.name)?;
    state.store.delete_agent(workspace, name).await?;
    Ok(pb::DeleteAgentResponse {})
}
