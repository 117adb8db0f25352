//! How large a gRPC message of Chorus may be.
//!
//! tonic takes messages of 4 MiB by default, less than tools carry: a
//! file.create's content may be as large as tool-exec's `--max-write-bytes`, a
//! read as large as its `--max-file-bytes` (10 MiB each by default). So servers
//! accept, and clients take, messages sized by those limits, and a request over
//! its server's limit is answered RESOURCE_EXHAUSTED naming the limit
//! ([`MessageLimitLayer`], on every server).

#[cfg(feature = "server")]
mod layer;

#[cfg(feature = "server")]
pub use layer::{MessageLimit, MessageLimitLayer};

/// Default of tool-exec's `--max-write-bytes` and `--max-file-bytes`.
pub const DEFAULT_CONTENT_BYTES: u64 = 10 * 1024 * 1024;

/// Room a message needs beside its file content: the call's other arguments,
/// names and numbers.
const ENVELOPE_BYTES: usize = 1024 * 1024;

/// The largest message that carries `content_bytes` of file content: the
/// content, half as much again (file.patch carries the text it finds beside its
/// replacement; protobuf adds its framing), and 1 MiB for the rest.
pub const fn message_bytes(content_bytes: u64) -> usize {
    let content = if content_bytes > (usize::MAX / 2) as u64 {
        usize::MAX / 2
    } else {
        content_bytes as usize
    };
    content
        .saturating_add(content / 2)
        .saturating_add(ENVELOPE_BYTES)
}

/// [`message_bytes`] of the default limits: 16 MiB. The limit of clients that
/// cannot know their service's (chorus-tools, tool-exec's calls to the
/// orchestrator).
pub const DEFAULT_MESSAGE_BYTES: usize = message_bytes(DEFAULT_CONTENT_BYTES);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limits_make_16_mib_messages() {
        assert_eq!(DEFAULT_MESSAGE_BYTES, 16 * 1024 * 1024);
        assert_eq!(message_bytes(0), 1024 * 1024);
        assert!(message_bytes(u64::MAX) > usize::MAX / 2, "no overflow");
    }
}
