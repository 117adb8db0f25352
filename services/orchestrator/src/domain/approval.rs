//! Approval rules: beside the allow-list, what a run's call needs before it
//! runs — nothing (`allow`), a person's yes (`ask`), or it never runs
//! (`deny`) — by tool and by the call's arguments (a bash command's prefix or
//! glob, a file tool's path glob, git.push's remote, the network grant's
//! host and port). The most specific rule
//! wins; at equal specificity an agent's rule beats its workspace's default,
//! then deny beats ask beats allow. A run carries its own layer and each of
//! its handoff ancestors' layers: a call's decision is the strictest of them,
//! so a child never gets a wider rule than its parent.

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::DomainError;

mod asks;
mod call;

pub use asks::{Answer, Approval, ApprovalOutcome, Approvals, Asking, MAX_KEPT_ANSWERS};
pub use call::CallFacts;

/// What a rule says about a call.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// It runs.
    #[default]
    Allow,
    /// It waits for a person's answer, until the rule's deadline.
    Ask,
    /// It never runs; the agent is told which rule refused it.
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        match s.trim() {
            "allow" => Ok(Self::Allow),
            "ask" => Ok(Self::Ask),
            "deny" => Ok(Self::Deny),
            other => Err(DomainError::invalid(
                "approval rule",
                format!("unknown decision '{other}': say allow, ask or deny"),
            )),
        }
    }
}

/// How long an `ask` waits for an answer unless its rule says.
pub const DEFAULT_DEADLINE_S: u32 = 10 * 60;
/// The longest an `ask` may wait.
pub const MAX_DEADLINE_S: u32 = 24 * 60 * 60;
/// Most rules in one agent's or workspace's list.
pub const MAX_RULES: usize = 500;
/// Longest pattern of a rule.
const MAX_PATTERN: usize = 1024;

/// One rule, as a user writes it (and as it reads: `ask file.* path=deploy/**
/// deadline=600`, the form `chorus agent update --rule` takes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Rule {
    /// A catalog tool (`git.push`), every tool of a family (`file.*`,
    /// `git.*`, `task.*`), the network grant (`network`: each connection a
    /// process makes with it), or every tool (`*`).
    pub tool: String,
    pub decision: Decision,
    /// bash only: a command prefix (`cargo test`), or a glob over the whole
    /// command when it has `*`, `?` or `[` (`npm run *`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// file tools only: a glob over the workspace-relative path
    /// (`deploy/**`, `*.md`; `*` stays within a directory, `**` crosses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// git.push only: the remote's name, or a glob over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// network only: a glob over the destination's host (case-insensitive,
    /// `*` crosses dots; an IPv6 address in brackets), then `:PORT` or
    /// `:*`, or no port (every port): `*.github.com:443`, `10.0.0.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `ask` only: seconds to wait for an answer (default 10 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<u32>,
}

/// Which argument of a call a rule's condition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Command,
    Path,
    Remote,
    Host,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Path => "path",
            Self::Remote => "remote",
            Self::Host => "host",
        }
    }

    /// The field the tools a rule's `tool` names take, when every one of
    /// them takes it.
    fn of_tools(tool: &str) -> Option<Self> {
        match tool {
            "bash" => Some(Self::Command),
            "git.push" => Some(Self::Remote),
            chorus_catalog::NETWORK => Some(Self::Host),
            t if t.starts_with("file.") => Some(Self::Path),
            _ => None,
        }
    }
}

impl Rule {
    /// The condition it has, if any: the field and its pattern.
    fn condition(&self) -> Result<Option<(Field, &str)>, DomainError> {
        let given: Vec<(Field, &str)> = [
            (Field::Command, self.command.as_deref()),
            (Field::Path, self.path.as_deref()),
            (Field::Remote, self.remote.as_deref()),
            (Field::Host, self.host.as_deref()),
        ]
        .into_iter()
        .filter_map(|(f, p)| p.map(|p| (f, p)))
        .collect();
        match given.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            _ => Err(self.invalid("give at most one of command, path, remote and host")),
        }
    }

    fn invalid(&self, reason: impl std::fmt::Display) -> DomainError {
        DomainError::invalid("approval rule", format!("'{self}': {reason}"))
    }

    /// Checks the rule: a tool the catalog has, a condition the tool takes
    /// that can match something, a deadline only on `ask` and within a day.
    pub fn check(&self) -> Result<(), DomainError> {
        self.compile().map(drop)
    }

    /// The rule ready to match calls.
    fn compile(&self) -> Result<Compiled, DomainError> {
        let tool = ToolPattern::parse(&self.tool).map_err(|reason| self.invalid(reason))?;
        let condition = match self.condition()? {
            None => None,
            Some((field, pattern)) => {
                let takes = match &tool {
                    ToolPattern::Exact(name) => Field::of_tools(name),
                    ToolPattern::Family(family) => Field::of_tools(&format!("{family}.")),
                    ToolPattern::Any => None,
                };
                if takes != Some(field) {
                    return Err(self.invalid(format!(
                        "{} has no {} argument: command goes with bash, path with file tools, remote with git.push, host with network",
                        self.tool,
                        field.name()
                    )));
                }
                Some(Condition::compile(field, pattern).map_err(|reason| self.invalid(reason))?)
            }
        };
        match (self.decision, self.deadline_s) {
            (Decision::Ask, Some(0)) => return Err(self.invalid("a deadline is 1 second or more")),
            (Decision::Ask, Some(s)) if s > MAX_DEADLINE_S => {
                return Err(self.invalid(format!(
                    "a deadline is at most {MAX_DEADLINE_S} seconds (a day)"
                )));
            }
            (Decision::Allow | Decision::Deny, Some(_)) => {
                return Err(self.invalid("only an ask rule has a deadline"));
            }
            _ => {}
        }
        Ok(Compiled {
            specificity: (
                tool.specificity(),
                condition.as_ref().map_or(0, Condition::specificity),
            ),
            tool,
            condition,
        })
    }

    /// How long a call this rule asks about waits for an answer.
    pub fn deadline_ms(&self) -> i64 {
        i64::from(self.deadline_s.unwrap_or(DEFAULT_DEADLINE_S)) * 1000
    }

    /// The same rule deciding `decision` (a task's approval of an ask rule).
    #[must_use]
    pub fn deciding(&self, decision: Decision) -> Self {
        Self {
            decision,
            deadline_s: None,
            ..self.clone()
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.decision.as_str(), self.tool)?;
        for (name, value) in [
            ("command", &self.command),
            ("path", &self.path),
            ("remote", &self.remote),
            ("host", &self.host),
        ] {
            if let Some(value) = value {
                write!(f, " {name}={value}")?;
            }
        }
        if let Some(s) = self.deadline_s {
            write!(f, " deadline={s}")?;
        }
        Ok(())
    }
}

/// Checks a list of rules as a user gave it (an agent's or a workspace's).
pub fn check_rules(rules: &[Rule]) -> Result<(), DomainError> {
    if rules.len() > MAX_RULES {
        return Err(DomainError::invalid(
            "approval_rules",
            format!("{} rules; at most {MAX_RULES}", rules.len()),
        ));
    }
    rules.iter().try_for_each(Rule::check)
}

/// What a rule's `tool` covers.
#[derive(Debug, Clone)]
enum ToolPattern {
    Exact(String),
    Family(String),
    Any,
}

impl ToolPattern {
    fn parse(tool: &str) -> Result<Self, String> {
        let tool = tool.trim();
        if tool == "*" {
            return Ok(Self::Any);
        }
        if let Some(family) = tool.strip_suffix(".*") {
            if chorus_catalog::TOOLS
                .iter()
                .any(|t| t.name.split_once('.').is_some_and(|(f, _)| f == family))
            {
                return Ok(Self::Family(family.to_owned()));
            }
            return Err(format!(
                "no tool family '{family}': families are file, git, task and web"
            ));
        }
        if chorus_catalog::get(tool).is_some() || tool == chorus_catalog::NETWORK {
            return Ok(Self::Exact(tool.to_owned()));
        }
        Err(format!(
            "unknown tool '{tool}': name a catalog tool (bash, file.write, git.push, ...), a family (file.*), network or *"
        ))
    }

    fn covers(&self, tool: &str) -> bool {
        match self {
            Self::Exact(name) => name == tool,
            Self::Family(family) => tool.split_once('.').is_some_and(|(f, _)| f == family),
            Self::Any => true,
        }
    }

    fn specificity(&self) -> u8 {
        match self {
            Self::Exact(_) => 2,
            Self::Family(_) => 1,
            Self::Any => 0,
        }
    }
}

/// A rule's condition, ready to match.
#[derive(Debug, Clone)]
struct Condition {
    field: Field,
    matcher: Matcher,
    /// How many literal characters the pattern has: the longer, the more
    /// specific.
    literal: usize,
    /// A path pattern's leading directories with no wildcard (`deploy` of
    /// `deploy/**`): where a directory tool's reading reaches it.
    literal_dir: String,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// A command starting with these words.
    Prefix(String),
    Glob(GlobMatcher),
    /// A destination: its host, and its port unless any.
    Destination(GlobMatcher, Option<u16>),
}

fn has_wildcard(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

impl Condition {
    fn compile(field: Field, pattern: &str) -> Result<Self, String> {
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err(format!("an empty {} pattern matches nothing", field.name()));
        }
        if pattern.len() > MAX_PATTERN {
            return Err(format!("a pattern is at most {MAX_PATTERN} bytes"));
        }
        if field == Field::Path {
            if pattern.starts_with('/') {
                return Err(
                    "a path is relative to the workspace (deploy/**), so an absolute one can never match"
                        .to_owned(),
                );
            }
            if pattern.split('/').any(|part| part == "..") {
                return Err(
                    "a path with '..' leaves the workspace, so it can never match".to_owned(),
                );
            }
        }
        let literal = pattern.chars().filter(|c| !"*?[]".contains(*c)).count();
        let matcher = if field == Field::Host {
            destination_matcher(pattern)?
        } else if field == Field::Command && !has_wildcard(pattern) {
            Matcher::Prefix(pattern.split_whitespace().collect::<Vec<_>>().join(" "))
        } else {
            let glob = GlobBuilder::new(pattern.strip_prefix("./").unwrap_or(pattern))
                .literal_separator(field == Field::Path)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("the glob does not parse: {}", e.kind()))?;
            Matcher::Glob(glob.compile_matcher())
        };
        let literal_dir = if has_wildcard(pattern) {
            let fixed: Vec<&str> = pattern
                .split('/')
                .take_while(|part| !has_wildcard(part))
                .filter(|part| !part.is_empty() && *part != ".")
                .collect();
            fixed.join("/")
        } else {
            pattern
                .trim_start_matches("./")
                .trim_end_matches('/')
                .to_owned()
        };
        Ok(Self {
            field,
            matcher,
            literal,
            literal_dir,
        })
    }

    fn specificity(&self) -> usize {
        // Any condition is more specific than none.
        1 + self.literal
    }

    fn matches_text(&self, text: &str) -> bool {
        match &self.matcher {
            Matcher::Prefix(prefix) => {
                let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
                words == *prefix
                    || words
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with(' '))
            }
            Matcher::Glob(glob) => glob.is_match(text),
            Matcher::Destination(host, port) => split_destination(text)
                .is_some_and(|(h, p)| host.is_match(h) && port.is_none_or(|port| port == p)),
        }
    }
}

/// `HOST`, `HOST:PORT` or `HOST:*`, HOST a glob (an IPv6 address in
/// brackets: `[2001:db8::1]:443`).
fn destination_matcher(pattern: &str) -> Result<Matcher, String> {
    let (host, port) = match pattern.strip_prefix('[') {
        Some(rest) => {
            let (address, after) = rest
                .split_once(']')
                .ok_or("an IPv6 address ends with ']'")?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or("write [IPv6]:PORT")?),
            };
            (address, port)
        }
        None => match pattern.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (pattern, None),
        },
    };
    if host.is_empty() || host.contains(['/', ' ']) {
        return Err(format!(
            "'{pattern}' is not a host: write HOST, HOST:PORT or HOST:* (*.github.com:443)"
        ));
    }
    let port = match port {
        None | Some("*") => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("'{p}' is not a port: write 1 to 65535, or *"))?,
        ),
    };
    let glob = GlobBuilder::new(host)
        .case_insensitive(true)
        .literal_separator(false)
        .build()
        .map_err(|e| format!("the host glob does not parse: {}", e.kind()))?;
    Ok(Matcher::Destination(glob.compile_matcher(), port))
}

/// A destination as [`CallFacts`] reads it, `host:port` (an IPv6 host in
/// brackets), split.
fn split_destination(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// A rule, compiled.
#[derive(Debug, Clone)]
struct Compiled {
    tool: ToolPattern,
    condition: Option<Condition>,
    specificity: (u8, usize),
}

impl Compiled {
    /// Whether the rule applies to the call, reading its arguments as a rule
    /// deciding `decision` must: a refusing rule (ask, deny) applies when any
    /// reading of the call could match it, an allowing one only when every
    /// reading does.
    fn applies(&self, call: &CallFacts, decision: Decision) -> bool {
        if !self.tool.covers(&call.tool) {
            return false;
        }
        let Some(condition) = &self.condition else {
            return true;
        };
        let readings = call.readings(condition.field);
        if readings.is_empty() {
            // The call has no such argument to read.
            return false;
        }
        match decision {
            Decision::Allow => readings.all_match(|text| condition.matches_text(text)),
            Decision::Ask | Decision::Deny => {
                readings.any_match(|text| condition.matches_text(text))
                    || readings.reaches(&condition.literal_dir)
            }
        }
    }
}

/// Rules compiled once per process: every call of a run reads its rules, and
/// compiling a glob costs far more than matching it.
fn compiled(rule: &Rule) -> Result<std::sync::Arc<Compiled>, DomainError> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};
    /// Past this many rules the memo starts again (rules change rarely).
    const MOST: usize = 4096;
    static MEMO: OnceLock<Mutex<HashMap<Rule, Arc<Compiled>>>> = OnceLock::new();
    let memo = MEMO.get_or_init(Mutex::default);
    if let Some(known) = memo
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(rule)
    {
        return Ok(Arc::clone(known));
    }
    let made = Arc::new(rule.compile()?);
    let mut memo = memo.lock().unwrap_or_else(PoisonError::into_inner);
    if memo.len() >= MOST {
        memo.clear();
    }
    memo.insert(rule.clone(), Arc::clone(&made));
    Ok(made)
}

/// How a rule weighs against the others that apply: its tool's and its
/// condition's specificity, whether it is the agent's own, its decision.
type Weight = (u8, usize, u8, Decision);

/// One layer of rules: an agent's own, before its workspace's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    /// Whose rules: the agent's name.
    pub agent: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defaults: Vec<Rule>,
}

/// What the rules decided about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    pub decision: Decision,
    /// The rule that decided; None when no rule applies (allowed).
    pub rule: Option<Rule>,
    /// The agent whose layer it came from.
    pub agent: Option<String>,
}

impl Ruling {
    fn allowed() -> Self {
        Self {
            decision: Decision::Allow,
            rule: None,
            agent: None,
        }
    }
}

impl Layer {
    /// The layer's decision on `call`: the most specific rule that applies
    /// (the agent's before the defaults, then deny before ask before allow);
    /// allow when none does.
    fn decide(&self, call: &CallFacts) -> Result<Ruling, DomainError> {
        let mut best: Option<(Weight, &Rule)> = None;
        for (own, rules) in [(1u8, &self.rules), (0u8, &self.defaults)] {
            for rule in rules {
                // Rules of other tools are passed over without a look-up.
                let tool = rule.tool.trim();
                let may_cover = tool == "*"
                    || tool == call.tool
                    || tool
                        .strip_suffix('*')
                        .is_some_and(|family| call.tool.starts_with(family));
                if !may_cover {
                    continue;
                }
                let compiled = compiled(rule)?;
                if !compiled.applies(call, rule.decision) {
                    continue;
                }
                let key = (
                    compiled.specificity.0,
                    compiled.specificity.1,
                    own,
                    rule.decision,
                );
                if best.as_ref().is_none_or(|(k, _)| key > *k) {
                    best = Some((key, rule));
                }
            }
        }
        Ok(match best {
            Some((_, rule)) => Ruling {
                decision: rule.decision,
                rule: Some(rule.clone()),
                agent: Some(self.agent.clone()),
            },
            None => Ruling::allowed(),
        })
    }
}

/// A run's rules: its own layer, then its handoff parent's layers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRules {
    #[serde(default)]
    pub layers: Vec<Layer>,
}

impl RunRules {
    /// The rules of a run of `agent`: its `rules`, then its workspace's
    /// `defaults`.
    pub fn own(agent: &str, rules: Vec<Rule>, defaults: Vec<Rule>) -> Self {
        let layer = Layer {
            agent: agent.to_owned(),
            rules,
            defaults,
        };
        Self {
            layers: if layer.rules.is_empty() && layer.defaults.is_empty() {
                Vec::new()
            } else {
                vec![layer]
            },
        }
    }

    /// These rules for a run handed work by a run with `parent`'s rules:
    /// the parent's layers hold too.
    #[must_use]
    pub fn under(mut self, parent: Option<&RunRules>) -> Self {
        if let Some(parent) = parent {
            self.layers.extend(parent.layers.iter().cloned());
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Whether a rule of these could decide a call of `tool`, one with no
    /// family (`network`): one naming it, or `*`.
    pub fn mention(&self, tool: &str) -> bool {
        self.layers
            .iter()
            .flat_map(|l| l.rules.iter().chain(&l.defaults))
            .any(|r| {
                let named = r.tool.trim();
                named == "*" || named == tool
            })
    }

    /// The decision on `call`: the strictest of the layers' decisions, where
    /// an `ask` whose rule `approved` holds (the task's approvals) allows.
    pub fn decide(&self, call: &CallFacts, approved: &[Rule]) -> Result<Ruling, DomainError> {
        let mut ruling = Ruling::allowed();
        for layer in &self.layers {
            let mut theirs = layer.decide(call)?;
            if theirs.decision == Decision::Ask
                && theirs
                    .rule
                    .as_ref()
                    .is_some_and(|r| approved.iter().any(|a| a == &r.deciding(Decision::Allow)))
            {
                theirs.decision = Decision::Allow;
            }
            if theirs.decision > ruling.decision {
                ruling = theirs;
            }
        }
        Ok(ruling)
    }
}

/// The call's arguments as history keeps them (see `input_excerpt`), for the
/// approval's record.
pub fn shown_arguments(arguments: &Value) -> Value {
    chorus_tool_exec::record::input_excerpt(arguments).0
}

#[cfg(test)]
mod tests;
