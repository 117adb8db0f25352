//! file.patch: literal find/replace edits, applied in order in memory and written
//! atomically only when every one of them applies.

use std::fmt::Write as _;

use chorus_catalog::{args, outputs};

use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::WriteMode;
use crate::stop::CallStop;
use crate::tools::read::{lines, load_text, prefix_at_char_boundary};
use crate::tools::write::check_write_size;

/// How many occurrences a "not unique" error points at by line number.
const SHOWN_OCCURRENCES: usize = 5;
/// How much of a find text an error message quotes.
const QUOTED_FIND_BYTES: usize = 60;

pub async fn run(ctx: &ToolContext, args: args::FilePatch) -> Result<ToolOutcome, ToolError> {
    if args.patches.is_empty() {
        return Err(ToolError::InvalidArguments {
            tool: "file.patch".to_owned(),
            message: "patches is empty; give at least one {\"find\", \"replace\"} edit".to_owned(),
        });
    }
    let path = ctx.sandbox.resolve_for_write(&args.path)?;
    let limits = ctx.limits;
    let patches = args.patches;
    let patches_applied = patches.len() as u64;
    let bytes_written = {
        let path = path.clone();
        ctx.blocking(move |sandbox, stop| {
            let original = load_text(sandbox, &path, limits.max_file_bytes, stop)?;
            let patched = apply_all(&original, &patches, stop)?;
            check_write_size(
                "file.patch",
                "the patched file",
                patched.len(),
                limits.max_write_bytes,
            )?;
            if patched != original {
                sandbox.write_atomic(&path, patched.as_bytes(), WriteMode::Replace, stop)?;
            }
            Ok(patched.len() as u64)
        })
        .await?
    };
    Ok(ToolOutcome::ok(&outputs::FilePatched {
        path: path.display(),
        patches_applied,
        bytes_written,
    }))
}

/// Applies `patches` in order to `original`; each sees the text the previous ones
/// left. The first that cannot apply fails the whole call, and so does a stop
/// of the call, checked before each patch.
fn apply_all(
    original: &str,
    patches: &[args::Patch],
    stop: &CallStop,
) -> Result<String, ToolError> {
    let total = patches.len();
    let mut text = original.to_owned();
    for (i, patch) in patches.iter().enumerate() {
        stop.check()?;
        apply_one(&mut text, patch, (i > 0).then_some(original)).map_err(|reason| {
            ToolError::PatchFailed {
                index: i + 1,
                total,
                reason,
            }
        })?;
    }
    Ok(text)
}

/// Applies one patch to `text`, or says why it cannot. `before_earlier` is the
/// text before the earlier patches of the call, for a hint when they are the cause.
fn apply_one(
    text: &mut String,
    patch: &args::Patch,
    before_earlier: Option<&str>,
) -> Result<(), String> {
    let find = patch.find.as_str();
    if find.is_empty() {
        return Err(
            "find must not be empty; give the exact text to replace, with enough \
             surrounding text to be unique"
                .to_owned(),
        );
    }
    let start = match patch.start_line {
        None => 0,
        Some(0) => return Err("start_line must be 1 or more; lines are numbered from 1".to_owned()),
        Some(n) => line_start(text, n).ok_or_else(|| {
            format!(
                "start_line {n} is past the end of the file, which has {} lines",
                lines(text).count()
            )
        })?,
    };
    let scope = &text[start..];
    let mut found = scope.match_indices(find).map(|(at, _)| at);
    let Some(first) = found.next() else {
        return Err(not_found(text, start, patch, before_earlier));
    };
    let others = found.count();
    if others > 0 {
        return Err(not_unique(text, start, find, 1 + others));
    }
    // One match that does not overlap another; an overlapping one starts inside it.
    let after_first = first + scope[first..].chars().next().map_or(1, char::len_utf8);
    if scope[after_first..].contains(find) {
        return Err(format!(
            "find text {} occurs more than once (the occurrences overlap, from line {}); \
             add surrounding text to make it unique",
            quote(find),
            line_of(text, start + first)
        ));
    }
    let at = start + first;
    text.replace_range(at..at + find.len(), &patch.replace);
    Ok(())
}

/// The byte offset where 1-based line `n` starts, if the text has that many lines.
fn line_start(text: &str, n: u64) -> Option<usize> {
    let wanted = usize::try_from(n).ok()?;
    if wanted > lines(text).count() {
        return None;
    }
    if wanted == 1 {
        return Some(0);
    }
    text.match_indices('\n')
        .nth(wanted - 2)
        .map(|(newline, _)| newline + 1)
}

/// The 1-based line that byte offset `at` is on.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

fn not_unique(text: &str, start: usize, find: &str, count: usize) -> String {
    let mut at_lines = String::new();
    for (shown, (at, _)) in text[start..].match_indices(find).enumerate() {
        if shown == SHOWN_OCCURRENCES {
            at_lines.push_str(", ...");
            break;
        }
        let sep = if shown == 0 { "" } else { ", " };
        let _ = write!(at_lines, "{sep}{}", line_of(text, start + at));
    }
    format!(
        "find text {} occurs {count} times{} (at lines {at_lines}); add surrounding lines \
         to make it unique or give start_line",
        quote(find),
        scope_note(text, start),
    )
}

fn not_found(
    text: &str,
    start: usize,
    patch: &args::Patch,
    before_earlier: Option<&str>,
) -> String {
    let find = patch.find.as_str();
    let scope = &text[start..];
    let mut reason = format!(
        "find text {} not found{}",
        quote(find),
        scope_note(text, start)
    );
    let hint = if start > 0 && text[..start].contains(find) {
        Some("it occurs before start_line; lower start_line or leave it out".to_owned())
    } else if before_earlier.is_some_and(|original| original.contains(find)) {
        Some(
            "it was in the file before an earlier patch of this call changed it; each patch \
             sees the text the earlier ones left"
                .to_owned(),
        )
    } else if looks_numbered(find) {
        Some(
            "it seems to include the line-number prefixes file.read shows; leave them out"
                .to_owned(),
        )
    } else if find.contains('\n') && !find.contains("\r\n") && scope.contains("\r\n") {
        Some(
            "the file has CRLF (\\r\\n) line endings, which file.read does not show; write \
             the line breaks in find as \\r\\n"
                .to_owned(),
        )
    } else if loosely_contains(scope, find) {
        Some(
            "text differing only in whitespace or letter case exists; copy the text exactly \
             as the file has it"
                .to_owned(),
        )
    } else {
        None
    };
    if let Some(hint) = hint {
        let _ = write!(reason, "; {hint}");
    }
    reason
}

/// " from line N on" when the search started after line 1.
fn scope_note(text: &str, start: usize) -> String {
    if start == 0 {
        String::new()
    } else {
        format!(" from line {} on", line_of(text, start))
    }
}

/// True when the first line of `find` starts like a file.read line: spaces, digits, TAB.
fn looks_numbered(find: &str) -> bool {
    let first = find.trim_start_matches(' ');
    let digits = first.len() - first.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    digits > 0 && first[digits..].starts_with('\t')
}

/// True when `find` occurs in `scope` once whitespace runs are collapsed and case ignored.
fn loosely_contains(scope: &str, find: &str) -> bool {
    fn loose(s: &str) -> String {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    }
    let find = loose(find);
    !find.is_empty() && loose(scope).contains(&find)
}

/// A find text as quoted in messages: escaped, and shortened when long.
fn quote(find: &str) -> String {
    let shown = prefix_at_char_boundary(find, QUOTED_FIND_BYTES);
    if shown.len() < find.len() {
        format!("{shown:?}... ({} bytes)", find.len())
    } else {
        format!("{shown:?}")
    }
}

#[cfg(test)]
mod tests;
