//! Who may call the orchestrator, and as whom an agent acts.
//!
//! One [`chorus_auth::AuthLayer`] in front of the server checks every RPC
//! against [`access::access`] (which credential each method takes). API keys are
//! checked by [`keys::KeyAuthenticator`] (hashes in the store, a short cache);
//! run tokens by their key, signature and expiry, and then, before anything is
//! done for the run, every claim against the stored run ([`runs::run_of_token`]).
//! On first start the all-in-one server creates an admin key file
//! ([`bootstrap`]).

pub mod access;
pub mod bootstrap;
pub mod keys;
pub mod runs;

pub use keys::KeyAuthenticator;
