//! file.list: a directory's entries, or every entry below it.
//!
//! Without `pattern` or `recursive` the answer is the directory's own entries,
//! read from its handle (ignore rules do not apply, as with `ls -a`). With either,
//! the directory is walked (see [`super::walk`]); `pattern` keeps regular files
//! whose name or relative path matches the glob. Every entry is stat'ed through
//! the sandbox without following symlinks: a symlink is reported as one, with the
//! size and time of the link itself. `.git` is never listed.
//!
//! Entries are sorted by path component by component, so a directory's contents
//! follow it. The walk visits entries in that same order, so it can stop at the
//! entry limit and still return the first entries of the full listing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use cap_std::fs::{Dir, Metadata};
use chorus_catalog::{args, outputs};
use ignore::DirEntry;

use super::walk::{PathGlob, Walk};
use crate::context::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use crate::sandbox::{FileRoot, WorkspacePath, fs_error};
use crate::stop::CallStop;

const TOOL: &str = "file.list";

/// How often (in entries) a listing checks whether the call was stopped.
const STOP_CHECK_EVERY: usize = 256;

pub async fn run(ctx: &ToolContext, args: args::FileList) -> Result<ToolOutcome, ToolError> {
    let glob = args
        .pattern
        .as_deref()
        .map(|pattern| PathGlob::new(TOOL, pattern))
        .transpose()?;
    let limit = ctx.limits.max_list_entries;
    // The walk's ignore-rule cache needs a sandbox it can own.
    let shared_sandbox = Arc::clone(&ctx.sandbox);
    ctx.blocking(move |sandbox, stop| {
        let dir = sandbox.resolve(&args.path)?;
        let handle = sandbox.open_dir(&dir)?;
        let listing = if glob.is_none() && !args.recursive {
            list_entries(&dir, &handle, limit, stop)?
        } else {
            drop(handle);
            let walk = Walk::new(&shared_sandbox, &dir, args.include_ignored);
            list_walk(sandbox, &walk, glob.as_ref(), limit, stop)?
        };
        let count = listing.entries.len();
        let output = outputs::FileList {
            path: dir.display(),
            entries: listing.entries,
            truncated: listing.truncated,
        };
        Ok(ToolOutcome::ok(&output).with_metadata("entries", count))
    })
    .await
}

#[derive(Debug, Default)]
struct Listing {
    entries: Vec<outputs::ListEntry>,
    truncated: bool,
}

/// The directory's own entries, read and stat'ed through its handle.
fn list_entries(
    dir: &WorkspacePath,
    handle: &Dir,
    limit: usize,
    stop: &CallStop,
) -> Result<Listing, ToolError> {
    let read = handle.entries().map_err(|e| fs_error(dir, e))?;
    let mut found = Vec::new();
    for (seen, entry) in read.enumerate() {
        if seen % STOP_CHECK_EVERY == 0 {
            stop.check()?;
        }
        if let Ok(entry) = entry
            && entry.file_name() != ".git"
        {
            found.push(entry);
        }
    }
    found.sort_by_cached_key(cap_std::fs::DirEntry::file_name);
    let mut listing = Listing::default();
    for (seen, entry) in found.into_iter().enumerate() {
        if seen % STOP_CHECK_EVERY == 0 {
            stop.check()?;
        }
        // The entry may have gone since the directory was read.
        let Ok(meta) = entry.metadata() else { continue };
        if listing.entries.len() == limit {
            listing.truncated = true;
            break;
        }
        let path = dir.join(entry.file_name());
        listing.entries.push(list_entry(&path, &meta));
    }
    Ok(listing)
}

/// Every entry below the walked directory, in path order, up to `limit`.
fn list_walk(
    sandbox: &FileRoot,
    walk: &Walk,
    glob: Option<&PathGlob>,
    limit: usize,
    stop: &CallStop,
) -> Result<Listing, ToolError> {
    let mut builder = walk.builder();
    builder.sort_by_file_name(|a, b| a.cmp(b));
    collect_walked(sandbox, walk, builder.build(), glob, limit, stop)
}

/// Turns walked entries into listing entries, each stat'ed through the sandbox.
fn collect_walked(
    sandbox: &FileRoot,
    walk: &Walk,
    walked: impl IntoIterator<Item = Result<DirEntry, ignore::Error>>,
    glob: Option<&PathGlob>,
    limit: usize,
    stop: &CallStop,
) -> Result<Listing, ToolError> {
    let mut listing = Listing::default();
    let mut keys: Vec<PathBuf> = Vec::new();
    for (seen, result) in walked.into_iter().enumerate() {
        if seen % STOP_CHECK_EVERY == 0 {
            stop.check()?;
        }
        // Unreadable directories and vanished entries are skipped.
        let Ok(entry) = result else { continue };
        if entry.depth() == 0 {
            continue;
        }
        if let Some(glob) = glob {
            let is_file = entry.file_type().is_some_and(|t| t.is_file());
            if !is_file || !glob.matches(walk.below(&entry)) {
                continue;
            }
        }
        let Some(path) = walk.relative(sandbox, &entry) else {
            continue;
        };
        // The sandbox's word on what the entry is, not the walker's.
        let Ok(meta) = sandbox.symlink_metadata(&path) else {
            continue;
        };
        if glob.is_some() && !meta.is_file() {
            continue;
        }
        if listing.entries.len() == limit {
            listing.truncated = true;
            break;
        }
        listing.entries.push(list_entry(&path, &meta));
        keys.push(path.as_path().to_path_buf());
    }
    sort_by_keys(&mut listing.entries, keys);
    Ok(listing)
}

/// Sorts entries by their paths as paths (component by component), not by their
/// lossily displayed strings.
fn sort_by_keys(entries: &mut Vec<outputs::ListEntry>, keys: Vec<PathBuf>) {
    if keys.is_sorted() {
        return;
    }
    let mut keyed: Vec<_> = keys.into_iter().zip(entries.drain(..)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    entries.extend(keyed.into_iter().map(|(_, entry)| entry));
}

fn list_entry(path: &WorkspacePath, meta: &Metadata) -> outputs::ListEntry {
    let file_type = meta.file_type();
    let kind = if file_type.is_symlink() {
        outputs::EntryKind::Symlink
    } else if file_type.is_dir() {
        outputs::EntryKind::Directory
    } else if file_type.is_file() {
        outputs::EntryKind::File
    } else {
        outputs::EntryKind::Other
    };
    outputs::ListEntry {
        path: path.display(),
        kind,
        size: meta.len(),
        modified_ms: modified_ms(meta),
    }
}

/// Last modification in milliseconds since the Unix epoch (negative before it;
/// 0 when the filesystem does not record it).
pub(crate) fn modified_ms(meta: &Metadata) -> i64 {
    let Ok(modified) = meta.modified() else {
        return 0;
    };
    let modified = modified.into_std();
    match modified.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

#[cfg(test)]
mod tests;
