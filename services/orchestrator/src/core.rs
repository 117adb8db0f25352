//! The orchestrator's application core: what every face calls — the gRPC
//! services, the embedded tool-exec's gate, the MCP face through it, and the
//! faces to come. Its functions take and return domain types and answer
//! [`crate::error::ServiceError`]; a face converts its wire types, calls
//! them and maps the error (gRPC: [`crate::error::ServiceError::code`]).
//!
//! - [`agents`]: agents changed (what resetting instructions means);
//! - [`agent_tools`]: what agent runs use — the orchestration tools, the
//!   allow-list decision for every tool call, and call recording;
//! - [`keys`]: API keys made and revoked, the run-token key rotated;
//! - [`providers`]: providers and their keys' references;
//! - [`runs`]: runs a caller drives itself (OpenRun, FinishRun);
//! - [`tasks`]: a task's life — created, planned and answered, started on an
//!   agent, moved by hand, canceled;
//! - [`watch`]: a task's history, then live;
//! - [`workspaces`]: workspaces within the roots the deployment allows.

pub mod agent_tools;
pub mod agents;
pub mod approvals;
pub mod branches;
pub mod keys;
pub mod providers;
pub mod runs;
pub mod tasks;
pub mod usage;
pub mod watch;
pub mod workspaces;
