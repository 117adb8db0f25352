//! PLACEHOLDER: being built.

use chorus_catalog::args;

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;

pub async fn create(_ctx: &ToolContext, _args: args::FileCreate) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}

pub async fn write(_ctx: &ToolContext, _args: args::FileWrite) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}
