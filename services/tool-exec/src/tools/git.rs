//! PLACEHOLDER: being built.

use chorus_catalog::args;

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;

pub async fn status(_ctx: &ToolContext, _args: args::GitStatus) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}

pub async fn diff(_ctx: &ToolContext, _args: args::GitDiff) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}

pub async fn commit(_ctx: &ToolContext, _args: args::GitCommit) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}

pub async fn push(_ctx: &ToolContext, _args: args::GitPush) -> Result<ToolOutcome, ToolError> {
    Err(ToolError::Internal("PLACEHOLDER".to_owned()))
}
