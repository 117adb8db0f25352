//! Data directories say what they are: a Chorus service writes a marker file
//! into each directory of its own (the data directory, the run directories),
//! so that no deployment — this one or another on the same host — accepts one
//! as a workspace, and file tools never walk into one.

use std::path::{Path, PathBuf};

/// The marker's file name.
pub const MARKER: &str = ".chorus-data-dir";

const MARKER_TEXT: &str = "This directory holds a Chorus service's own data (keys, database, run directories).\nNo Chorus deployment accepts it, or anything in it, as a workspace.\n";

/// Marks `dir` (which exists) as a Chorus data directory.
///
/// # Errors
/// The marker cannot be written (a read-only directory whose marker is missing).
pub fn mark(dir: &Path) -> std::io::Result<()> {
    let marker = dir.join(MARKER);
    if std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    std::fs::write(&marker, MARKER_TEXT)
}

/// Whether `dir` is marked as a Chorus data directory.
pub fn is_marked(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file())
}

/// The data directory `path` is, lies in, or holds as a direct child, if any.
pub fn marked_near(path: &Path) -> Option<PathBuf> {
    if let Some(found) = path.ancestors().find(|dir| is_marked(dir)) {
        return Some(found.to_owned());
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
        .find(|dir| is_marked(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_directory_is_found_from_itself_below_and_its_parent() {
        let top = tempfile::tempdir().expect("top");
        let data = top.path().join(".chorus");
        std::fs::create_dir_all(data.join("runs/r1")).expect("dirs");
        assert_eq!(marked_near(&data), None);
        mark(&data).expect("mark");
        mark(&data).expect("marking twice is fine");
        for place in [data.clone(), data.join("runs/r1"), top.path().to_owned()] {
            assert_eq!(
                marked_near(&place),
                Some(data.clone()),
                "{}",
                place.display()
            );
        }
        let apart = tempfile::tempdir().expect("apart");
        assert_eq!(marked_near(apart.path()), None);
    }
}
