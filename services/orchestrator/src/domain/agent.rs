//! Agents: who does the work, with which instructions and tools.

use super::{DomainError, Name, ProviderKind};

/// Most bytes of an agent's instructions (they are part of every run's prompt).
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// Most entries of an agent's egress list.
pub const MAX_EGRESS_RULES: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Defined by the user: instructions, tools, provider.
    UserDefined,
    /// Part of Chorus (the planner): runs on the workspace's system provider and
    /// uses only the always-granted tools.
    Internal,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserDefined => "user_defined",
            Self::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        match s {
            "user_defined" => Ok(Self::UserDefined),
            "internal" => Ok(Self::Internal),
            _ => Err(DomainError::invalid(
                "agent kind",
                format!("unknown kind '{s}'; one of: user_defined, internal"),
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    pub name: Name,
    pub kind: AgentKind,
    pub instructions: String,
    /// Tool names and `@profile` references, as the user wrote them.
    pub allowed_tools: Vec<String>,
    /// Provider that runs the agent (user-defined agents; internal agents use the
    /// workspace's system provider).
    pub provider: Option<Name>,
    /// Model, overriding the provider's default.
    pub model: Option<String>,
    /// Where the agent's processes may connect when it holds the `network`
    /// grant, as `host:port` rules (`github.com:443`, `*.npmjs.org:443`,
    /// `10.0.0.5:5432`); empty: nowhere. Never the host's loopback or
    /// link-local addresses, whatever a rule says.
    pub egress: Vec<String>,
    /// The budget of a task started with it, for each limit the task leaves out.
    pub budget: super::Budget,
    /// What its calls need before they run (see [`super::approval`]).
    pub approval_rules: Vec<super::approval::Rule>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl Agent {
    /// Checks an allow-list: every entry a catalog tool or a `@profile`, and not
    /// the planner's own tool. Returns the tool names it grants (always-granted
    /// tools included).
    pub fn check_allowed_tools(entries: &[String]) -> Result<Vec<String>, DomainError> {
        if let Some(entry) = entries.iter().find(|e| e.trim() == PLANNER_TOOL) {
            return Err(DomainError::invalid(
                "allowed_tools",
                format!(
                    "'{}' is Chorus's planner's own tool and cannot be granted; PlanTask runs the planner",
                    entry.trim()
                ),
            ));
        }
        Self::expand(entries)
    }

    fn expand(entries: &[impl AsRef<str>]) -> Result<Vec<String>, DomainError> {
        chorus_catalog::expand_allow_list(entries)
            .map(|tools| tools.into_iter().map(str::to_owned).collect())
            .map_err(|e| DomainError::invalid("allowed_tools", e.to_string()))
    }

    /// Checks instructions against [`MAX_INSTRUCTIONS_BYTES`].
    pub fn check_instructions(instructions: &str) -> Result<(), DomainError> {
        if instructions.len() > MAX_INSTRUCTIONS_BYTES {
            return Err(DomainError::invalid(
                "instructions",
                format!(
                    "{} bytes, over the {MAX_INSTRUCTIONS_BYTES}-byte limit; keep them short and put long material in the workspace's files",
                    instructions.len()
                ),
            ));
        }
        Ok(())
    }

    /// Checks that a provider of `kind` can run this agent: web.search exists
    /// only for providers with a web search of their own.
    pub fn check_provider_kind(
        &self,
        provider: &str,
        kind: ProviderKind,
    ) -> Result<(), DomainError> {
        let wants_search = chorus_catalog::named_tools(&self.allowed_tools)
            .iter()
            .any(|t| t.name == "web.search");
        if wants_search && !kind.has_web_search() {
            return Err(DomainError::invalid(
                "allowed_tools",
                format!(
                    "agent '{}' has web.search, which only Claude Code providers offer; provider '{provider}' is {}: drop web.search or give the agent a Claude Code provider",
                    self.name,
                    kind.label()
                ),
            ));
        }
        Ok(())
    }

    /// Checks an egress list and returns it as stored: every entry a
    /// `host:port` rule, written canonically (lower case, IPv6 in brackets),
    /// empty entries and repeats dropped, at most [`MAX_EGRESS_RULES`].
    pub fn check_egress(entries: &[String]) -> Result<Vec<String>, DomainError> {
        let mut rules: Vec<String> = Vec::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let rule = chorus_sandbox::EgressRule::parse(entry).map_err(|e| {
                DomainError::invalid(
                    "egress",
                    format!(
                        "{e}; each entry is host:port, *.domain:port or an address and port (e.g. github.com:443, *.npmjs.org:443, [2001:db8::1]:443)"
                    ),
                )
            })?;
            let rule = rule.to_string();
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        if rules.len() > MAX_EGRESS_RULES {
            return Err(DomainError::invalid(
                "egress",
                format!(
                    "{} entries, over the limit of {MAX_EGRESS_RULES}; use *.domain:port patterns",
                    rules.len()
                ),
            ));
        }
        Ok(rules)
    }

    /// The allow-list as stored: entries trimmed, empty ones and repeats dropped.
    pub fn normalize_allowed_tools(entries: &[String]) -> Vec<String> {
        let mut normalized: Vec<String> = Vec::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if !normalized.iter().any(|n| n == entry) {
                normalized.push(entry.to_owned());
            }
        }
        normalized
    }

    /// Refuses a change only user-defined agents take: internal agents are part of
    /// Chorus. `what` says what is refused, e.g. "it cannot be deleted".
    pub fn check_user_defined(&self, what: &str) -> Result<(), DomainError> {
        match self.kind {
            AgentKind::UserDefined => Ok(()),
            AgentKind::Internal => Err(DomainError::invalid(
                "agent",
                format!("'{}' is internal to Chorus: {what}", self.name),
            )),
        }
    }

    /// The tool names a run of this agent may call. Internal agents (the
    /// planner) get the always-granted tools and planner-output.
    pub fn granted_tools(&self) -> Result<Vec<String>, DomainError> {
        match self.kind {
            AgentKind::UserDefined => Self::check_allowed_tools(&self.allowed_tools),
            AgentKind::Internal => Self::expand(&[PLANNER_TOOL]),
        }
    }
}

/// The tool only Chorus's planner is granted.
pub const PLANNER_TOOL: &str = "planner-output";

/// Name of the internal planning agent.
pub const TASK_VALIDATOR: &str = "task-validator";

/// The agents a new workspace starts with: (name, kind, allowed tools, instructions).
pub fn default_agents() -> Vec<(&'static str, AgentKind, Vec<&'static str>, &'static str)> {
    const READ: [&str; 3] = ["file.read", "file.list", "file.search"];
    const EDIT: [&str; 6] = [
        "file.read",
        "file.create",
        "file.write",
        "file.patch",
        "file.list",
        "file.search",
    ];
    vec![
        (
            "researcher",
            AgentKind::UserDefined,
            [&["web.search"][..], &READ].concat(),
            "You research a topic. Break it into concrete questions, gather sources (the web and the \
             workspace's files), weigh them, and report structured findings with a citation for every \
             claim. Say what you could not establish; never invent a source.",
        ),
        (
            // Not "planner": the planner of PlanTask is the internal
            // task-validator; this one writes plans as a task's work.
            "plan-writer",
            AgentKind::UserDefined,
            EDIT.to_vec(),
            "You turn a goal into a plan: the goal, the scope and what is out of it, constraints, \
             success criteria, and ordered steps. Note every unknown and the assumption you made about it. \
             Write the plan to a file when the task asks for one.",
        ),
        (
            "writer-workflow",
            AgentKind::UserDefined,
            [&["handoff"][..], &READ].concat(),
            "You coordinate a writing workflow and never write content yourself. Hand off in order: \
             researcher when facts are needed, then writer, then editor, then fact-checker. When the editor \
             says CHANGES REQUESTED or the fact-checker says FAIL, hand back to writer with their findings, \
             then edit again. Stop after 5 rounds and report where things stand.",
        ),
        (
            "writer",
            AgentKind::UserDefined,
            EDIT.to_vec(),
            "You write or revise content in the workspace's files. Fix every MUST FIX item and every failed \
             fact check you are given, keep what already works, and end with a short self-assessment.",
        ),
        (
            "editor",
            AgentKind::UserDefined,
            READ.to_vec(),
            "You review written content for clarity, structure and correctness. Decide APPROVED or CHANGES \
             REQUESTED, and list findings as MUST FIX or SUGGESTION, each with where and why.",
        ),
        (
            "fact-checker",
            AgentKind::UserDefined,
            [&READ[..], &["web.search"]].concat(),
            "You verify every factual claim in the content against sources. Rate each problem HIGH, MEDIUM \
             or LOW; any HIGH problem means FAIL, otherwise PASS. Cite what you checked.",
        ),
        (
            TASK_VALIDATOR,
            AgentKind::Internal,
            vec![],
            "You are Chorus's planner. Read the task and decide: if it is clear, produce a plan with a \
             summary, requirements, acceptance criteria, ordered steps and the best agent of this \
             workspace to carry it out; if it is not, ask the user precise questions. Submit exactly one \
             planner-output.",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_agent_has_a_valid_name_and_allow_list_that_reaches_the_report() {
        let agents = default_agents();
        assert_eq!(agents.len(), 7);
        for (name, kind, tools, instructions) in agents {
            Name::parse("agent name", name).expect(name);
            assert!(!instructions.is_empty());
            let entries: Vec<String> = tools.iter().map(|t| (*t).to_owned()).collect();
            let granted = Agent::check_allowed_tools(&entries).expect(name);
            assert!(granted.iter().any(|t| t == "completion-report"), "{name}");
            if kind == AgentKind::UserDefined {
                // Every user agent can reach chorus-tools with at least one workspace tool.
                assert!(
                    granted
                        .iter()
                        .any(|t| t.starts_with("file.") || t == "handoff"),
                    "{name}: {granted:?}"
                );
            }
        }
    }

    #[test]
    fn only_user_defined_agents_take_user_changes() {
        let agent = |kind| Agent {
            budget: crate::domain::Budget::default(),
            name: Name::parse("agent name", TASK_VALIDATOR).expect("name"),
            kind,
            instructions: "x".into(),
            allowed_tools: vec![],
            provider: None,
            model: None,
            egress: vec![],
            approval_rules: vec![],
            created_ms: 0,
            updated_ms: 0,
        };
        assert!(
            agent(AgentKind::UserDefined)
                .check_user_defined("x")
                .is_ok()
        );
        let err = agent(AgentKind::Internal)
            .check_user_defined("it cannot be deleted")
            .expect_err("internal")
            .to_string();
        assert_eq!(
            err,
            "invalid agent: 'task-validator' is internal to Chorus: it cannot be deleted"
        );
    }

    #[test]
    fn egress_lists_are_checked_and_written_canonically() {
        let rules = Agent::check_egress(&[
            " GitHub.com:443 ".to_owned(),
            "github.com:443".to_owned(),
            String::new(),
            "*.npmjs.org:443".to_owned(),
            "[2001:DB8::1]:443".to_owned(),
        ])
        .expect("valid");
        assert_eq!(
            rules,
            ["github.com:443", "*.npmjs.org:443", "[2001:db8::1]:443"]
        );
        let err = Agent::check_egress(&["github.com".to_owned()])
            .expect_err("no port")
            .to_string();
        assert!(
            err.starts_with("invalid egress: 'github.com' has no port"),
            "{err}"
        );
        let many: Vec<String> = (0..=MAX_EGRESS_RULES)
            .map(|i| format!("h{i}.example.com:443"))
            .collect();
        assert!(Agent::check_egress(&many).is_err());
    }

    #[test]
    fn unknown_tools_in_an_allow_list_are_refused() {
        let err = Agent::check_allowed_tools(&["Read".to_owned()])
            .expect_err("unknown")
            .to_string();
        assert!(
            err.starts_with("invalid allowed_tools: unknown tool 'Read'"),
            "{err}"
        );
        assert!(
            Agent::check_allowed_tools(&["@developer".to_owned()])
                .expect("profile")
                .contains(&"git.push".to_owned())
        );
    }
}
