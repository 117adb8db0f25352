//! Building file.search's answer: matches sorted by path (component by
//! component) and line, cut at `max_results` and at the output budget.
//!
//! An answer can hold hundreds of thousands of matches, so each match is turned
//! into JSON on the search thread that found it, moving the line's text, rather
//! than building an [`outputs::FileSearch`] and converting it at the end (which
//! copies every string on one thread and was most of the time of a search with
//! many hits). A test checks that both give the same JSON, so the catalog's
//! output type stays the contract.
//!
//! [`outputs::FileSearch`]: chorus_catalog::outputs::FileSearch

use chorus_catalog::outputs::{ContextLine, SearchMatch};
use serde_json::{Map, Value};

use super::collect::FileMatches;

/// The answer, an `outputs::FileSearch` as JSON. `stopped`: the search stopped
/// because it found more than the answer holds.
pub(crate) fn assemble(
    mut found: Vec<FileMatches>,
    max_results: usize,
    max_output_bytes: usize,
    stopped: bool,
) -> Value {
    found.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let total: usize = found.iter().map(|file| file.matches.len()).sum();
    let mut matches = Vec::with_capacity(total.min(max_results));
    let mut bytes = 0usize;
    let mut truncated = stopped;
    'files: for file in found {
        for prepared in file.matches {
            if matches.len() == max_results || bytes + prepared.cost > max_output_bytes {
                truncated = true;
                break 'files;
            }
            bytes += prepared.cost;
            matches.push(prepared.json);
        }
    }
    let mut output = Map::with_capacity(2);
    output.insert("matches".to_owned(), Value::Array(matches));
    output.insert("truncated".to_owned(), Value::Bool(truncated));
    Value::Object(output)
}

/// A `SearchMatch` found in `path` as its serde form (empty context lists are
/// left out).
pub(crate) fn match_value(path: &str, found: SearchMatch) -> Value {
    let fields = 3 + usize::from(!found.before.is_empty()) + usize::from(!found.after.is_empty());
    let mut map = Map::with_capacity(fields);
    map.insert("path".to_owned(), Value::String(path.to_owned()));
    map.insert("line".to_owned(), Value::from(found.line));
    map.insert("content".to_owned(), Value::String(found.content));
    if !found.before.is_empty() {
        map.insert("before".to_owned(), context_value(found.before));
    }
    if !found.after.is_empty() {
        map.insert("after".to_owned(), context_value(found.after));
    }
    Value::Object(map)
}

fn context_value(lines: Vec<ContextLine>) -> Value {
    lines
        .into_iter()
        .map(|line| {
            let mut map = Map::with_capacity(2);
            map.insert("line".to_owned(), Value::from(line.line));
            map.insert("content".to_owned(), Value::String(line.content));
            Value::Object(map)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chorus_catalog::outputs::FileSearch;

    use super::*;
    use crate::sandbox::WorkspacePath;
    use crate::tools::search::collect::{PreparedMatch, match_cost};

    fn file(path: &str, matches: Vec<SearchMatch>) -> FileMatches {
        let path = WorkspacePath::root().join(path);
        let shown = path.display();
        let matches = matches
            .into_iter()
            .map(|found| PreparedMatch {
                cost: match_cost(shown.len(), &found),
                json: match_value(&shown, found),
            })
            .collect();
        FileMatches { path, matches }
    }

    fn found_match(line: u64, content: &str, before: &[u64], after: &[u64]) -> SearchMatch {
        let context = |lines: &[u64]| {
            lines
                .iter()
                .map(|&line| ContextLine {
                    line,
                    content: format!("context {line}"),
                })
                .collect()
        };
        SearchMatch {
            path: String::new(),
            line,
            content: content.to_owned(),
            before: context(before),
            after: context(after),
        }
    }

    #[test]
    fn the_answer_is_the_json_of_the_catalog_output_type() {
        let found = vec![
            file("src/z.rs", vec![found_match(3, "z", &[], &[])]),
            file(
                "src/a:b.rs",
                vec![
                    found_match(1, "first", &[], &[2]),
                    found_match(9, "second \"quoted\"", &[7, 8], &[]),
                ],
            ),
        ];
        let answer = assemble(found, 2, usize::MAX, false);

        let mut first = found_match(1, "first", &[], &[2]);
        first.path = "src/a:b.rs".to_owned();
        let mut second = found_match(9, "second \"quoted\"", &[7, 8], &[]);
        second.path = "src/a:b.rs".to_owned();
        let typed = FileSearch {
            matches: vec![first, second],
            truncated: true,
        };
        assert_eq!(answer, serde_json::to_value(&typed).expect("json"));
        assert_eq!(
            serde_json::to_string(&answer).expect("json"),
            serde_json::to_string(&typed).expect("json"),
            "same keys in the same order"
        );
    }
}
