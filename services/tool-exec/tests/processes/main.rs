//! Tools that run processes, driven through `ToolRunner::execute` as the gRPC
//! adapter drives them: bash (process groups, timeouts, cancellation, output
//! caps) and the git tools (against real repositories in temporary directories).

mod bash;
mod common;
mod git;
mod git_config;
mod network;
mod worktree;

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
