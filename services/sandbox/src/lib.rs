//! Chorus's run sandbox.
//!
//! Every process an agent causes — a CLI agent and everything it starts, each
//! bash and git call of tool-exec — starts through one small launcher,
//! `chorus-sandbox`, which confines it: a PID namespace whose init dies with the
//! service (so the kernel kills every process of the run, whatever happened to
//! the service), a mount namespace showing only the system directories and the
//! run's own paths, Landlock rules on top, never root and no capabilities, an
//! allow-listed environment, no network unless granted, resource limits. See
//! docs/decisions/0013-run-sandbox.md.
//!
//! - [`policy`]: what one sandbox allows, as the launcher reads it;
//! - [`egress`]: where a proxied sandbox may connect, and what it never reaches;
//! - [`questions`]: how its proxy asks the service before each connection;
//! - [`launcher`]: the launcher itself (the `chorus-sandbox` binary);
//! - [`service`]: how a service uses it: probing the host at start, building
//!   the command of a sandboxed process, stopping it.

#[cfg(feature = "cli")]
pub mod cli;
pub mod egress;
pub mod fence;
pub mod launcher;
pub mod ledger;
pub mod policy;
mod procfs;
pub mod questions;
pub mod service;
#[cfg(feature = "testing")]
pub mod testing;

pub use egress::{EgressRule, Forward};
pub use policy::{Cgroups, Cover, Identity, Limits, NETWORK_ENV, Network, Policy, Tier};
pub use questions::NetworkQuestions;
pub use service::{
    Mode, ProcessSpec, Sandbox, SandboxConfig, SandboxError, SandboxStatus, SandboxedChild,
};
