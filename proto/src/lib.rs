//! The wire contract of Chorus.
//!
//! Generated from `proto/chorus/**/*.proto`. Client code is behind the `client`
//! feature and server code behind `server`, so `chorus-tools` compiles only clients.
#![forbid(unsafe_code)]

#[cfg(feature = "client")]
pub mod channel;
#[cfg(feature = "client")]
pub mod handoff;
pub mod json;
pub mod limits;
#[cfg(feature = "server")]
pub mod reflection;
pub mod timestamp;

/// A gRPC status code's name in lower snake case ("permission_denied"), as tool
/// results, history events and chorus-tools' JSON errors spell it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// Encoded `FileDescriptorSet` of every Chorus service, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("chorus_descriptor");

/// The Agent2Agent protocol's gRPC binding (`lf.a2a.v1`), which Chorus serves
/// on the orchestrator's port and calls as a provider of remote agents.
pub mod a2a {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("lf.a2a.v1");
        // serde's proto3 JSON of these types (pbjson), as A2A's JSON-RPC and
        // HTTP+JSON bindings carry them.
        include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.serde.rs"));
    }
}

pub mod wkt;

pub mod orchestrator {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("chorus.orchestrator.v1");
    }
}

pub mod sandbox {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("chorus.sandbox.v1");
    }
}

pub mod serving {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("chorus.serving.v1");
    }
}

pub mod tools {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("chorus.tools.v1");
    }
}
