//! chorus-orchestrator: owns all of Chorus's state — workspaces, agents, providers,
//! tasks and their history, runs — and exposes it over gRPC.
//!
//! `domain` holds the rules (state machines, validation) and knows nothing of the
//! database or gRPC; `store` persists domain types with diesel; `core` is what
//! every face calls, in domain types; `grpc` and `embedded` are faces. See
//! docs/architecture.md for where each thing lives.
// One function sets the parent-death signal of agent processes (execution::process).
#![deny(unsafe_code)]

pub mod a2a;
pub mod auth;
pub mod core;
pub mod domain;
pub mod embedded;
pub mod error;
pub mod execution;
pub mod grpc;
pub mod history;
pub mod owner_only;
pub mod providers;
pub mod runner;
pub mod secrets;
pub mod server;
pub mod settings;
mod starting;
pub mod state;
pub mod store;
