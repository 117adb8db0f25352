//! What both Chorus servers do the same way:
//!
//! - [`connections`]: the accept loop, with connections bounded in number
//!   and in time (handshake, idle, an answer left unread);
//! - the tower layers every call passes: [`deadline`] (the request timeout of
//!   unary calls, DEADLINE_EXCEEDED) outermost, and [`shed`] inside the auth
//!   layer (places per kind of caller and credential, refused at once with
//!   RESOURCE_EXHAUSTED and a retry hint; a call's message read first; unread
//!   answers bounded); [`calls`] tells unary calls, streams and health apart
//!   for them;
//! - [`grpc`]: one gRPC port as both services serve it — the layers in
//!   order, health, reflection, TLS, the drain and the grace;
//! - [`memory`]: the allocator's arenas, set first thing in `main`;
//! - [`health`]: one status for every served name, NOT_SERVING while a
//!   dependency fails and once the server drains;
//! - [`settings`]: the flags for all of it, keepalive and the shutdown drain;
//! - [`http`]: a plain HTTP face beside the gRPC port (the MCP endpoint),
//!   with TLS and bounded connections;
//! - [`config`]: the optional TOML file under environment and flags, and
//!   `--print-config`.
#![deny(unsafe_code)]

pub mod calls;
pub mod config;
pub mod connections;
pub mod data_dir;
pub mod deadline;
pub mod grpc;
pub mod health;
pub mod http;
pub mod memory;
pub mod settings;
pub mod shed;

pub use calls::{CallKind, Calls};
pub use health::Health;
pub use settings::{ServeArgs, ServeConfig};

/// What callers without reserved room (API keys other than admins' and
/// tool-exec's) may hold together of a limit `max` — connections, calls,
/// streams: seven eighths of it, so that however many such keys fill their
/// shares, admins, tool-exec and agents still find the rest.
pub(crate) fn unreserved_share(max: usize) -> usize {
    (max - max / 8).max(1)
}
