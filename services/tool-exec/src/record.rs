//! How a finished tool call is kept in its task's history: bounded excerpts of
//! its input and output, with their full sizes.
//!
//! One rule for every path: tool-exec cuts a call before it reports it through
//! its gate, and the orchestrator applies the same rule to every call it
//! records (its own tools', API agents', and whatever a tool-exec reports). The
//! rule is idempotent, so a call cut twice is cut once.
//!
//! The input keeps its shape: each string longer than [`INPUT_STRING_BYTES`]
//! keeps its start and ends in the marker `…[N bytes]`, N being its full
//! length. When the strings so cut still pass [`INPUT_BYTES`] together, they are
//! cut shorter (512, then 128 bytes); when even that is too much (thousands of
//! fields), the input is recorded as `{"json_start": "<the start of its JSON
//! text>…[N bytes]"}`. The output keeps its first [`OUTPUT_EXCERPT_BYTES`],
//! ending in `…` when cut.

use std::io;

use serde_json::Value;

/// Most bytes of one string of a call's input kept in history, marker included.
pub const INPUT_STRING_BYTES: usize = 2048;
/// Most bytes of a call's whole input kept in history, as JSON text.
pub const INPUT_BYTES: usize = 16 * 1024;
/// Most bytes of a call's output (or error message) kept in history, `…` included.
pub const OUTPUT_EXCERPT_BYTES: usize = 2048;

/// The one field of an input recorded as the start of its JSON text.
pub const JSON_START: &str = "json_start";

/// The string limits tried in turn until the cut input fits [`INPUT_BYTES`].
const STRING_LIMITS: [usize; 3] = [INPUT_STRING_BYTES, 512, 128];

/// When a call that took `duration_ms` and ends now began, in ms since the
/// Unix epoch.
fn began(duration_ms: u64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    now.saturating_sub(i64::try_from(duration_ms).unwrap_or(i64::MAX))
}

/// One finished tool call, as the task's history records it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub tool: String,
    /// The arguments, cut by [`input_excerpt`].
    pub input: Value,
    /// Length of the whole arguments as JSON text.
    pub input_bytes: u64,
    /// "ok", or the failure's gRPC code name in lower snake case.
    pub status: String,
    pub duration_ms: u64,
    /// The start of the output, or of the error message ([`output_excerpt`]).
    pub output_excerpt: String,
    /// Length of the whole output (its JSON text) or error message.
    pub output_bytes: u64,
    /// When the call began, in ms since the Unix epoch (0: not known).
    pub started_ms: i64,
}

impl ToolCallRecord {
    /// The record of a call of `tool` with `input` that answered `output` (the
    /// output's JSON text, or the error message).
    pub fn new(
        tool: impl Into<String>,
        input: &Value,
        status: impl Into<String>,
        duration_ms: u64,
        output: &str,
    ) -> Self {
        let (input, input_bytes) = input_excerpt(input);
        Self {
            tool: tool.into(),
            input,
            input_bytes,
            status: status.into(),
            duration_ms,
            output_excerpt: output_excerpt(output),
            output_bytes: output.len() as u64,
            started_ms: began(duration_ms),
        }
    }

    /// This record with the rule applied again, for a record made elsewhere: a
    /// record made by [`ToolCallRecord::new`] comes back unchanged; one whose
    /// reporter cut nothing is cut now, its sizes (when given as 0) counted
    /// from what it holds.
    #[must_use]
    pub fn bounded(self) -> Self {
        let (input, whole_input) = input_excerpt(&self.input);
        let output_bytes = match self.output_bytes {
            0 => self.output_excerpt.len() as u64,
            n => n,
        };
        Self {
            input,
            input_bytes: match self.input_bytes {
                0 => whole_input,
                n => n,
            },
            output_excerpt: output_excerpt(&self.output_excerpt),
            output_bytes,
            ..self
        }
    }
}

/// `input` as history keeps it (see the module's rule), and the length of its
/// whole JSON text.
pub fn input_excerpt(input: &Value) -> (Value, u64) {
    let bytes = json_len(input);
    for limit in STRING_LIMITS {
        let cut = cut_strings(input, limit);
        if json_len(&cut) <= INPUT_BYTES as u64 {
            return (cut, bytes);
        }
    }
    let mut start = serde_json::Map::new();
    start.insert(
        JSON_START.to_owned(),
        Value::String(json_start(input, bytes)),
    );
    (Value::Object(start), bytes)
}

/// The first [`OUTPUT_EXCERPT_BYTES`] of `text` (`…` included when cut), at a
/// character boundary.
pub fn output_excerpt(text: &str) -> String {
    if text.len() <= OUTPUT_EXCERPT_BYTES {
        return text.to_owned();
    }
    let mut cut = prefix(text, OUTPUT_EXCERPT_BYTES - ELLIPSIS.len()).to_owned();
    cut.push_str(ELLIPSIS);
    cut
}

const ELLIPSIS: &str = "…";

/// `value` with every string longer than `limit` bytes cut to `limit` bytes,
/// marker included.
fn cut_strings(value: &Value, limit: usize) -> Value {
    match value {
        Value::String(s) if s.len() > limit => Value::String(marked(s, s.len(), limit)),
        Value::Array(items) => Value::Array(items.iter().map(|v| cut_strings(v, limit)).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), cut_strings(v, limit)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The start of `text` and the marker `…[N bytes]` (N = `full`), `limit`
/// bytes at most in all.
fn marked(text: &str, full: usize, limit: usize) -> String {
    let marker = format!("{ELLIPSIS}[{full} bytes]");
    let mut cut = prefix(text, limit.saturating_sub(marker.len())).to_owned();
    cut.push_str(&marker);
    cut
}

/// The start of `value`'s JSON text, marked with its length `full`, in
/// [`INPUT_STRING_BYTES`]; the rest is never written out.
fn json_start(value: &Value, full: u64) -> String {
    let mut start = Capped {
        bytes: Vec::new(),
        cap: INPUT_STRING_BYTES,
    };
    // Stops with an error once the cap is reached: what was written is kept.
    let _ = serde_json::to_writer(&mut start, value);
    let valid = match std::str::from_utf8(&start.bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&start.bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    let full = usize::try_from(full).unwrap_or(usize::MAX);
    marked(valid, full, INPUT_STRING_BYTES)
}

/// The longest start of `text` of at most `max` bytes that ends at a character
/// boundary.
fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let end = (0..=max)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    &text[..end]
}

/// Length of `value`'s JSON text, counted without building it.
pub fn json_len(value: &Value) -> u64 {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

struct Counter(u64);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Keeps the first `cap` bytes written, then refuses more.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.cap - self.bytes.len();
        if room == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "enough kept"));
        }
        let taken = buf.len().min(room);
        self.bytes.extend_from_slice(&buf[..taken]);
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
