//! Collecting matches: one [`Worker`] per search thread (its own searcher and
//! matcher, reused for every file), one [`FileSink`] per file, and the [`Shared`]
//! counters that stop every thread once enough has been found.
//!
//! Threads may together collect more than `max_results` matches before they all
//! see the stop; the answer is cut to the first ones by path when it is built.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use cap_std::fs::File;
use chorus_catalog::outputs::{ContextLine, SearchMatch};
use grep_regex::RegexMatcher;
use grep_searcher::{Searcher, Sink, SinkContext, SinkContextKind, SinkMatch};
use serde_json::Value;

use super::answer::match_value;
use super::{MAX_LINE_BYTES, Query};
use crate::sandbox::{FileRoot, WorkspacePath};
use crate::stop::CallStop;

/// JSON keys, quotes and numbers around one match or context line, roughly.
const MATCH_OVERHEAD: usize = 48;
const CONTEXT_OVERHEAD: usize = 32;

/// The matches of one file, in line order, already in their JSON form (built
/// on the search threads, in parallel).
#[derive(Debug)]
pub(crate) struct FileMatches {
    pub(crate) path: WorkspacePath,
    pub(crate) matches: Vec<PreparedMatch>,
}

/// One match as JSON, with its estimated size in the answer.
#[derive(Debug)]
pub(crate) struct PreparedMatch {
    pub(crate) cost: usize,
    pub(crate) json: Value,
}

/// What every search thread sees. Threads count a file's matches locally and
/// add them here when the file is done, so the hot path only reads these.
#[derive(Debug)]
pub(crate) struct Shared {
    max_results: usize,
    max_output_bytes: usize,
    /// Matches of the files searched so far, all files together.
    matches: AtomicUsize,
    /// Estimated output bytes of those matches.
    bytes: AtomicUsize,
    /// Set once more than `max_results` matches or more than the output budget
    /// were found: every thread stops, and the answer is truncated.
    stop: AtomicBool,
    files_searched: AtomicU64,
    binary_skipped: AtomicU64,
    large_skipped: AtomicU64,
    found: Mutex<Vec<FileMatches>>,
}

/// Counters reported as metadata.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) files_searched: u64,
    pub(crate) binary_skipped: u64,
    pub(crate) large_skipped: u64,
}

impl Shared {
    pub(crate) fn new(query: &Query) -> Self {
        Self {
            max_results: query.max_results,
            max_output_bytes: query.max_output_bytes,
            matches: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            files_searched: AtomicU64::new(0),
            binary_skipped: AtomicU64::new(0),
            large_skipped: AtomicU64::new(0),
            found: Mutex::new(Vec::new()),
        }
    }

    /// Stops every thread; the answer says it is incomplete.
    pub(crate) fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            files_searched: self.files_searched.load(Ordering::Relaxed),
            binary_skipped: self.binary_skipped.load(Ordering::Relaxed),
            large_skipped: self.large_skipped.load(Ordering::Relaxed),
        }
    }

    /// The matches of every file, and whether the search stopped early because
    /// more was found than fits in the answer.
    pub(crate) fn into_found(self) -> (Vec<FileMatches>, bool) {
        let stopped = self.stop.into_inner();
        let found = self
            .found
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (found, stopped)
    }

    /// True when the files done so far plus `count` matches costing `bytes` are
    /// more than the answer can hold: then everyone stops.
    fn exceeded_with(&self, count: usize, bytes: usize) -> bool {
        let exceeded = self.matches.load(Ordering::Relaxed) + count > self.max_results
            || self.bytes.load(Ordering::Relaxed) + bytes > self.max_output_bytes;
        if exceeded {
            self.stop.store(true, Ordering::Relaxed);
        }
        exceeded
    }

    /// Adds a finished file's matches. Threads count their own files' matches
    /// without seeing each other's, so together they may pass the limits here:
    /// then everyone stops.
    fn keep(&self, file: FileMatches, bytes: usize) {
        let count = file.matches.len();
        let total = self.matches.fetch_add(count, Ordering::Relaxed) + count;
        let total_bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.max_results || total_bytes > self.max_output_bytes {
            self.stop.store(true, Ordering::Relaxed);
        }
        self.found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(file);
    }
}

/// One search thread: a searcher and matcher reused for every file it searches.
#[derive(Debug)]
pub(crate) struct Worker<'a> {
    sandbox: &'a FileRoot,
    query: &'a Query,
    shared: &'a Shared,
    stop: &'a CallStop,
    searcher: Searcher,
    matcher: RegexMatcher,
    /// The current file's matches; reused from file to file.
    matches: Vec<SearchMatch>,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        sandbox: &'a FileRoot,
        query: &'a Query,
        shared: &'a Shared,
        stop: &'a CallStop,
    ) -> Self {
        Self {
            sandbox,
            query,
            shared,
            stop,
            searcher: query.searcher.build(),
            // A clone per thread: each gets its own regex caches.
            matcher: query.matcher.clone(),
            matches: Vec::new(),
        }
    }

    /// Opens a file found by the walk through the sandbox (a symlink is not
    /// followed; a FIFO or device is refused on the opened handle; anything the
    /// sandbox refuses is skipped) and searches it.
    pub(crate) fn search_walked(&mut self, path: WorkspacePath) {
        if self.stop.is_stopped() {
            return;
        }
        let Ok((file, meta)) = self.sandbox.open_walked_file(&path) else {
            return;
        };
        if meta.len() > self.query.max_file_bytes {
            self.shared.large_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.search(path, file);
    }

    /// Searches an open file and keeps its matches.
    pub(crate) fn search(&mut self, path: WorkspacePath, file: File) {
        self.shared.files_searched.fetch_add(1, Ordering::Relaxed);
        let path_len = path.as_path().as_os_str().len();
        self.matches.clear();
        let mut sink = FileSink {
            shared: self.shared,
            stop: self.stop,
            path_len,
            after_context: self.query.context_lines,
            matches: &mut self.matches,
            before: Vec::new(),
            bytes: 0,
            binary: false,
        };
        let file = file.into_std();
        // A read error ends this file's search; what was found before it stays.
        let _ = self.searcher.search_file(&self.matcher, &file, &mut sink);
        if sink.binary {
            self.shared.binary_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if sink.matches.is_empty() {
            return;
        }
        let bytes = sink.bytes;
        let shown = path.display();
        let matches = self
            .matches
            .drain(..)
            .map(|found| PreparedMatch {
                cost: match_cost(shown.len(), &found),
                json: match_value(&shown, found),
            })
            .collect();
        self.shared.keep(FileMatches { path, matches }, bytes);
    }
}

/// Receives one file's matches and context lines from the searcher.
struct FileSink<'a> {
    shared: &'a Shared,
    stop: &'a CallStop,
    path_len: usize,
    after_context: usize,
    matches: &'a mut Vec<SearchMatch>,
    /// Context lines waiting for the match they come before.
    before: Vec<ContextLine>,
    /// Estimated output bytes of `matches`.
    bytes: usize,
    binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.shared.is_stopped() || self.stop.is_stopped() {
            return Ok(false);
        }
        let found = SearchMatch {
            path: String::new(),
            line: mat.line_number().unwrap_or(0),
            content: line_text(mat.bytes()),
            before: std::mem::take(&mut self.before),
            after: Vec::new(),
        };
        let cost = match_cost(self.path_len, &found);
        if self
            .shared
            .exceeded_with(self.matches.len() + 1, self.bytes + cost)
        {
            return Ok(false);
        }
        self.bytes += cost;
        self.matches.push(found);
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, Self::Error> {
        let line = ContextLine {
            line: context.line_number().unwrap_or(0),
            content: line_text(context.bytes()),
        };
        match context.kind() {
            SinkContextKind::Before => {
                // Once the search is over, no match will come to claim it.
                if self.shared.is_stopped() {
                    return Ok(false);
                }
                self.before.push(line);
            }
            SinkContextKind::After => {
                if let Some(last) = self.matches.last_mut() {
                    self.bytes += CONTEXT_OVERHEAD + line.content.len();
                    last.after.push(line);
                    // Stopping: finish the last match's context, then stop.
                    if self.shared.is_stopped() && last.after.len() >= self.after_context {
                        return Ok(false);
                    }
                }
            }
            SinkContextKind::Other => {}
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A line as shown: lossily decoded, without its terminator, cut when very long.
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.len() <= MAX_LINE_BYTES {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut text = String::from_utf8_lossy(&bytes[..MAX_LINE_BYTES]).into_owned();
    // The cut may split a character; drop its remains.
    while text.ends_with(char::REPLACEMENT_CHARACTER) {
        text.pop();
    }
    text.push('…');
    text
}

/// Roughly how many bytes a match adds to the JSON answer.
pub(crate) fn match_cost(path_len: usize, found: &SearchMatch) -> usize {
    let context: usize = found
        .before
        .iter()
        .chain(&found.after)
        .map(|line| CONTEXT_OVERHEAD + line.content.len())
        .sum();
    MATCH_OVERHEAD + path_len + found.content.len() + context
}
