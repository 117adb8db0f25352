//! The processes `/proc` shows.

use std::path::PathBuf;

/// `/proc/<pid>` of every process this process can see, with its pid.
pub(crate) fn processes() -> impl Iterator<Item = (i32, PathBuf)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<i32>().ok()?, e.path())))
}
