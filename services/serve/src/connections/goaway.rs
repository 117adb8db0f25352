//! The goodbye of a connection closed by a bound: an HTTP/2 GOAWAY frame
//! whose last stream id tells the client which of its calls the server never
//! took, so that it may send them again (RFC 9113 §6.8; gRPC clients retry
//! such calls on their own, and chorus-tools does).
//!
//! The server's HTTP/2 runs above this layer, so the frames are followed here
//! in both directions, by their 9-byte headers only: what the client sent (is
//! it HTTP/2 in the clear, and which streams did it open) and where the
//! server's own frames end (the GOAWAY must not cut one). Under TLS nothing
//! can be said: the connection is only closed.

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
/// Bytes of the reason carried as the GOAWAY's debug data, at most.
const DEBUG_BYTES: usize = 200;

/// Where a stream of frames is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In the client preface, this many bytes of it seen.
    Preface(usize),
    /// In a frame header, this many bytes of it seen.
    Header(usize),
    /// In a frame's payload, this many bytes of it left.
    Payload(usize),
    /// Not HTTP/2 in the clear (TLS, or anything else).
    Opaque,
}

/// One direction of a connection, followed frame by frame.
#[derive(Debug)]
struct Frames {
    place: Place,
    header: [u8; FRAME_HEADER],
    /// Bytes seen.
    seen: u64,
    /// The highest stream a HEADERS frame opened.
    last_stream: u32,
}

impl Frames {
    fn new(place: Place) -> Self {
        Self {
            place,
            header: [0; FRAME_HEADER],
            seen: 0,
            last_stream: 0,
        }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        while !bytes.is_empty() {
            match self.place {
                Place::Opaque => return,
                Place::Preface(have) => {
                    let take = (PREFACE.len() - have).min(bytes.len());
                    if bytes[..take] != PREFACE[have..have + take] {
                        self.place = Place::Opaque;
                        return;
                    }
                    bytes = &bytes[take..];
                    self.place = if have + take == PREFACE.len() {
                        Place::Header(0)
                    } else {
                        Place::Preface(have + take)
                    };
                }
                Place::Header(have) => {
                    let take = (FRAME_HEADER - have).min(bytes.len());
                    self.header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.place = if have + take < FRAME_HEADER {
                        Place::Header(have + take)
                    } else {
                        self.frame_begins()
                    };
                }
                Place::Payload(left) => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.place = if take == left {
                        Place::Header(0)
                    } else {
                        Place::Payload(left - take)
                    };
                }
            }
        }
    }

    fn frame_begins(&mut self) -> Place {
        let h = &self.header;
        let length = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        if h[3] == HEADERS {
            self.last_stream = self.last_stream.max(stream);
        }
        if length == 0 {
            Place::Header(0)
        } else {
            Place::Payload(length)
        }
    }
}

/// Both directions of one connection.
#[derive(Debug)]
pub(super) struct Http2 {
    from_client: Frames,
    to_client: Frames,
    /// The server speaks HTTP/2 in the clear: a client that has not sent
    /// its preface yet is told goodbye too, in the only protocol it may use.
    cleartext: bool,
}

impl Http2 {
    /// `cleartext`: the server speaks HTTP/2 in the clear (not TLS).
    pub(super) fn new(cleartext: bool) -> Self {
        Self {
            from_client: Frames::new(Place::Preface(0)),
            to_client: Frames::new(Place::Header(0)),
            cleartext,
        }
    }

    /// Bytes read from the client.
    pub(super) fn read(&mut self, bytes: &[u8]) {
        self.from_client.feed(bytes);
    }

    /// Bytes the server wrote to the client.
    pub(super) fn written(&mut self, bytes: &[u8]) {
        self.to_client.feed(bytes);
    }

    /// The highest stream the client opened in what was read.
    pub(super) fn last_stream(&self) -> u32 {
        self.from_client.last_stream
    }

    /// The bytes that end the connection for its client, telling it that no
    /// stream after `last` was taken; `why` goes with them as debug data.
    /// None when nothing can be said: the client does not speak HTTP/2 in the
    /// clear (under TLS, or it sent something else), or the server is in the
    /// middle of a frame.
    pub(super) fn goodbye(&self, last: u32, why: &str) -> Option<Vec<u8>> {
        let client_speaks_it = match self.from_client.place {
            Place::Header(_) | Place::Payload(_) => true,
            Place::Preface(_) => self.cleartext,
            Place::Opaque => false,
        };
        if !client_speaks_it || self.to_client.place != Place::Header(0) {
            return None;
        }
        let mut debug = why.as_bytes();
        if debug.len() > DEBUG_BYTES {
            let mut end = DEBUG_BYTES;
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            debug = &debug[..end];
        }
        let mut bytes = Vec::with_capacity(2 * FRAME_HEADER + 8 + debug.len());
        if self.to_client.seen == 0 {
            // A server's first frame is its SETTINGS (RFC 9113 §3.4).
            frame_header(&mut bytes, 0, SETTINGS);
        }
        frame_header(&mut bytes, 8 + debug.len(), GOAWAY);
        bytes.extend_from_slice(&last.to_be_bytes());
        // NO_ERROR: a graceful close.
        bytes.extend_from_slice(&0_u32.to_be_bytes());
        bytes.extend_from_slice(debug);
        Some(bytes)
    }
}

/// The header of a frame of stream 0 without flags.
fn frame_header(bytes: &mut Vec<u8>, length: usize, kind: u8) {
    let length = u32::try_from(length).unwrap_or(0).to_be_bytes();
    bytes.extend_from_slice(&length[1..]);
    bytes.extend_from_slice(&[kind, 0, 0, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        let length = u32::try_from(payload.len()).expect("small").to_be_bytes();
        bytes.extend_from_slice(&length[1..]);
        bytes.extend_from_slice(&[kind, 0]);
        bytes.extend_from_slice(&stream.to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    /// (last stream id, error code, debug data) of a GOAWAY at the end of
    /// `bytes`, after an optional empty SETTINGS.
    fn parse(bytes: &[u8]) -> (bool, u32, u32, String) {
        let (settings, rest) = if bytes[3] == SETTINGS {
            assert_eq!(&bytes[..9], &[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]);
            (true, &bytes[9..])
        } else {
            (false, bytes)
        };
        assert_eq!(rest[3], GOAWAY);
        let length = usize::from(rest[1]) << 8 | usize::from(rest[2]);
        assert_eq!(length, rest.len() - FRAME_HEADER);
        let last = u32::from_be_bytes(rest[9..13].try_into().expect("4 bytes"));
        let code = u32::from_be_bytes(rest[13..17].try_into().expect("4 bytes"));
        (
            settings,
            last,
            code,
            String::from_utf8(rest[17..].to_vec()).expect("text"),
        )
    }

    #[test]
    fn a_client_that_opened_streams_is_told_the_last_one_split_anyhow() {
        let mut client = PREFACE.to_vec();
        client.extend(frame(SETTINGS, 0, &[0, 3, 0, 0, 0, 100]));
        client.extend(frame(HEADERS, 1, &[0x82; 40]));
        client.extend(frame(0x0, 1, b"data"));
        client.extend(frame(HEADERS, 5, &[0x82; 3]));
        client.extend(frame(HEADERS, 3, &[0x82; 3]));
        for chunk in [1, 7, 1000] {
            let mut http2 = Http2::new(false);
            for piece in client.chunks(chunk) {
                http2.read(piece);
            }
            http2.written(&frame(SETTINGS, 0, &[]));
            assert_eq!(http2.last_stream(), 5, "chunks of {chunk}");
            let (settings, last, code, why) = parse(
                &http2
                    .goodbye(http2.last_stream(), "idle")
                    .expect("can be said"),
            );
            assert!(!settings, "the server's SETTINGS went first already");
            assert_eq!((last, code, why.as_str()), (5, 0, "idle"));
        }
    }

    #[test]
    fn before_the_server_wrote_anything_its_settings_come_first() {
        let mut http2 = Http2::new(false);
        http2.read(PREFACE);
        let (settings, last, _, _) = parse(&http2.goodbye(0, "x").expect("said"));
        assert!(settings);
        assert_eq!(last, 0);
    }

    #[test]
    fn nothing_is_said_under_tls_before_the_preface_or_inside_a_frame() {
        let mut tls = Http2::new(false);
        tls.read(&[0x16, 0x03, 0x01, 0x02, 0x00]);
        assert_eq!(tls.goodbye(0, "x"), None, "TLS");
        let mut early = Http2::new(false);
        early.read(&PREFACE[..10]);
        assert_eq!(early.goodbye(0, "x"), None, "half a preface, under TLS");
        // A server in the clear tells a client that has sent nothing yet.
        let mut silent = Http2::new(true);
        assert!(
            silent.goodbye(0, "x").is_some(),
            "nothing sent, in the clear"
        );
        silent.read(&[0x16, 0x03]);
        assert_eq!(silent.goodbye(0, "x"), None, "not HTTP/2");
        let mut mid = Http2::new(false);
        mid.read(PREFACE);
        let data = frame(0x0, 1, &[7; 100]);
        mid.written(&data[..50]);
        assert_eq!(mid.goodbye(1, "x"), None, "the server is inside a frame");
        mid.written(&data[50..]);
        assert!(mid.goodbye(1, "x").is_some(), "the frame ended");
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let mut http2 = Http2::new(false);
        http2.read(PREFACE);
        let why = "é".repeat(DEBUG_BYTES);
        let (_, _, _, debug) = parse(&http2.goodbye(0, &why).expect("said"));
        assert!(debug.len() <= DEBUG_BYTES && why.starts_with(&debug));
    }
}
