//! A call as approval rules read it: its tool, and each argument a rule's
//! condition may look at, read every way the tool could take it.

use serde_json::Value;

use super::Field;

/// The characters after which a shell starts another command, or which let
/// one command write or run more than it says (redirections, substitutions).
const SHELL_CONTROL: &[char] = &[';', '&', '|', '\n', '\r', '`', '$', '(', ')', '<', '>'];

/// Words that run the command after them.
const WRAPPERS: &[&str] = &[
    "env", "command", "exec", "nohup", "time", "builtin", "sudo", "nice", "timeout", "xargs",
];

/// The facts about one call the rules read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFacts {
    pub tool: String,
    command: Option<Readings>,
    path: Option<Readings>,
    remote: Option<Readings>,
    host: Option<Readings>,
}

/// The ways one argument can be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Readings {
    texts: Vec<String>,
    /// Whether the texts are all the argument does: false when part of it
    /// could not be read (a command with shell control characters, a path
    /// that climbs out of the workspace), so that no allowing rule applies.
    complete: bool,
    /// For a directory: the texts are directories, matched by what is in them.
    directory: bool,
}

impl Readings {
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Every reading matches (and the readings are the whole argument).
    pub fn all_match(&self, matches: impl Fn(&str) -> bool) -> bool {
        self.complete && !self.directory && self.texts.iter().all(|t| matches(t))
    }

    /// Some reading matches.
    pub fn any_match(&self, matches: impl Fn(&str) -> bool) -> bool {
        self.texts.iter().any(|t| matches(t))
    }

    /// For a directory reading matched against a path glob: whether the glob
    /// reaches into it (its fixed leading directories lie inside it, or it
    /// lies inside them).
    pub fn reaches(&self, literal_dir: &str) -> bool {
        self.directory
            && self.texts.iter().any(|dir| {
                dir.is_empty()
                    || literal_dir.is_empty()
                    || literal_dir == dir
                    || literal_dir.starts_with(&format!("{dir}/"))
                    || dir.starts_with(&format!("{literal_dir}/"))
            })
    }
}

impl CallFacts {
    /// The facts of a call of `tool` with `arguments` by a run acting in
    /// `root`; `resolved` is the workspace-relative path tool-exec found the
    /// call's path to name once symbolic links are followed, when it did.
    pub fn new(tool: &str, arguments: &Value, root: Option<&str>, resolved: Option<&str>) -> Self {
        let text = |name: &str| arguments.get(name).and_then(Value::as_str);
        let directory = matches!(tool, "file.list" | "file.search");
        let path = tool.starts_with("file.").then(|| {
            let given = text("path").unwrap_or("");
            let mut readings = path_readings(given, root);
            if let Some(resolved) = resolved {
                match normalized(resolved, None) {
                    Some(p) => readings.texts.push(p),
                    None => readings.complete = false,
                }
            }
            readings.texts.dedup();
            readings.directory = directory;
            readings
        });
        Self {
            tool: tool.to_owned(),
            command: (tool == "bash").then(|| command_readings(text("command").unwrap_or(""))),
            path,
            remote: (tool == "git.push").then(|| Readings {
                texts: vec![
                    text("remote")
                        .filter(|r| !r.is_empty())
                        .unwrap_or("origin")
                        .to_owned(),
                ],
                complete: true,
                directory: false,
            }),
            host: (tool == chorus_catalog::NETWORK).then(|| destination_readings(arguments)),
        }
    }

    pub(super) fn readings(&self, field: Field) -> Readings {
        match field {
            Field::Command => self.command.clone(),
            Field::Path => self.path.clone(),
            Field::Remote => self.remote.clone(),
            Field::Host => self.host.clone(),
        }
        .unwrap_or_default()
    }
}

/// A bash command as the commands it runs: each segment between shell
/// control characters, its leading `VAR=value` words and wrappers
/// (`env`, `sudo`, ...) dropped; complete when it has no control character.
fn command_readings(command: &str) -> Readings {
    let complete = !command.contains(SHELL_CONTROL);
    let mut texts = Vec::new();
    for segment in command.split(SHELL_CONTROL) {
        let words: Vec<&str> = segment.split_whitespace().collect();
        texts.push(words.join(" "));
        // After a variable or a wrapper, the command it runs; a wrapper's
        // own options (`timeout 5`, `sudo -u x`) may come first, so every
        // later start is a reading too.
        if let Some(first) = words.iter().position(|w| !is_assignment(w)) {
            if first > 0 {
                texts.push(words[first..].join(" "));
            }
            if WRAPPERS.contains(&words[first]) {
                for start in first + 1..words.len() {
                    texts.push(words[start..].join(" "));
                }
            }
        }
    }
    texts.retain(|t| !t.is_empty());
    texts.dedup();
    if texts.is_empty() {
        texts.push(String::new());
    }
    Readings {
        texts,
        complete,
        directory: false,
    }
}

/// A connection of the network grant, `{host, port}`, as `host:port` (the
/// host in lower case; an IPv6 address in brackets); none without both.
fn destination_readings(arguments: &Value) -> Readings {
    let host = arguments
        .get("host")
        .and_then(Value::as_str)
        .map(|h| h.trim_end_matches('.').to_ascii_lowercase());
    let port = arguments.get("port").and_then(Value::as_u64);
    match (host, port) {
        (Some(host), Some(port)) if !host.is_empty() => Readings {
            texts: vec![if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }],
            complete: true,
            directory: false,
        },
        _ => Readings::default(),
    }
}

/// `NAME=value`, a variable given to the command after it.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A file tool's path, relative to the workspace, with `.`, empty parts
/// and `..` resolved; an absolute path inside `root` made relative. One that
/// leaves the workspace is no reading (the sandbox refuses it anyway).
fn path_readings(path: &str, root: Option<&str>) -> Readings {
    match normalized(path, root) {
        Some(p) => Readings {
            texts: vec![p],
            complete: true,
            directory: false,
        },
        None => Readings {
            texts: vec![path.to_owned()],
            complete: false,
            directory: false,
        },
    }
}

fn normalized(path: &str, root: Option<&str>) -> Option<String> {
    let relative = if path.starts_with('/') {
        let root = root?.trim_end_matches('/');
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest.to_owned()
    } else {
        path.to_owned()
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}
