//! file.read: numbered lines of a UTF-8 text file, a page at a time.
//!
//! Also home of the text loading shared with file.patch: a file is text when it
//! has no NUL byte in its first 8 KiB and is valid UTF-8 throughout.

use std::fmt::Write as _;

use chorus_catalog::{args, outputs};

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::{FileRoot, WorkspacePath};
use crate::stop::CallStop;

/// How much of the start of a file is checked for NUL bytes.
const BINARY_PROBE_BYTES: usize = 8 * 1024;

pub async fn run(ctx: &ToolContext, args: args::FileRead) -> Result<ToolOutcome, ToolError> {
    if args.limit == Some(0) {
        return Err(ToolError::InvalidArguments {
            tool: "file.read".to_owned(),
            message: "limit must be at least 1; leave it out to read to the end".to_owned(),
        });
    }
    let path = ctx.sandbox.resolve(&args.path)?;
    let max_file_bytes = ctx.limits.max_file_bytes;
    let text = {
        let path = path.clone();
        ctx.blocking(move |sandbox, stop| load_text(sandbox, &path, max_file_bytes, stop))
            .await?
    };
    let page = Page::of(
        &text,
        args.offset.unwrap_or(0),
        args.limit,
        ctx.limits.max_output_bytes,
    );
    let outcome = ToolOutcome::ok(&outputs::FileRead {
        path: path.display(),
        content: page.content,
        total_lines: page.total_lines,
        lines_returned: page.lines_returned,
        truncated: page.next_offset.is_some(),
        next_offset: page.next_offset,
    });
    Ok(match page.cut_line {
        Some(line) => outcome.with_metadata("cut_line", line),
        None => outcome,
    })
}

/// Loads a whole text file (at most `max_bytes`), refusing binary and non-UTF-8 files.
pub(crate) fn load_text(
    sandbox: &FileRoot,
    path: &WorkspacePath,
    max_bytes: u64,
    stop: &CallStop,
) -> Result<String, ToolError> {
    let bytes = sandbox.read_file(path, max_bytes, stop)?;
    decode_text(path, bytes)
}

/// Decodes file bytes as text: a NUL byte near the start means binary.
pub(crate) fn decode_text(path: &WorkspacePath, bytes: Vec<u8>) -> Result<String, ToolError> {
    let probe = &bytes[..bytes.len().min(BINARY_PROBE_BYTES)];
    if probe.contains(&0) {
        return Err(ToolError::Binary {
            path: path.display(),
        });
    }
    String::from_utf8(bytes).map_err(|e| ToolError::NotUtf8 {
        path: path.display(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// The lines of a text: split on '\n', a final '\n' ends the last line rather than
/// starting an empty one, and a '\r' before the '\n' is not part of the line.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_terminator('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
}

/// One answer of file.read.
#[derive(Debug, PartialEq, Eq)]
struct Page {
    content: String,
    total_lines: u64,
    lines_returned: u64,
    /// Where to continue when lines remain after the returned ones.
    next_offset: Option<u64>,
    /// The 1-based number of a line that alone was over the output limit and was cut.
    cut_line: Option<u64>,
}

impl Page {
    /// Numbers the lines after the first `offset`, at most `limit` of them, and stops
    /// at a line boundary before the content passes `max_bytes`.
    fn of(text: &str, offset: u64, limit: Option<u64>, max_bytes: usize) -> Self {
        let total_lines = lines(text).count() as u64;
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut content = String::new();
        let mut returned: u64 = 0;
        let mut cut_line = None;
        for (index, line) in lines(text).enumerate().skip(skip).take(take) {
            let number = index as u64 + 1;
            let prefix = format!("{number:>6}\t");
            let needed = prefix.len() + line.len() + 1;
            if content.len() + needed > max_bytes {
                if returned > 0 {
                    break;
                }
                // A single line over the limit: show its start, and say so.
                let note = format!(
                    " [line {number} cut: it is {} bytes, over the {max_bytes}-byte output \
                     limit; see the rest with bash, e.g. cut -c or fold]\n",
                    line.len()
                );
                let room = max_bytes.saturating_sub(prefix.len() + note.len());
                content.push_str(&prefix);
                content.push_str(prefix_at_char_boundary(line, room));
                content.push_str(&note);
                cut_line = Some(number);
                returned = 1;
                break;
            }
            // Writing to a String cannot fail.
            let _ = writeln!(content, "{prefix}{line}");
            returned += 1;
        }
        let end = offset.saturating_add(returned);
        Self {
            content,
            total_lines,
            lines_returned: returned,
            next_offset: (end < total_lines).then_some(end),
            cut_line,
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub(crate) fn prefix_at_char_boundary(s: &str, max: usize) -> &str {
    let cut = (0..=max.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    &s[..cut]
}

#[cfg(test)]
mod tests;
