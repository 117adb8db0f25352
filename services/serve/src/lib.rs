//! What both Chorus servers do the same way:
//!
//! - the tower layers every call passes: [`shed`] (a concurrency limit that
//!   refuses at once, RESOURCE_EXHAUSTED with a retry hint) outermost, then
//!   [`deadline`] (the request timeout of unary calls, DEADLINE_EXCEEDED);
//!   [`calls`] tells unary calls, streams and health apart for them;
//! - [`health`]: one status for every served name, NOT_SERVING while a
//!   dependency fails and once the server drains;
//! - [`settings`]: the flags for all of it, keepalive and the shutdown drain;
//! - [`config`]: the optional TOML file under environment and flags, and
//!   `--print-config`.
#![deny(unsafe_code)]

pub mod calls;
pub mod config;
pub mod connections;
pub mod data_dir;
pub mod deadline;
pub mod health;
pub mod memory;
pub mod settings;
pub mod shed;

pub use calls::{CallKind, Calls};
pub use health::Health;
pub use settings::{ServeArgs, ServeConfig};
