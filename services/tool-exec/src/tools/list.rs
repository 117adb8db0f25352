//! PLACEHOLDER: being built.

use chorus_catalog::args;

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;

pub async fn run(_ctx: &ToolContext, _args: args::FileList) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}
