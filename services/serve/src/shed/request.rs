//! A call's request read before the call takes a place of its kind.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::Frame;
use tonic::Status;
use tonic::body::Body;

/// The 5 bytes before each gRPC message: compression flag and length.
pub(super) const GRPC_FRAME_HEADER: usize = 5;

/// `body` read to its end, or to `limit` bytes and then the rest unread.
pub(super) async fn read_up_to(mut body: Body, limit: usize) -> Result<Body, Status> {
    use http_body_util::BodyExt;
    let mut read = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| Status::cancelled(format!("the request ended early: {e}")))?;
        // A gRPC request carries no trailers; any other frame is left out.
        if let Ok(data) = frame.into_data() {
            read.extend_from_slice(&data);
            if read.len() > limit {
                return Ok(Body::new(Prefixed {
                    prefix: Some(read.freeze()),
                    rest: body,
                }));
            }
        }
    }
    Ok(Body::new(http_body_util::Full::new(read.freeze())))
}

/// A request body of which `prefix` has been read already.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: Body,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}
