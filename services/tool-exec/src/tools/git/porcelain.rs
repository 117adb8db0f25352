//! Parser of `git status --porcelain=v2 --branch -z`.
//!
//! Records are NUL-terminated; a rename or copy record (`2`) is followed by one
//! more NUL-terminated field, its original path. Paths in the output are relative
//! to the repository's top level, and [`parse`] maps them to the workspace root
//! with the root's `prefix` (from `git rev-parse --show-prefix`).

use chorus_catalog::outputs::{GitStatus, GitStatusEntry};

/// Parses status output. `prefix` is the root's path inside the repository
/// ("" at the top level, else ending in '/'). When `truncated`, the output was cut
/// at the output limit and the incomplete last record is dropped.
pub fn parse(output: &[u8], prefix: &str, truncated: bool) -> GitStatus {
    let mut status = GitStatus {
        branch: None,
        upstream: None,
        ahead: 0,
        behind: 0,
        clean: true,
        entries: Vec::new(),
    };
    let mut fields: Vec<&[u8]> = output.split(|b| *b == 0).collect();
    // The piece after the last NUL is empty for complete output, or a cut record.
    fields.pop();
    let mut fields = fields.into_iter();
    while let Some(field) = fields.next() {
        let record = String::from_utf8_lossy(field);
        let Some((kind, rest)) = record.split_once(' ') else {
            continue;
        };
        match kind {
            "#" => header(rest, &mut status),
            "1" => {
                if let Some((xy, path)) = change(rest, 6) {
                    status.entries.push(entry(xy, path, None, prefix));
                }
            }
            "2" => {
                // The original path is the next field; when the output was cut
                // before it, the record is incomplete and dropped.
                let Some(orig) = fields.next() else { break };
                if let Some((xy, path)) = change(rest, 7) {
                    let orig = String::from_utf8_lossy(orig);
                    status.entries.push(entry(xy, path, Some(&orig), prefix));
                }
            }
            "u" => {
                if let Some((xy, path)) = change(rest, 8) {
                    status.entries.push(entry(xy, path, None, prefix));
                }
            }
            "?" => status.entries.push(GitStatusEntry {
                path: to_root_relative(rest, prefix),
                index: "?".to_owned(),
                worktree: "?".to_owned(),
                orig_path: None,
            }),
            // "!" (ignored files) is not asked for; anything newer is skipped.
            _ => {}
        }
    }
    status.clean = status.entries.is_empty() && !truncated;
    status
}

/// `# branch.head main`, `# branch.upstream origin/main`, `# branch.ab +1 -2`.
fn header(rest: &str, status: &mut GitStatus) {
    let Some((key, value)) = rest.split_once(' ') else {
        return;
    };
    match key {
        "branch.head" if value != "(detached)" => status.branch = Some(value.to_owned()),
        "branch.upstream" => status.upstream = Some(value.to_owned()),
        "branch.ab" => {
            for count in value.split(' ') {
                if let Some(n) = count.strip_prefix('+') {
                    status.ahead = n.parse().unwrap_or(0);
                } else if let Some(n) = count.strip_prefix('-') {
                    status.behind = n.parse().unwrap_or(0);
                }
            }
        }
        _ => {}
    }
}

/// Splits a change record (after its kind) into the XY field and the path, which
/// follows `skip` space-separated fields after XY and may itself contain spaces.
fn change(rest: &str, skip: usize) -> Option<(&str, &str)> {
    let mut parts = rest.splitn(skip + 2, ' ');
    let xy = parts.next()?;
    let path = parts.nth(skip)?;
    (xy.len() == 2).then_some((xy, path))
}

fn entry(xy: &str, path: &str, orig: Option<&str>, prefix: &str) -> GitStatusEntry {
    let mut chars = xy.chars();
    let (x, y) = (chars.next().unwrap_or('.'), chars.next().unwrap_or('.'));
    GitStatusEntry {
        path: to_root_relative(path, prefix),
        index: unchanged(x),
        worktree: unchanged(y),
        orig_path: orig.map(|o| to_root_relative(o, prefix)),
    }
}

/// v2 writes '.' for "unchanged"; the output schema uses ' ' as v1 does.
fn unchanged(c: char) -> String {
    if c == '.' {
        " ".to_owned()
    } else {
        c.to_string()
    }
}

/// Maps a path relative to the repository's top level to one relative to the
/// workspace root, whose path in the repository is `prefix`. A path outside the
/// root (a rename's source) gets `../` steps.
pub fn to_root_relative(repo_path: &str, prefix: &str) -> String {
    if prefix.is_empty() {
        return repo_path.to_owned();
    }
    if let Some(inside) = repo_path.strip_prefix(prefix) {
        return if inside.is_empty() {
            ".".to_owned()
        } else {
            inside.to_owned()
        };
    }
    let depth = prefix.split('/').filter(|c| !c.is_empty()).count();
    format!("{}{repo_path}", "../".repeat(depth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(records: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            out.extend_from_slice(r.as_bytes());
            out.push(0);
        }
        out
    }

    const HASH: &str = "78981922613b2afb6025042ff6bd878ac1994e85";

    #[test]
    fn branch_headers_entries_and_renames_are_parsed() {
        let out = z(&[
            "# branch.oid 38fb5b60ff3783208fdb7d90553f253d03409ea8",
            "# branch.head main",
            "# branch.upstream origin/main",
            "# branch.ab +2 -1",
            &format!("1 .M N... 100644 100644 100644 {HASH} {HASH} src/a file.rs"),
            &format!("1 A. N... 000000 100644 100644 {HASH} {HASH} new.rs"),
            &format!("2 R. N... 100644 100644 100644 {HASH} {HASH} R100 d.rs"),
            "c.rs",
            &format!("u UU N... 100644 100644 100644 100644 {HASH} {HASH} {HASH} both.rs"),
            "? untracked dir/",
        ]);
        let status = parse(&out, "", false);
        assert_eq!(status.branch.as_deref(), Some("main"));
        assert_eq!(status.upstream.as_deref(), Some("origin/main"));
        assert_eq!((status.ahead, status.behind), (2, 1));
        assert!(!status.clean);
        let simple: Vec<_> = status
            .entries
            .iter()
            .map(|e| {
                (
                    e.path.as_str(),
                    e.index.as_str(),
                    e.worktree.as_str(),
                    e.orig_path.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            simple,
            vec![
                ("src/a file.rs", " ", "M", None),
                ("new.rs", "A", " ", None),
                ("d.rs", "R", " ", Some("c.rs")),
                ("both.rs", "U", "U", None),
                ("untracked dir/", "?", "?", None),
            ]
        );
    }

    #[test]
    fn a_clean_detached_head_has_no_branch() {
        let status = parse(
            &z(&["# branch.oid abc", "# branch.head (detached)"]),
            "",
            false,
        );
        assert_eq!(status.branch, None);
        assert!(status.clean);
        assert!(status.entries.is_empty());
    }

    #[test]
    fn paths_are_mapped_to_a_root_below_the_top_level() {
        let out = z(&[
            &format!("2 R. N... 100644 100644 100644 {HASH} {HASH} R100 sub/new.rs"),
            "other/old.rs",
            "? sub/x",
        ]);
        let status = parse(&out, "sub/", false);
        assert_eq!(status.entries[0].path, "new.rs");
        assert_eq!(
            status.entries[0].orig_path.as_deref(),
            Some("../other/old.rs")
        );
        assert_eq!(status.entries[1].path, "x");
        assert_eq!(to_root_relative("a/b/", "a/b/"), ".");
        assert_eq!(to_root_relative("c", "a/b/"), "../../c");
    }

    #[test]
    fn a_cut_record_is_dropped_and_the_status_is_not_clean() {
        let mut out = z(&["# branch.head main", "? done"]);
        out.extend_from_slice(b"? cut-in-ha");
        let status = parse(&out, "", true);
        assert_eq!(status.entries.len(), 1);
        assert_eq!(status.entries[0].path, "done");
        assert!(!status.clean);

        // A rename cut before its original path is dropped too.
        let out = z(&[&format!(
            "2 R. N... 100644 100644 100644 {HASH} {HASH} R100 d.rs"
        )]);
        assert!(parse(&out, "", true).entries.is_empty());
    }
}
