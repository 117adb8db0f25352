//! Workspaces: a root on this host where agents work, within the roots the
//! deployment allows (never Chorus's own data).

use crate::domain::{Name, Workspace};
use crate::error::ServiceError;
use crate::state::AppState;

/// Creates a workspace named `name` at `root`: an absolute directory the
/// deployment's root policy (`--workspace-roots`) allows.
pub async fn create(state: &AppState, name: Name, root: &str) -> Result<Workspace, ServiceError> {
    let checked = Workspace::check_root(root)?;
    state.roots.check(&checked)?;
    Ok(state.store.create_workspace(name, root).await?)
}
