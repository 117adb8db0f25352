//! chorus-tool-exec: executes workspace tools (files, search, bash, git) for agent
//! runs, confined to each run's workspace and checked against its run token.
#![forbid(unsafe_code)]

pub mod auth;
pub mod calls;
pub mod config;
pub mod context;
pub mod error;
pub mod gate;
pub mod grpc;
pub mod mcp;
pub mod process;
pub mod record;
pub mod runner;
pub mod sandbox;
pub mod server;
pub mod settings;
pub mod stop;
pub mod tools;
pub mod watch;

pub use config::{Limits, ToolExecConfig};
pub use error::ToolError;
pub use runner::ToolRunner;
pub use server::run;
/// A task's worktree: made, read and landed by the service (see
/// [`tools::git::repository`]).
pub use tools::git::{layout as worktree_layout, repository as worktree};
