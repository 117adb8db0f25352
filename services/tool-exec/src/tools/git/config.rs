//! What git sees of a repository's configuration: only keys on an allow-list.
//!
//! A configuration can make git run programs (filters, diff drivers, hooks,
//! fsmonitor, signing, ssh and proxy commands, transports such as `ext::` or a
//! local `receivepack`) and read further files (`include.path`,
//! `includeIf`, `extensions.worktreeConfig`, an attributes file). Overriding
//! what is known to be dangerous on the command line was beaten twice: a
//! protocol allowed by the repository outranks `protocol.allow=never`, and a
//! filter named `a=b` escapes `-c filter.a=b.clean=` (git splits at the first
//! `=`). So git never reads the repository's own file: the tools read it as
//! data (`git config --file ... --no-includes --list`), keep the keys below,
//! and the sandbox shows git a file with only those in its place.

use std::fmt::Write as _;

/// Keys kept as they are (lower case, as `git config --list` prints them).
const KEPT: &[&str] = &[
    "core.repositoryformatversion",
    "core.bare",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.logallrefupdates",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.checkstat",
    "core.trustctime",
    "core.quotepath",
    "core.abbrev",
    "core.commentchar",
    "core.commentstring",
    "core.whitespace",
    "core.untrackedcache",
    "core.splitindex",
    "core.compression",
    "core.looseobjectcompression",
    "core.bigfilethreshold",
    "extensions.objectformat",
    "extensions.refstorage",
    "extensions.compatobjectformat",
    "extensions.preciousobjects",
    "extensions.noop",
    "index.version",
    "feature.manyfiles",
    "user.name",
    "user.email",
    "author.name",
    "author.email",
    "committer.name",
    "committer.email",
    "init.defaultbranch",
    "i18n.commitencoding",
    "i18n.logoutputencoding",
    "diff.renames",
    "diff.algorithm",
    "diff.context",
    "diff.interhunkcontext",
    "diff.noprefix",
    "diff.mnemonicprefix",
    "status.showuntrackedfiles",
    "status.renames",
    "status.renamelimit",
    "push.default",
    "push.autosetupremote",
    "remote.pushdefault",
];

/// Keys of one named subsection kept as they are: `<section>.<name>.<key>`.
const KEPT_IN_SUBSECTIONS: &[(&str, &[&str])] = &[
    (
        "remote",
        &["url", "pushurl", "fetch", "push", "tagopt", "prune"],
    ),
    ("branch", &["remote", "pushremote", "merge", "rebase"]),
];

/// One key and value as `git config --list --null` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

/// Reads `git config --null --list` output: `key\nvalue\0` per entry (a key
/// without a value, such as `[core] bare`, has no newline).
pub fn parse_list(text: &str) -> Vec<Entry> {
    text.split('\0')
        .filter(|e| !e.is_empty())
        .map(|entry| match entry.split_once('\n') {
            Some((key, value)) => Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            },
            None => Entry {
                key: entry.to_owned(),
                value: "true".to_owned(),
            },
        })
        .collect()
}

/// Whether git may see `key`.
pub fn allowed(key: &str) -> bool {
    if KEPT.contains(&key) {
        return true;
    }
    // `<section>.<subsection>.<name>`: the subsection may hold dots.
    let Some((section, rest)) = key.split_once('.') else {
        return false;
    };
    let Some((_, name)) = rest.rsplit_once('.') else {
        return false;
    };
    KEPT_IN_SUBSECTIONS
        .iter()
        .any(|(s, names)| *s == section && names.contains(&name))
}

/// The configuration git is shown: the allowed entries, in their order, and
/// the keys left out.
pub fn sanitize(entries: &[Entry]) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut dropped = Vec::new();
    let mut current: Option<(String, Option<String>)> = None;
    for entry in entries {
        if !allowed(&entry.key) {
            if !dropped.contains(&entry.key) {
                dropped.push(entry.key.clone());
            }
            continue;
        }
        let (section, subsection, name) = split_key(&entry.key);
        let header = (section.to_owned(), subsection.map(str::to_owned));
        if current.as_ref() != Some(&header) {
            match subsection {
                Some(sub) => {
                    let _ = writeln!(text, "[{section} \"{}\"]", escape_subsection(sub));
                }
                None => {
                    let _ = writeln!(text, "[{section}]");
                }
            }
            current = Some(header);
        }
        let _ = writeln!(text, "\t{name} = {}", quote_value(&entry.value));
    }
    (text, dropped)
}

/// `section`, the subsection (between the first and the last dot) and the name.
fn split_key(key: &str) -> (&str, Option<&str>, &str) {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    match rest.rsplit_once('.') {
        Some((sub, name)) => (section, Some(sub), name),
        None => (section, None, rest),
    }
}

/// A subsection name in `[section "..."]`: `\` and `"` escaped (git refuses
/// newlines there, so none come from it).
fn escape_subsection(sub: &str) -> String {
    sub.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A value in double quotes, with git's escapes: nothing in it can end the
/// line, start a comment or a new section.
fn quote_value(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\u{8}' => quoted.push_str("\\b"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect()
    }

    #[test]
    fn only_allowed_keys_are_kept_and_the_rest_are_named() {
        let (text, dropped) = sanitize(&entries(&[
            ("core.repositoryformatversion", "0"),
            ("core.fsmonitor", "sh -c evil"),
            ("filter.a=b.clean", "sh -c evil"),
            ("protocol.ext.allow", "always"),
            ("include.path", "../x"),
            ("remote.origin.url", "https://example.com/r.git"),
            ("remote.origin.receivepack", "sh -c evil"),
            ("remote.origin.vcs", "evil"),
            ("branch.main.remote", "origin"),
            ("url.ext::sh.insteadof", "https://"),
            ("user.name", "Ann"),
        ]));
        assert_eq!(
            dropped,
            [
                "core.fsmonitor",
                "filter.a=b.clean",
                "protocol.ext.allow",
                "include.path",
                "remote.origin.receivepack",
                "remote.origin.vcs",
                "url.ext::sh.insteadof"
            ]
        );
        assert_eq!(
            text,
            "[core]\n\trepositoryformatversion = \"0\"\n[remote \"origin\"]\n\turl = \"https://example.com/r.git\"\n[branch \"main\"]\n\tremote = \"origin\"\n[user]\n\tname = \"Ann\"\n"
        );
    }

    #[test]
    fn the_list_format_is_read_with_and_without_values() {
        assert_eq!(
            parse_list("core.bare\nfalse\0core.x\0user.name\nA\nB\0"),
            entries(&[
                ("core.bare", "false"),
                ("core.x", "true"),
                ("user.name", "A\nB")
            ])
        );
    }

    /// What is written reads back as the same values, however they are
    /// spelled: git itself parses the sanitized text.
    #[test]
    fn git_reads_back_exactly_what_was_kept() {
        let tricky = "a \"quoted\" \\ value ; # not a comment\n[filter \"x\"]\n\tclean = evil\ttab";
        let kept = entries(&[
            ("user.name", tricky),
            ("remote.we \"ird\\name.url", "https://example.com/a b"),
            (
                "remote.we \"ird\\name.fetch",
                "+refs/heads/*:refs/remotes/x/*",
            ),
        ]);
        let (text, dropped) = sanitize(&kept);
        assert!(dropped.is_empty());
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("config");
        std::fs::write(&file, &text).expect("write");
        let out = std::process::Command::new("git")
            .args(["config", "--file"])
            .arg(&file)
            .args(["--null", "--list"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            parse_list(&String::from_utf8_lossy(&out.stdout)),
            kept,
            "{text}"
        );
    }
}
