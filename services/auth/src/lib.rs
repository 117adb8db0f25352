//! Who may call what, checked once for every RPC.
//!
//! Callers present one credential in `authorization: Bearer <credential>`:
//! - an **API key** (`chorus_<id>_<secret>`), stored hashed, with a [`Role`]:
//!   `admin`, `operator` or `viewer` for people and their tools, `tool-exec`
//!   for the tool-exec service;
//! - a **run token** (a JWT the orchestrator minted for one agent run), accepted
//!   only where an agent acts.
//!
//! Each service describes, per method, which credentials it takes ([`Access`]);
//! [`AuthLayer`] checks them before any handler runs and hands the handler the
//! caller as a [`Principal`] in the request's extensions. Health and reflection
//! are open. Refusals are UNAUTHENTICATED (no or a bad credential) or
//! PERMISSION_DENIED (a good credential without the right), with a message that
//! names what the call needs.
#![forbid(unsafe_code)]

mod access;
mod api_key;
#[cfg(feature = "cli")]
pub mod cli;
mod layer;
mod principal;
mod role;
pub mod tls;

pub use access::Access;
pub use api_key::{ApiKey, KEY_PREFIX};
pub use layer::{AuthLayer, AuthService, Authenticator, BoxFuture};
pub use principal::{Credential, Principal};
pub use role::Role;
