//! Workspaces: create (with their default agents), get, list, rename or set the
//! system provider, delete.

use chorus_proto::orchestrator::v1 as pb;

use crate::domain::{Name, Workspace};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

fn on_wire(state: &AppState, workspace: &Workspace) -> pb::Workspace {
    convert::workspace(
        workspace,
        crate::core::workspaces::warnings(state, workspace),
    )
}

pub(super) async fn create(
    state: &AppState,
    req: pb::CreateWorkspaceRequest,
) -> Result<pb::Workspace, ServiceError> {
    let name = Name::parse("name", &req.name)?;
    let workspace = crate::core::workspaces::create(state, name, &req.root).await?;
    Ok(on_wire(state, &workspace))
}

pub(super) async fn get(
    state: &AppState,
    req: pb::GetWorkspaceRequest,
) -> Result<pb::Workspace, ServiceError> {
    let id = convert::workspace_id("id", &req.id)?;
    Ok(on_wire(state, &state.store.get_workspace(id).await?))
}

pub(super) async fn list(state: &AppState) -> Result<pb::ListWorkspacesResponse, ServiceError> {
    let workspaces = state.store.list_workspaces().await?;
    Ok(pb::ListWorkspacesResponse {
        workspaces: workspaces.iter().map(|w| on_wire(state, w)).collect(),
    })
}

pub(super) async fn update(
    state: &AppState,
    req: pb::UpdateWorkspaceRequest,
) -> Result<pb::Workspace, ServiceError> {
    let id = convert::workspace_id("id", &req.id)?;
    let name = req
        .name
        .map(|name| Name::parse("name", &name))
        .transpose()?;
    // Present and "" clears it; absent keeps it.
    let system_provider = req
        .system_provider
        .map(|p| convert::optional_name("system_provider", p))
        .transpose()?;
    let limits = req.limits.map(convert::workspace_limits_from).transpose()?;
    if let Some(limits) = &limits {
        limits.check()?;
    }
    let changes = req
        .changes
        .map(super::branches::workspace_changes_from)
        .transpose()?;
    if !req.set_approval_rules && !req.approval_rules.is_empty() {
        return Err(ServiceError::Invalid(
            "invalid approval_rules: set set_approval_rules to replace the rules".to_owned(),
        ));
    }
    let approval_rules = req
        .set_approval_rules
        .then(|| super::approvals::rules_from(req.approval_rules))
        .transpose()?;
    let workspace = state
        .store
        .update_workspace(id, name, system_provider, limits, changes, approval_rules)
        .await?;
    Ok(on_wire(state, &workspace))
}

pub(super) async fn delete(
    state: &AppState,
    req: pb::DeleteWorkspaceRequest,
) -> Result<pb::DeleteWorkspaceResponse, ServiceError> {
    let id = convert::workspace_id("id", &req.id)?;
    state.store.delete_workspace(id).await?;
    Ok(pb::DeleteWorkspaceResponse {})
}
