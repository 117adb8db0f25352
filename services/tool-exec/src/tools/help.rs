//! help: the catalog, filtered to the tools this run may use.

use chorus_catalog::args;

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;

pub fn run(ctx: &ToolContext, args: args::Help) -> Result<ToolOutcome, ToolError> {
    let granted = chorus_catalog::granted_names(&ctx.grant.tools);
    if let Some(only) = args.tool.as_deref() {
        if chorus_catalog::get(only).is_none() {
            return Err(ToolError::UnknownTool(only.to_owned()));
        }
        if !granted.contains(&only) {
            return Err(ToolError::InvalidArguments {
                tool: "help".to_owned(),
                message: format!(
                    "tool '{only}' is not available to this run; available: {}",
                    granted.join(", ")
                ),
            });
        }
    }
    Ok(ToolOutcome::ok(&chorus_catalog::help_for(
        granted,
        args.tool.as_deref(),
    )))
}
