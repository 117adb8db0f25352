//! Tools that run processes, driven through `ToolRunner::execute` as the gRPC
//! adapter drives them: bash (process groups, timeouts, cancellation, output
//! caps) and the git tools (against real repositories in temporary directories).

mod bash;
mod common;
mod git;
mod git_config;
