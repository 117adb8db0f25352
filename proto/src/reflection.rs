//! gRPC reflection (v1 and v1alpha, for older grpcurl) that lists only the
//! services a server serves, and health.

use tonic_reflection::server::v1::{ServerReflection, ServerReflectionServer};
use tonic_reflection::server::v1alpha::{
    ServerReflection as ServerReflectionAlpha,
    ServerReflectionServer as ServerReflectionAlphaServer,
};

/// Reflection services (v1, v1alpha) advertising `services` and gRPC health.
pub fn services(
    services: &[&str],
) -> Result<
    (
        ServerReflectionServer<impl ServerReflection>,
        ServerReflectionAlphaServer<impl ServerReflectionAlpha>,
    ),
    tonic_reflection::server::Error,
> {
    let builder = || {
        let mut builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("grpc.health.v1.Health");
        for service in services {
            builder = builder.with_service_name(*service);
        }
        builder
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}
