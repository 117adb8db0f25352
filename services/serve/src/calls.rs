//! Which kind of call a gRPC method is, for the layers that treat kinds apart:
//! unary calls have a deadline and share one concurrency limit; streams are
//! never cut and have a limit of their own, so long streams cannot starve
//! unary calls; health is never limited nor cut, so probes answer under load.
//!
//! Streaming methods are read from the services' descriptors, not listed by
//! hand: a new streaming RPC is treated as one without anyone remembering to.

use std::collections::HashSet;
use std::sync::Arc;

use prost::Message;
use prost_types::FileDescriptorSet;

/// What a call is, as the layers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// gRPC health (Check and Watch): never limited, never cut.
    Health,
    /// A unary call: bounded by the request timeout, counted against
    /// `--max-concurrent-requests`.
    Unary,
    /// A unary call with a deadline of its own (tool-exec's ExecuteTool,
    /// bounded by `--tool-timeout-secs` and its bash timeout): counted against
    /// `--max-concurrent-requests`, not cut by the request timeout.
    OwnDeadline,
    /// A server- or client-streaming call (WatchTask, Handoff, reflection):
    /// counted against `--max-concurrent-streams`, never cut.
    Stream,
}

/// How a server's methods are classified.
#[derive(Debug, Clone)]
pub struct Calls {
    streams: Arc<HashSet<String>>,
    /// Methods whose client sends a stream of messages.
    client_streams: Arc<HashSet<String>>,
    own_deadline: Arc<HashSet<String>>,
}

/// gRPC health's path prefix.
const HEALTH: &str = "/grpc.health.v1.Health/";
/// gRPC reflection (v1 and v1alpha): a bidirectional stream.
const REFLECTION: &str = "/grpc.reflection.";

/// Why a descriptor set could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CallsError {
    #[error("the descriptor set cannot be decoded: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("the descriptor set has no service '{0}'")]
    UnknownService(String),
}

impl Calls {
    /// The methods of `services` (full names: `chorus.tools.v1.ToolExec`) in
    /// the encoded `descriptor_set`; `own_deadline` lists unary paths
    /// (`/package.Service/Method`) that bound themselves.
    pub fn from_descriptors(
        descriptor_set: &[u8],
        services: &[&str],
        own_deadline: &[&str],
    ) -> Result<Self, CallsError> {
        let set = FileDescriptorSet::decode(descriptor_set)?;
        let mut streams = HashSet::new();
        let mut client_streams = HashSet::new();
        for wanted in services {
            let mut found = false;
            for file in &set.file {
                let package = file.package();
                for service in &file.service {
                    let name = if package.is_empty() {
                        service.name().to_owned()
                    } else {
                        format!("{package}.{}", service.name())
                    };
                    if name != *wanted {
                        continue;
                    }
                    found = true;
                    client_streams.extend(
                        service
                            .method
                            .iter()
                            .filter(|m| m.client_streaming())
                            .map(|m| format!("/{name}/{}", m.name())),
                    );
                    streams.extend(
                        service
                            .method
                            .iter()
                            .filter(|m| m.server_streaming() || m.client_streaming())
                            .map(|m| format!("/{name}/{}", m.name())),
                    );
                }
            }
            if !found {
                return Err(CallsError::UnknownService((*wanted).to_owned()));
            }
        }
        Ok(Self {
            streams: Arc::new(streams),
            client_streams: Arc::new(client_streams),
            own_deadline: Arc::new(own_deadline.iter().map(|p| (*p).to_owned()).collect()),
        })
    }

    /// The kind of the call to `path` (`/package.Service/Method`).
    pub fn kind(&self, path: &str) -> CallKind {
        if path.starts_with(HEALTH) {
            CallKind::Health
        } else if path.starts_with(REFLECTION) || self.streams.contains(path) {
            CallKind::Stream
        } else if self.own_deadline.contains(path) {
            CallKind::OwnDeadline
        } else {
            CallKind::Unary
        }
    }

    /// Whether the client of `path` sends a stream of messages (reflection is
    /// one): its request is not read ahead of the call.
    pub fn client_streams(&self, path: &str) -> bool {
        path.starts_with(REFLECTION) || self.client_streams.contains(path)
    }

    /// The streaming methods of the services, sorted (for logs and tests).
    pub fn streams(&self) -> Vec<String> {
        let mut streams: Vec<String> = self.streams.iter().cloned().collect();
        streams.sort();
        streams
    }
}

/// Calls of a demo service `demo.v1.Demo`: `Get` (unary), `Watch` (a stream)
/// and `Run` (unary, its own deadline).
#[cfg(test)]
pub(crate) fn demo() -> Calls {
    Calls::from_descriptors(
        &tests::descriptors(),
        &["demo.v1.Demo"],
        &["/demo.v1.Demo/Run"],
    )
    .expect("demo calls")
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{FileDescriptorProto, MethodDescriptorProto, ServiceDescriptorProto};

    fn method(name: &str, server_streaming: bool) -> MethodDescriptorProto {
        MethodDescriptorProto {
            name: Some(name.to_owned()),
            server_streaming: Some(server_streaming),
            ..Default::default()
        }
    }

    pub(super) fn descriptors() -> Vec<u8> {
        FileDescriptorSet {
            file: vec![FileDescriptorProto {
                package: Some("demo.v1".to_owned()),
                service: vec![ServiceDescriptorProto {
                    name: Some("Demo".to_owned()),
                    method: vec![
                        method("Get", false),
                        method("Watch", true),
                        method("Run", false),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn streams_come_from_the_descriptors_and_health_is_apart() {
        let calls = demo();
        assert_eq!(calls.streams(), vec!["/demo.v1.Demo/Watch".to_owned()]);
        assert_eq!(calls.kind("/demo.v1.Demo/Get"), CallKind::Unary);
        assert_eq!(calls.kind("/demo.v1.Demo/Watch"), CallKind::Stream);
        assert_eq!(calls.kind("/demo.v1.Demo/Run"), CallKind::OwnDeadline);
        assert_eq!(calls.kind("/grpc.health.v1.Health/Check"), CallKind::Health);
        assert_eq!(calls.kind("/grpc.health.v1.Health/Watch"), CallKind::Health);
        assert_eq!(
            calls.kind("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            CallKind::Stream
        );
    }

    #[test]
    fn an_unknown_service_is_an_error() {
        let error =
            Calls::from_descriptors(&descriptors(), &["demo.v1.Other"], &[]).expect_err("unknown");
        assert_eq!(
            error.to_string(),
            "the descriptor set has no service 'demo.v1.Other'"
        );
    }
}
