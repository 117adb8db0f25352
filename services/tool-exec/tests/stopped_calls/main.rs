//! Tool calls that must stop, driven through the gRPC API as a client drives
//! them: a call past its deadline, a call whose client goes away, a call
//! running when the service shuts down. Each stops before it changed anything,
//! answers with its reason's code, and is recorded through the run gate all the
//! same; a call that did change something is recorded as done.

mod caller_left;
mod deadline;
mod service;
mod shutdown;
