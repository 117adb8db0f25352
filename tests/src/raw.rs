//! Calling any gRPC method by its path with raw message bytes, so that a test
//! can walk every method a server has. An empty body is a valid message of
//! every proto3 type (all fields at their defaults).

use prost::Message;
use tokio_util::bytes::{Buf, BufMut};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

/// Bytes in, bytes out.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

#[derive(Debug)]
pub struct RawEncoder;

#[derive(Debug)]
pub struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}

/// One method of a served package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    /// `/package.Service/Method`
    pub path: String,
    /// `Service/Method`
    pub name: String,
    pub server_streaming: bool,
}

/// Every method of the services in proto `package` (from the descriptor set the
/// servers publish for reflection).
pub fn methods(package: &str) -> Vec<Method> {
    let set = prost_types::FileDescriptorSet::decode(chorus_proto::FILE_DESCRIPTOR_SET)
        .expect("descriptor set");
    let mut all = Vec::new();
    for file in set.file.iter().filter(|f| f.package() == package) {
        for service in &file.service {
            for method in &service.method {
                all.push(Method {
                    path: format!("/{package}.{}/{}", service.name(), method.name()),
                    name: format!("{}/{}", service.name(), method.name()),
                    server_streaming: method.server_streaming(),
                });
            }
        }
    }
    all
}

/// Calls `method` with `body` and `credential` (none: no authorization header);
/// Ok once the call (or a stream's first message) succeeded.
pub async fn call(
    channel: Channel,
    method: &Method,
    credential: Option<&str>,
    body: Vec<u8>,
) -> Result<(), Status> {
    let mut request = tonic::Request::new(body);
    if let Some(credential) = credential {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {credential}").parse().expect("ascii"),
        );
    }
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let path = method.path.parse().expect("path");
    if method.server_streaming {
        let mut stream = grpc
            .server_streaming(request, path, RawCodec)
            .await?
            .into_inner();
        stream.message().await?;
    } else {
        grpc.unary(request, path, RawCodec).await?;
    }
    Ok(())
}
