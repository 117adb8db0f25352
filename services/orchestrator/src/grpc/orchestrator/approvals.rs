//! Approvals on the wire: approval rules in and out, a task's approvals
//! out, and AnswerApproval.

use chorus_proto::json;
use chorus_proto::orchestrator::v1 as pb;

use crate::core::approvals as core;
use crate::domain::approval::{Approval, Decision, Rule};
use crate::domain::{DomainError, Task};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;

/// Rules from the wire, each checked (its field named in the error).
pub(crate) fn rules_from(rules: Vec<pb::ApprovalRule>) -> Result<Vec<Rule>, ServiceError> {
    let rules: Vec<Rule> = rules
        .into_iter()
        .map(|r| {
            Ok::<_, DomainError>(Rule {
                tool: r.tool.trim().to_owned(),
                decision: Decision::parse(&r.decision)?,
                command: convert::non_empty(r.command),
                path: convert::non_empty(r.path),
                remote: convert::non_empty(r.remote),
                host: convert::non_empty(r.host),
                deadline_s: (r.deadline_seconds > 0).then_some(r.deadline_seconds),
            })
        })
        .collect::<Result<_, _>>()?;
    crate::domain::approval::check_rules(&rules)?;
    Ok(rules)
}

pub(crate) fn rule(r: &Rule) -> pb::ApprovalRule {
    pb::ApprovalRule {
        tool: r.tool.clone(),
        decision: r.decision.as_str().to_owned(),
        command: r.command.clone().unwrap_or_default(),
        path: r.path.clone().unwrap_or_default(),
        remote: r.remote.clone().unwrap_or_default(),
        host: r.host.clone().unwrap_or_default(),
        deadline_seconds: r.deadline_s.unwrap_or(0),
    }
}

pub(crate) fn rules(rules: &[Rule]) -> Vec<pb::ApprovalRule> {
    rules.iter().map(rule).collect()
}

pub(crate) fn approval(task: &Task, a: &Approval) -> pb::Approval {
    let answer = a.answer.as_ref();
    pb::Approval {
        id: a.id.clone(),
        task_id: task.id.to_string(),
        run_id: a.run_id.clone(),
        agent: a.agent.clone(),
        tool: a.tool.clone(),
        arguments: match &a.arguments {
            serde_json::Value::Object(map) => Some(json::to_struct(map.clone())),
            _ => None,
        },
        rule: a.rule.to_string(),
        rule_agent: a.rule_agent.clone(),
        requested_ms: a.requested_ms,
        deadline_ms: a.deadline_ms,
        state: answer.map_or("pending", |x| x.outcome.as_str()).to_owned(),
        answered_by: answer.map(|x| x.by.clone()).unwrap_or_default(),
        answered_ms: answer.map_or(0, |x| x.at_ms),
        reason: answer.and_then(|x| x.reason.clone()).unwrap_or_default(),
    }
}

/// The calls of `task` that wait for approval now.
pub(crate) fn waiting(task: &Task) -> Vec<pb::Approval> {
    task.approvals
        .pending()
        .map(|a| approval(task, a))
        .collect()
}

pub(super) async fn answer(
    state: &AppState,
    req: pb::AnswerApprovalRequest,
    by: String,
) -> Result<pb::Approval, ServiceError> {
    let task = convert::task_id("task_id", &req.task_id)?;
    let answered = core::answer(
        state,
        core::Answering {
            task,
            approval_id: req.approval_id,
            approve: req.approve,
            for_task: req.for_task,
            reason: convert::non_empty(req.reason),
            by,
        },
    )
    .await?;
    let task = state.store.get_task(task).await?;
    Ok(approval(&task, &answered))
}
