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

/// What will not work in `workspace` as it is, each with its fix: today, a
/// root the sandbox would run processes in as root (a root service, a
/// root-owned root, no `--sandbox-user`), where bash, git and CLI agents are
/// refused at StartTask. Said at creation and on every read, so nobody finds
/// out only when a task starts.
pub fn warnings(state: &AppState, workspace: &Workspace) -> Vec<String> {
    let processes = state.runner.processes();
    match processes.identity_for(&workspace.root) {
        Ok(_) => Vec::new(),
        Err(e) => vec![format!(
            "bash, git and CLI agents will be refused in this workspace: {e}"
        )],
    }
}
