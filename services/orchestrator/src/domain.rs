//! Domain types and rules. No database, no gRPC: values are validated when they are
//! built, and state machines refuse transitions they do not allow.

mod agent;
mod error;
mod event;
mod name;
pub mod policy;
mod provider;
mod run;
mod stage;
mod status;
mod task;
mod time;
mod workspace;

pub use agent::{Agent, AgentKind, TASK_VALIDATOR, default_agents};
pub use error::DomainError;
pub use event::{Event, EventKind};
pub use name::Name;
pub use provider::{Provider, ProviderKind};
pub use run::{HandoffFailure, HandoffOutcome, Run, RunId, RunState, Usage};
pub use stage::{Stage, StageExt};
pub use status::TaskStatus;
pub use task::{Planning, Question, Task, TaskId, TaskSource};
pub use time::now_ms;
pub use workspace::{Workspace, WorkspaceId};
