//! The wire contract of Chorus.
//!
//! Generated from `proto/chorus/**/*.proto`. Client code is behind the `client`
//! feature and server code behind `server`, so `chorus-tools` compiles only clients.
#![forbid(unsafe_code)]

pub mod json;

/// Encoded `FileDescriptorSet` of every Chorus service, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("chorus_descriptor");

pub mod orchestrator {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("chorus.orchestrator.v1");
    }
}

pub mod tools {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("chorus.tools.v1");
    }
}
