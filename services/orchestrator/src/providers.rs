//! How agents are run. Each provider turns an agent and its allow-list into
//! something that can run (CLI flags, API requests); the runs themselves arrive
//! with agent execution.

pub mod claude_flags;
pub mod prompt;
