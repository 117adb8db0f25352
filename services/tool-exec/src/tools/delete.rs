//! file.delete: removes one file or symlink, never a directory.

use chorus_catalog::{args, outputs};

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;

/// Removes a file, or a symlink itself (not what it points to). Directories,
/// `.git` and symlinks that lead outside the workspace are refused by the sandbox.
pub async fn run(ctx: &ToolContext, args: args::FileDelete) -> Result<ToolOutcome, ToolError> {
    let path = ctx.sandbox.resolve_for_write(&args.path)?;
    {
        let path = path.clone();
        ctx.blocking(move |sandbox, stop| sandbox.remove_file(&path, stop))
            .await?;
    }
    Ok(ToolOutcome::ok(&outputs::FileDeleted {
        path: path.display(),
    }))
}

#[cfg(test)]
mod tests;
