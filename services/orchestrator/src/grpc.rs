//! The gRPC face of the orchestrator: conversions between the wire types and the
//! domain, validated once at this boundary.

pub mod agent_tools;
pub mod convert;

pub mod orchestrator;
