//! Collecting matches: one [`Worker`] per search thread (its own searcher and
//! matcher, reused for every file), one [`FileSink`] per file, and the [`Shared`]
//! counters that stop every thread once enough has been found.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use cap_std::fs::File;
use chorus_catalog::outputs::{ContextLine, SearchMatch};
use grep_regex::RegexMatcher;
use grep_searcher::{Searcher, Sink, SinkContext, SinkContextKind, SinkMatch};

use super::{MAX_LINE_BYTES, Query};
use crate::sandbox::{Sandbox, WorkspacePath};

/// JSON keys, quotes and numbers around one match or context line, roughly.
const MATCH_OVERHEAD: usize = 48;
const CONTEXT_OVERHEAD: usize = 32;

/// The matches of one file, in line order. Their `path` is filled in last.
#[derive(Debug)]
pub(crate) struct FileMatches {
    pub(crate) path: WorkspacePath,
    pub(crate) matches: Vec<SearchMatch>,
}

/// What every search thread sees.
#[derive(Debug)]
pub(crate) struct Shared {
    max_results: usize,
    max_output_bytes: usize,
    /// Matches recorded so far, all files together.
    matches: AtomicUsize,
    /// Estimated output bytes recorded so far.
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

    /// The matches of every file, and whether the search stopped early.
    pub(crate) fn into_found(self) -> (Vec<FileMatches>, bool) {
        let stopped = self.stop.into_inner();
        let found = self
            .found
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (found, stopped)
    }

    /// Counts one more match costing `cost` bytes; false (and everyone stops)
    /// when it is one too many.
    fn admit(&self, cost: usize) -> bool {
        let count = self.matches.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes = self.bytes.fetch_add(cost, Ordering::Relaxed) + cost;
        if count > self.max_results || bytes > self.max_output_bytes {
            self.stop.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Takes back what a file admitted (it turned out to be binary).
    fn retract(&self, count: usize, bytes: usize) {
        self.matches.fetch_sub(count, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn add_bytes(&self, cost: usize) {
        self.bytes.fetch_add(cost, Ordering::Relaxed);
    }

    fn keep(&self, file: FileMatches) {
        self.found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(file);
    }
}

/// One search thread: a searcher and matcher reused for every file it searches.
#[derive(Debug)]
pub(crate) struct Worker<'a> {
    sandbox: &'a Sandbox,
    query: &'a Query,
    shared: &'a Shared,
    searcher: Searcher,
    matcher: RegexMatcher,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(sandbox: &'a Sandbox, query: &'a Query, shared: &'a Shared) -> Self {
        Self {
            sandbox,
            query,
            shared,
            searcher: query.searcher.build(),
            // A clone per thread: each gets its own regex caches.
            matcher: query.matcher.clone(),
        }
    }

    /// Opens a file found by the walk through the sandbox (a symlink is not
    /// followed; anything the sandbox refuses is skipped) and searches it.
    pub(crate) fn search_walked(&mut self, path: WorkspacePath) {
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
        let mut sink = FileSink {
            shared: self.shared,
            path_len,
            after_context: self.query.context_lines,
            matches: Vec::new(),
            before: Vec::new(),
            admitted_bytes: 0,
            binary: false,
        };
        let file = file.into_std();
        // A read error ends this file's search; what was found before it stays.
        let _ = self.searcher.search_file(&self.matcher, &file, &mut sink);
        if sink.binary {
            self.shared.binary_skipped.fetch_add(1, Ordering::Relaxed);
            self.shared.retract(sink.matches.len(), sink.admitted_bytes);
            return;
        }
        if !sink.matches.is_empty() {
            self.shared.keep(FileMatches {
                path,
                matches: sink.matches,
            });
        }
    }
}

/// Receives one file's matches and context lines from the searcher.
struct FileSink<'a> {
    shared: &'a Shared,
    path_len: usize,
    after_context: usize,
    matches: Vec<SearchMatch>,
    /// Context lines waiting for the match they come before.
    before: Vec<ContextLine>,
    admitted_bytes: usize,
    binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.shared.is_stopped() {
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
        if !self.shared.admit(cost) {
            return Ok(false);
        }
        self.admitted_bytes += cost;
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
                let cost = CONTEXT_OVERHEAD + line.content.len();
                if let Some(last) = self.matches.last_mut() {
                    last.after.push(line);
                    self.shared.add_bytes(cost);
                    self.admitted_bytes += cost;
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
