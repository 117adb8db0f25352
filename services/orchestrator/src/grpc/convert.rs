//! Domain → wire, and wire → validated domain values.

use chorus_auth::Role;
use chorus_proto::json;
use chorus_proto::orchestrator::v1 as pb;

use crate::domain::HandoffFailure;
use crate::domain::feed::Changed;
use crate::history::FeedItem;
use crate::runner::handoff::HandoffUpdate;

use crate::domain::{
    Agent, AgentKind, ApiKeyRecord, DomainError, Event, Name, Planning, Provider, ProviderKind,
    Question, Run, RunId, StageExt, Task, TaskId, TaskSource, ToolTransport, Workspace,
    WorkspaceId,
};

/// `w` on the wire, with what will not work in it (see
/// [`crate::core::workspaces::warnings`]).
pub fn workspace(w: &Workspace, warnings: Vec<String>) -> pb::Workspace {
    pb::Workspace {
        warnings,
        id: w.id.to_string(),
        name: w.name.to_string(),
        root: w.root.display().to_string(),
        system_provider: w
            .system_provider
            .as_ref()
            .map(Name::to_string)
            .unwrap_or_default(),
        created_ms: w.created_ms,
        updated_ms: w.updated_ms,
        limits: Some(workspace_limits(&w.limits)),
        changes: Some(super::orchestrator::branches::workspace_changes(&w.changes)),
        repository: chorus_tool_exec::worktree::Repository::is_repository(&w.root),
        approval_rules: super::orchestrator::approvals::rules(&w.approval_rules),
    }
}

pub fn workspace_limits(l: &crate::domain::WorkspaceLimits) -> pb::WorkspaceLimits {
    pb::WorkspaceLimits {
        task_budget: Some(budget(l.task_budget)),
        daily_cost_usd: l.daily_cost_pico_usd.map(crate::domain::usd),
        monthly_cost_usd: l.monthly_cost_pico_usd.map(crate::domain::usd),
    }
}

/// A workspace's limits from the wire; a cost that is not a number, not
/// more than 0 or more than Chorus can keep is refused.
pub fn workspace_limits_from(
    l: pb::WorkspaceLimits,
) -> Result<crate::domain::WorkspaceLimits, DomainError> {
    Ok(crate::domain::WorkspaceLimits {
        task_budget: budget_from(l.task_budget)?,
        daily_cost_pico_usd: cost_from("daily_cost_usd", l.daily_cost_usd)?,
        monthly_cost_pico_usd: cost_from("monthly_cost_usd", l.monthly_cost_usd)?,
    })
}

/// A cost limit from the wire (US dollars), checked.
fn cost_from(field: &'static str, dollars: Option<f64>) -> Result<Option<u64>, DomainError> {
    dollars
        .map(|d| crate::domain::cost_limit(field, d))
        .transpose()
}

pub fn provider(workspace_id: &str, p: &Provider) -> pb::Provider {
    pb::Provider {
        workspace_id: workspace_id.to_owned(),
        name: p.name.to_string(),
        kind: provider_kind(p.kind) as i32,
        base_url: p.base_url.clone().unwrap_or_default(),
        model: p.model.clone().unwrap_or_default(),
        api_key_set: p.api_key_set(),
        api_key_source: p
            .api_key_source
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        created_ms: p.created_ms,
        updated_ms: p.updated_ms,
        tool_transport: tool_transport(p.tool_transport) as i32,
    }
}

pub fn provider_kind(kind: ProviderKind) -> pb::ProviderKind {
    match kind {
        ProviderKind::ClaudeCode => pb::ProviderKind::ClaudeCode,
        ProviderKind::Opencode => pb::ProviderKind::Opencode,
        ProviderKind::OpenaiCompatible => pb::ProviderKind::OpenaiCompatible,
        ProviderKind::A2a => pb::ProviderKind::A2a,
    }
}

/// The wire enum as a domain kind; UNSPECIFIED and unknown numbers are refused.
pub fn tool_transport(transport: ToolTransport) -> pb::ToolTransport {
    match transport {
        ToolTransport::Mcp => pb::ToolTransport::Mcp,
        ToolTransport::Shell => pb::ToolTransport::Shell,
    }
}

/// A request's tool transport; None for UNSPECIFIED.
pub fn tool_transport_from(value: i32) -> Result<Option<ToolTransport>, DomainError> {
    match pb::ToolTransport::try_from(value) {
        Ok(pb::ToolTransport::Unspecified) => Ok(None),
        Ok(pb::ToolTransport::Mcp) => Ok(Some(ToolTransport::Mcp)),
        Ok(pb::ToolTransport::Shell) => Ok(Some(ToolTransport::Shell)),
        Err(_) => Err(DomainError::invalid(
            "tool_transport",
            format!("unknown value {value}; choose TOOL_TRANSPORT_MCP or TOOL_TRANSPORT_SHELL"),
        )),
    }
}

pub fn provider_kind_from(value: i32) -> Result<ProviderKind, DomainError> {
    match pb::ProviderKind::try_from(value) {
        Ok(pb::ProviderKind::ClaudeCode) => Ok(ProviderKind::ClaudeCode),
        Ok(pb::ProviderKind::Opencode) => Ok(ProviderKind::Opencode),
        Ok(pb::ProviderKind::OpenaiCompatible) => Ok(ProviderKind::OpenaiCompatible),
        Ok(pb::ProviderKind::A2a) => Ok(ProviderKind::A2a),
        _ => Err(DomainError::invalid(
            "kind",
            "choose PROVIDER_KIND_CLAUDE_CODE, PROVIDER_KIND_OPENCODE, PROVIDER_KIND_OPENAI_COMPATIBLE or PROVIDER_KIND_A2A",
        )),
    }
}

pub fn role(role: Role) -> pb::Role {
    match role {
        Role::Admin => pb::Role::Admin,
        Role::Operator => pb::Role::Operator,
        Role::Viewer => pb::Role::Viewer,
        Role::ToolExec => pb::Role::ToolExec,
    }
}

/// The wire enum as a role; UNSPECIFIED and unknown numbers are refused.
pub fn role_from(value: i32) -> Result<Role, DomainError> {
    match pb::Role::try_from(value) {
        Ok(pb::Role::Admin) => Ok(Role::Admin),
        Ok(pb::Role::Operator) => Ok(Role::Operator),
        Ok(pb::Role::Viewer) => Ok(Role::Viewer),
        Ok(pb::Role::ToolExec) => Ok(Role::ToolExec),
        _ => Err(DomainError::invalid(
            "role",
            "choose ROLE_ADMIN, ROLE_OPERATOR, ROLE_VIEWER or ROLE_TOOL_EXEC",
        )),
    }
}

pub fn api_key(key: &ApiKeyRecord) -> pb::ApiKey {
    pb::ApiKey {
        id: key.id.clone(),
        name: key.name.to_string(),
        role: role(key.role).into(),
        created_ms: key.created_ms,
        revoked_ms: key.revoked_ms.unwrap_or(0),
    }
}

pub fn agent(workspace_id: &str, a: &Agent) -> pb::Agent {
    pb::Agent {
        workspace_id: workspace_id.to_owned(),
        name: a.name.to_string(),
        kind: match a.kind {
            AgentKind::UserDefined => pb::AgentKind::UserDefined,
            AgentKind::Internal => pb::AgentKind::Internal,
        } as i32,
        instructions: a.instructions.clone(),
        allowed_tools: a.allowed_tools.clone(),
        granted_tools: a.granted_tools().unwrap_or_default(),
        provider: a.provider.as_ref().map(Name::to_string).unwrap_or_default(),
        model: a.model.clone().unwrap_or_default(),
        created_ms: a.created_ms,
        updated_ms: a.updated_ms,
        egress: a.egress.clone(),
        budget: Some(budget(a.budget)),
        approval_rules: super::orchestrator::approvals::rules(&a.approval_rules),
    }
}

pub fn task(t: &Task) -> pb::Task {
    pb::Task {
        id: t.id.to_string(),
        workspace_id: t.workspace_id.to_string(),
        description: t.description.clone(),
        source: Some(pb::TaskSource {
            kind: t.source.kind.clone(),
            user_id: t.source.user_id.clone().unwrap_or_default(),
            conversation_id: t.source.conversation_id.clone().unwrap_or_default(),
        }),
        status: t.status.as_str().to_owned(),
        status_reason: t.status_reason.clone().unwrap_or_default(),
        stage: t.stage.as_str().to_owned(),
        planning: Some(planning(&t.planning)),
        current_agent: t
            .current_agent
            .as_ref()
            .map(Name::to_string)
            .unwrap_or_default(),
        created_ms: t.created_ms,
        updated_ms: t.updated_ms,
        last_sequence: t.last_sequence,
        usage: Some(usage(t.usage)),
        budget: Some(pb::TaskBudget {
            own: Some(budget(t.budget.own)),
            limits: Some(budget(t.budget.limits)),
            tool_calls: t.budget.tool_calls,
        }),
        auto_start: t.auto_start.as_ref().map(|a| pb::AutoStart {
            agent: a.agent.as_ref().map(Name::to_string).unwrap_or_default(),
        }),
        branch: t.branch.as_ref().map(super::orchestrator::branches::branch),
        branch_note: t.branch_note.clone().unwrap_or_default(),
        waiting_approvals: super::orchestrator::approvals::waiting(t),
        task_rules: super::orchestrator::approvals::rules(&t.approvals.task_rules),
    }
}

pub fn planning(p: &Planning) -> pb::Planning {
    pb::Planning {
        summary: p.summary.clone().unwrap_or_default(),
        requirements: p.requirements.clone(),
        acceptance_criteria: p.acceptance_criteria.clone(),
        plan: p.plan.clone(),
        questions: p
            .questions
            .iter()
            .map(|q| pb::Question {
                question: q.question.clone(),
                answer: q.answer.clone(),
                round: q.round,
            })
            .collect(),
        assigned_agent: p
            .assigned_agent
            .as_ref()
            .map(Name::to_string)
            .unwrap_or_default(),
    }
}

/// Wire planning fields as domain planning: the assigned agent must be a valid name.
pub fn planning_from(p: pb::Planning) -> Result<Planning, DomainError> {
    Ok(Planning {
        summary: non_empty(p.summary),
        requirements: p.requirements,
        acceptance_criteria: p.acceptance_criteria,
        plan: p.plan,
        questions: p
            .questions
            .into_iter()
            .map(|q| Question {
                question: q.question,
                answer: q.answer,
                round: q.round.max(1),
            })
            .collect(),
        assigned_agent: non_empty(p.assigned_agent)
            .map(|a| Name::parse("assigned_agent", &a))
            .transpose()?,
    })
}

pub fn source_from(s: Option<pb::TaskSource>) -> TaskSource {
    let s = s.unwrap_or_default();
    TaskSource {
        kind: non_empty(s.kind).unwrap_or_else(|| "grpc".to_owned()),
        user_id: non_empty(s.user_id),
        conversation_id: non_empty(s.conversation_id),
        request_id: None,
    }
}

pub fn feed_item(item: &FeedItem) -> pb::TaskChange {
    use pb::task_change::Change;
    match item {
        FeedItem::CaughtUp(cursor) => pb::TaskChange {
            cursor: cursor.to_string(),
            change: Some(Change::CaughtUp(pb::CaughtUp {})),
            ..pb::TaskChange::default()
        },
        FeedItem::Change(c) => pb::TaskChange {
            cursor: c.cursor.to_string(),
            workspace_id: c.workspace_id.to_string(),
            task_id: c.task_id.to_string(),
            change: Some(match &c.what {
                Changed::Event(e) => Change::Event(event(e)),
                Changed::Deleted { sequence } => Change::Deleted(pb::TaskDeleted {
                    sequence: *sequence,
                }),
            }),
        },
    }
}

pub fn event(e: &Event) -> pb::TaskEvent {
    pb::TaskEvent {
        task_id: e.task_id.to_string(),
        sequence: e.sequence,
        kind: e.kind.as_str().to_owned(),
        data: match &e.data {
            serde_json::Value::Object(map) => Some(json::to_struct(map.clone())),
            other => Some(json::to_struct(serde_json::Map::from_iter([(
                "value".to_owned(),
                other.clone(),
            )]))),
        },
        at_ms: e.at_ms,
        needs_you: e.needs_you().map(|n| pb::NeedsYou {
            status: n.status.to_owned(),
            reason: n.reason.unwrap_or_default(),
            action: n.action,
            approval_id: n.approval_id.unwrap_or_default(),
        }),
    }
}

pub fn run(r: &Run) -> pb::Run {
    pb::Run {
        id: r.id.to_string(),
        task_id: r.task_id.to_string(),
        agent: r.agent.to_string(),
        parent_run_id: r.parent.map(|p| p.to_string()).unwrap_or_default(),
        state: r.state.as_str().to_owned(),
        tools: r.tools.clone(),
        started_ms: r.started_ms,
        finished_ms: r.finished_ms.unwrap_or_default(),
        end_reason: r.end_reason.clone().unwrap_or_default(),
        completion_report: r.completion_report.as_ref().and_then(
            |report| match serde_json::to_value(report) {
                Ok(serde_json::Value::Object(map)) => Some(json::to_struct(map)),
                _ => None,
            },
        ),
        session_id: r.session_id.clone().unwrap_or_default(),
        usage: Some(usage(r.usage)),
        handoff_index: r.handoff_index.unwrap_or_default(),
        prompt: r.prompt.clone().unwrap_or_default(),
        output: r.output.clone().unwrap_or_default(),
        replica: r.replica.clone().unwrap_or_default(),
        epoch: r.epoch,
        subtree_usage: None,
    }
}

/// A run with its subtree's usage (the run's own and every handoff's below it).
pub fn run_in_tree(r: &Run, subtree: crate::domain::Usage) -> pb::Run {
    pb::Run {
        subtree_usage: Some(usage(subtree)),
        ..run(r)
    }
}

pub fn budget(b: crate::domain::Budget) -> pb::Budget {
    pb::Budget {
        cost_usd: b.cost_pico_usd.map(crate::domain::usd),
        tokens: b.tokens,
        tool_calls: b.tool_calls,
        wall_secs: b.wall_secs,
    }
}

/// A budget from the wire: dollars to pico-dollars; a cost that is not a
/// number, not more than 0 or more than Chorus can keep is refused.
pub fn budget_from(b: Option<pb::Budget>) -> Result<crate::domain::Budget, DomainError> {
    let b = b.unwrap_or_default();
    Ok(crate::domain::Budget {
        cost_pico_usd: cost_from("cost_usd", b.cost_usd)?,
        tokens: b.tokens,
        tool_calls: b.tool_calls,
        wall_secs: b.wall_secs,
    })
}

pub fn usage(u: crate::domain::Usage) -> pb::Usage {
    let cost_usd = crate::domain::usd(u.cost());
    pb::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cost_usd,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
        model_calls: u.model_calls,
        unpriced_calls: u.unpriced_calls,
        estimated_calls: u.estimated_calls,
    }
}

/// A required id field: not empty, a UUID. The error names the request field.
fn id<T>(
    field: &'static str,
    value: &str,
    parse: fn(&str) -> Result<T, DomainError>,
) -> Result<T, DomainError> {
    if value.is_empty() {
        return Err(DomainError::invalid(field, "must not be empty"));
    }
    parse(value).map_err(|_| DomainError::invalid(field, format!("'{value}' is not a UUID")))
}

pub fn workspace_id(field: &'static str, value: &str) -> Result<WorkspaceId, DomainError> {
    id(field, value, WorkspaceId::parse)
}

pub fn task_id(field: &'static str, value: &str) -> Result<TaskId, DomainError> {
    id(field, value, TaskId::parse)
}

/// The task a request names as `task_id` (the spelling every request uses)
/// or `id` (the older one, still accepted): one of them, or both the same.
pub fn task_of(id: &str, task_id: &str) -> Result<TaskId, DomainError> {
    match (id.trim(), task_id.trim()) {
        ("", _) => self::task_id("task_id", task_id),
        (_, "") => self::task_id("id", id),
        (a, b) if a == b => self::task_id("task_id", task_id),
        _ => Err(DomainError::invalid(
            "task_id",
            format!(
                "the request names two tasks (id '{id}', task_id '{task_id}'); give one, as task_id"
            ),
        )),
    }
}

pub fn run_id(field: &'static str, value: &str) -> Result<RunId, DomainError> {
    id(field, value, RunId::parse)
}

/// An optional name field: "" is unset, anything else must be a valid name.
pub fn optional_name(field: &'static str, value: String) -> Result<Option<Name>, DomainError> {
    non_empty(value).map(|v| Name::parse(field, &v)).transpose()
}

/// Proto3 strings are "" when unset; the domain says None.
pub fn non_empty(s: String) -> Option<String> {
    if s.trim().is_empty() { None } else { Some(s) }
}

/// A handoff's failure on the wire.
pub fn handoff_failure(failure: HandoffFailure) -> pb::HandoffFailure {
    match failure {
        HandoffFailure::AgentFailed => pb::HandoffFailure::AgentFailed,
        HandoffFailure::TimedOut => pb::HandoffFailure::TimedOut,
        HandoffFailure::Canceled => pb::HandoffFailure::Canceled,
        HandoffFailure::TargetUnknown => pb::HandoffFailure::TargetUnknown,
        HandoffFailure::Internal => pb::HandoffFailure::Internal,
        HandoffFailure::Interrupted => pb::HandoffFailure::Interrupted,
    }
}

/// What a handoff's caller hears, on the wire.
pub fn handoff_event(update: HandoffUpdate) -> pb::HandoffEvent {
    use pb::handoff_event::Event;
    let event = match update {
        HandoffUpdate::Started {
            run,
            agent,
            handoff_index,
            parent,
            sequence,
        } => Event::Started(pb::HandoffStarted {
            run_id: run.to_string(),
            agent,
            handoff_index,
            parent_run_id: parent,
            sequence,
        }),
        HandoffUpdate::Progress {
            kind,
            data,
            sequence,
        } => Event::Progress(pb::HandoffProgress {
            kind,
            data: data.map(json::to_struct),
            sequence,
        }),
        HandoffUpdate::Completed {
            run,
            agent,
            output,
            report,
            usage: spent,
        } => Event::Completed(pb::HandoffCompleted {
            run_id: run.to_string(),
            agent,
            output,
            completion_report: report.map(json::to_struct),
            usage: Some(usage(spent)),
        }),
        HandoffUpdate::Failed {
            run,
            agent,
            failure,
            reason,
            usage: spent,
        } => Event::Failed(pb::HandoffFailed {
            run_id: run.map(|r| r.to_string()).unwrap_or_default(),
            agent,
            failure: handoff_failure(failure) as i32,
            reason,
            usage: spent.map(usage),
        }),
    };
    pb::HandoffEvent { event: Some(event) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_provider_kind_is_refused_with_the_choices() {
        let err = provider_kind_from(0).expect_err("unspecified").to_string();
        assert!(err.contains("PROVIDER_KIND_CLAUDE_CODE"), "{err}");
        assert_eq!(provider_kind_from(3), Ok(ProviderKind::OpenaiCompatible));
        assert!(provider_kind_from(99).is_err());
    }

    #[test]
    fn planning_round_trips_and_checks_the_assigned_agent() {
        let wire = pb::Planning {
            summary: "s".into(),
            requirements: vec!["r".into()],
            acceptance_criteria: vec!["a".into()],
            plan: vec!["p".into()],
            questions: vec![pb::Question {
                question: "q?".into(),
                answer: None,
                round: 1,
            }],
            assigned_agent: "writer".into(),
        };
        let domain = planning_from(wire.clone()).expect("valid");
        assert_eq!(planning(&domain), wire);
        let bad = pb::Planning {
            assigned_agent: "Not A Name".into(),
            ..wire
        };
        assert!(
            planning_from(bad)
                .expect_err("bad name")
                .to_string()
                .contains("assigned_agent")
        );
    }

    #[test]
    fn ids_name_the_request_field() {
        let err = task_id("task_id", "").expect_err("empty").to_string();
        assert_eq!(err, "invalid task_id: must not be empty");
        let err = run_id("id", "nope").expect_err("bad").to_string();
        assert_eq!(err, "invalid id: 'nope' is not a UUID");
        let ws = WorkspaceId::new();
        assert_eq!(workspace_id("workspace_id", &ws.to_string()), Ok(ws));
        assert_eq!(optional_name("provider", String::new()), Ok(None));
        assert!(optional_name("provider", "Bad".into()).is_err());
    }

    #[test]
    fn an_empty_source_means_grpc() {
        assert_eq!(source_from(None).kind, "grpc");
    }
}
