//! file.create and file.write: whole-file writes, always atomic (readers see the
//! old content or the new, never a mix).

use chorus_catalog::{args, outputs};

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::WriteMode;

/// Creates a new file (and its missing parent directories); refuses to replace
/// anything that exists, even a dangling symlink.
pub async fn create(ctx: &ToolContext, args: args::FileCreate) -> Result<ToolOutcome, ToolError> {
    write_whole(
        ctx,
        "file.create",
        args.path,
        args.content,
        WriteMode::CreateNew,
    )
    .await
}

/// Replaces the content of an existing file, keeping its permissions. A symlink to
/// a file inside the workspace is written through and stays a symlink.
pub async fn write(ctx: &ToolContext, args: args::FileWrite) -> Result<ToolOutcome, ToolError> {
    write_whole(
        ctx,
        "file.write",
        args.path,
        args.content,
        WriteMode::Replace,
    )
    .await
}

async fn write_whole(
    ctx: &ToolContext,
    tool: &str,
    path: String,
    content: String,
    mode: WriteMode,
) -> Result<ToolOutcome, ToolError> {
    let path = ctx.sandbox.resolve_for_write(&path)?;
    check_write_size(tool, "content", content.len(), ctx.limits.max_write_bytes)?;
    let bytes_written = content.len() as u64;
    {
        let path = path.clone();
        ctx.blocking(move |sandbox, stop| {
            sandbox.write_atomic(&path, content.as_bytes(), mode, stop)
        })
        .await?;
    }
    Ok(ToolOutcome::ok(&outputs::FileWritten {
        path: path.display(),
        bytes_written,
    }))
}

/// Refuses content over the write limit before anything touches the disk.
/// `what` names the content in the message ("content", "the patched file").
pub(crate) fn check_write_size(
    tool: &str,
    what: &str,
    len: usize,
    limit: u64,
) -> Result<(), ToolError> {
    if len as u64 > limit {
        return Err(ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message: format!(
                "{what} is {len} bytes, over the {limit}-byte limit for written files; \
                 split it into smaller files"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
