//! Tool calls that must stop, driven through the gRPC API as a client drives
//! them: a call past its deadline, a call whose client goes away, a call
//! running when the service shuts down. Each stops before it changed anything,
//! answers with its reason's code, and is recorded through the run gate all the
//! same; a call that did change something is recorded as done.

mod caller_left;
mod deadline;
mod service;
mod shutdown;

/// These tests again as a non-root service, and in the landlock tier, as
/// both a root and a non-root service.
#[test]
fn in_every_configuration() {
    chorus_sandbox::testing::again_in_every_configuration("in_every_configuration");
}
