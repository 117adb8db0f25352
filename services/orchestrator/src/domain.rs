//! Domain types and rules. No database, no gRPC: values are validated when they are
//! built, and state machines refuse transitions they do not allow.

mod agent;
mod api_key;
pub mod approval;
mod branch;
mod budget;
mod error;
mod event;
pub mod feed;
mod money;
mod name;
pub mod policy;
mod provider;
mod provider_key;
pub mod push;
mod run;
mod stage;
mod status;
mod task;
mod time;
mod usage;
mod workspace;

pub use agent::{
    Agent, AgentKind, MAX_INSTRUCTIONS_BYTES, PLANNER_TOOL, TASK_VALIDATOR, default_agents,
};
pub use api_key::ApiKeyRecord;
pub use branch::{
    BranchState, Discarding, LandMode, Landing, MAX_KEEP_DAYS, TaskBranch, WorkspaceChanges,
};
pub use budget::{
    Budget, Limit, TaskBudget, Verdict, WorkspaceLimits, check_budget, exceeded_reason,
};
pub use error::DomainError;
pub use event::{Event, EventKind, NeedsYou};
pub use money::{MAX_COST_PICO, PICO_PER_USD, cost_limit, show_usd, usd};
pub use name::Name;
pub use provider::{Provider, ProviderKind, ToolTransport};
pub use provider_key::{
    DEFAULT_KEY_ENV_PREFIX, KeyReference, KeyReferenceRules, KeySource, ProviderKey,
};
pub use run::{HandoffFailure, HandoffOutcome, Run, RunId, RunState, TokenBinding, fence_span};
pub use stage::{Stage, StageExt};
pub use status::TaskStatus;
pub use task::{AutoStart, Planning, Question, Task, TaskId, TaskSource};
pub use time::now_ms;
pub use usage::{
    CostCorrection, CostSource, DayUsage, ModelCall, Price, PricedCall, Prices, Usage,
    UsageDimension, UsageKey, date_of_day, day_of, day_of_date, group_usage, month_start,
    subtree_usage,
};
pub use workspace::{RootPolicy, Workspace, WorkspaceId};
