//! file.search: regex search of file contents, in-process, with ripgrep's own
//! crates (`ignore` walks, `grep-regex` matches, `grep-searcher` reads lines).
//!
//! `path` may be a directory, walked in parallel with the workspace ignore rules
//! (see [`super::walk`]), or one file, searched whatever the rules say (as rg
//! does with a file named on its command line; `glob` does not apply to it).
//! Walked files are opened through the sandbox without following symlinks.
//! Files with a NUL byte are binary and skipped, as rg skips them; files over
//! `max_file_bytes` are skipped.
//!
//! `max_results` counts matching lines across all files. The walk stops as soon
//! as one match more than that has been found (so `truncated` is exact), and the
//! output is also kept under `max_output_bytes`. Matches are sorted by path
//! (component by component) and line. When the answer is truncated, which files
//! contributed depends on the order the threads reached them.

mod answer;
mod collect;

use std::sync::Arc;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkState;

use chorus_catalog::args;

use self::collect::{Shared, Worker};
use super::walk::{PathGlob, Walk};
use crate::config::Limits;
use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::{FileRoot, WorkspacePath, not_a_file};
use crate::stop::CallStop;

const TOOL: &str = "file.search";

/// Matches returned when the call does not say.
const DEFAULT_MAX_RESULTS: u32 = 100;
/// Most context lines shown on each side of a match.
const MAX_CONTEXT_LINES: u32 = 50;
/// Longest line shown; longer lines (minified code, data) are cut and end in "…".
const MAX_LINE_BYTES: usize = 2000;

pub async fn run(ctx: &ToolContext, args: args::FileSearch) -> Result<ToolOutcome, ToolError> {
    let query = Query::new(&args, &ctx.limits)?;
    // The walk's ignore-rule cache needs a sandbox it can own.
    let shared_sandbox = Arc::clone(&ctx.sandbox);
    ctx.blocking(move |sandbox, stop| {
        let target = sandbox.resolve(&args.path)?;
        let meta = sandbox.metadata(&target)?;
        let shared = Shared::new(&query);
        if meta.is_dir() {
            // Re-checked through the handle: the directory exists inside the root.
            drop(sandbox.open_dir(&target)?);
            let walk = Walk::new(&shared_sandbox, &target, args.include_ignored);
            search_walk(sandbox, &walk, &query, &shared, stop);
        } else if meta.is_file() {
            search_one(sandbox, &target, &query, &shared, stop)?;
        } else {
            return Err(not_a_file(&target, &meta));
        }
        stop.check()?;
        let stats = shared.stats();
        let (found, stopped) = shared.into_found();
        let output = answer::assemble(found, query.max_results, query.max_output_bytes, stopped);
        let outcome = ToolOutcome {
            output,
            error: None,
            metadata: serde_json::Map::new(),
        };
        Ok(outcome
            .with_metadata("files_searched", stats.files_searched)
            .with_metadata("binary_files_skipped", stats.binary_skipped)
            .with_metadata("large_files_skipped", stats.large_skipped))
    })
    .await
}

/// A validated search request.
#[derive(Debug)]
pub(crate) struct Query {
    matcher: RegexMatcher,
    searcher: SearcherBuilder,
    glob: Option<PathGlob>,
    max_results: usize,
    context_lines: usize,
    max_file_bytes: u64,
    max_output_bytes: usize,
}

impl Query {
    fn new(args: &args::FileSearch, limits: &Limits) -> Result<Self, ToolError> {
        let invalid = |message: String| ToolError::InvalidArguments {
            tool: TOOL.to_owned(),
            message,
        };
        let max_results = match args.max_results {
            None => DEFAULT_MAX_RESULTS,
            Some(0) => return Err(invalid("max_results must be at least 1".to_owned())),
            Some(n) => n,
        }
        .min(limits.max_search_results);
        let context_lines = args.context_lines.unwrap_or(0).min(MAX_CONTEXT_LINES);
        let glob = args
            .glob
            .as_deref()
            .map(|glob| PathGlob::new(TOOL, glob))
            .transpose()?;

        // The same matcher settings as ripgrep's line-oriented search. The pattern
        // is handed to the builder as data, so a leading '-' is just a character.
        let matcher = RegexMatcherBuilder::new()
            .multi_line(true)
            .unicode(true)
            .octal(false)
            .fixed_strings(args.fixed_strings)
            .case_insensitive(!args.case_sensitive.unwrap_or(true))
            .line_terminator(Some(b'\n'))
            .dot_matches_new_line(false)
            .ban_byte(Some(b'\x00'))
            .build(&args.pattern)
            .map_err(|e| invalid(format!("invalid regex: {e}")))?;

        let context = usize::try_from(context_lines).unwrap_or(0);
        let mut searcher = SearcherBuilder::new();
        searcher
            .line_number(true)
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .before_context(context)
            .after_context(context);

        Ok(Self {
            matcher,
            searcher,
            glob,
            max_results: usize::try_from(max_results).unwrap_or(usize::MAX),
            context_lines: context,
            max_file_bytes: limits.max_file_bytes,
            max_output_bytes: limits.max_output_bytes,
        })
    }
}

/// Searches every file below the walked directory, on as many threads as cores.
fn search_walk(sandbox: &FileRoot, walk: &Walk, query: &Query, shared: &Shared, stop: &CallStop) {
    walk.builder().build_parallel().run(|| {
        let mut worker = Worker::new(sandbox, query, shared, stop);
        // Each search thread acts as the workspace's user from its first
        // entry on (a thread visits a directory before it reads it).
        let mut acting = None;
        Box::new(move |result| {
            if shared.is_stopped() || stop.is_stopped() {
                return WalkState::Quit;
            }
            if acting.is_none() {
                match sandbox.act() {
                    Ok(guard) => acting = Some(guard),
                    Err(_) => {
                        shared.halt();
                        return WalkState::Quit;
                    }
                }
            }
            // Unreadable directories and vanished entries are skipped.
            let Ok(entry) = result else {
                return WalkState::Continue;
            };
            // The walker's file type, from the directory listing: symlinks and
            // directories are not searched (directories are descended into).
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            if let Some(glob) = &query.glob
                && !glob.matches(walk.below(&entry))
            {
                return WalkState::Continue;
            }
            if let Some(path) = walk.relative(sandbox, &entry) {
                worker.search_walked(path);
            }
            WalkState::Continue
        })
    });
}

/// Searches one file named by the call.
fn search_one(
    sandbox: &FileRoot,
    path: &WorkspacePath,
    query: &Query,
    shared: &Shared,
    stop: &CallStop,
) -> Result<(), ToolError> {
    let (file, meta) = sandbox.open_file(path)?;
    let size = meta.len();
    if size > query.max_file_bytes {
        return Err(ToolError::FailedPrecondition(format!(
            "'{}' is {size} bytes, over the {}-byte search limit; search it with bash (grep -n)",
            path.display(),
            query.max_file_bytes
        )));
    }
    Worker::new(sandbox, query, shared, stop).search(path.clone(), file);
    Ok(())
}

#[cfg(test)]
mod tests;
