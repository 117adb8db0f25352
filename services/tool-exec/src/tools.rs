//! One module per tool (or family of tools). Each takes a [`ToolContext`] and the
//! tool's typed arguments from the catalog, and returns a [`ToolOutcome`] whose
//! output is the catalog's output type.
//!
//! [`ToolContext`]: crate::context::ToolContext
//! [`ToolOutcome`]: crate::context::ToolOutcome

pub mod bash;
pub mod delete;
pub mod git;
pub mod help;
pub mod list;
pub mod patch;
pub mod read;
pub mod search;
#[cfg(test)]
pub(crate) mod test_support;
mod walk;
pub mod write;
