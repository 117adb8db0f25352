//! Attacks on the workspace sandbox, made the way an agent would make them: tool
//! calls through `ToolRunner::execute`, the path the gRPC server takes.
//!
//! Layout of every arena (a fresh temporary directory):
//!
//! ```text
//! outside/outside-secret.txt          TOPSECRET ...
//! outside/private/outside-hidden.txt  TOPSECRET ...
//! outside/private/f.txt               TOPSECRET ... (same name as the race target)
//! outside/private/nested/outside-deep.txt
//! root/                               the workspace
//!   file.txt, dir/inner.txt, .git/{config,HEAD,hooks/}
//!   ln_secret_abs  -> <abs>/outside/outside-secret.txt
//!   ln_secret_rel  -> ../outside/outside-secret.txt
//!   ln_dir_abs     -> <abs>/outside/private
//!   ln_dir_rel     -> ../outside/private
//!   deep/a/b/ln_up -> ../../../../outside/private
//!   ln_dangling_out -> <abs>/outside/created-by-attack.txt (does not exist)
//!   ln_git         -> .git
//!   loop_a -> loop_b -> loop_a, self_loop -> self_loop
//!   "bad\xff.txt"  (a file name that is not UTF-8)
//! stash/                              the race's parking place (neither inside nor watched)
//! ```
//!
//! Every case asserts the exact gRPC code and that nothing outside the root changed
//! (names, kinds, link targets and bytes of everything next to `root/`). Entries
//! that are not regular files (FIFOs, devices), named directly or swapped in
//! mid-call, are refused without blocking.

mod arena;
#[path = "../support/fifo_swap.rs"]
mod fifo_swap;
mod identity;
mod kinds;
mod paths;
mod race;
mod symlinks;
mod walks;

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
