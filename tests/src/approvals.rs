//! Approval rules and the calls that wait on them, as the tests set, watch
//! and answer them through the API.

use std::cell::Cell;

use chorus_proto::orchestrator::v1 as pb;

use crate::agents::{Client, wait_for};

/// A rule: `decision` for `tool`, on paths matching `path` when not empty,
/// waiting `deadline_seconds` when an ask says (0: the default).
pub fn rule(tool: &str, decision: &str, path: &str, deadline_seconds: u32) -> pb::ApprovalRule {
    pb::ApprovalRule {
        tool: tool.into(),
        decision: decision.into(),
        path: path.into(),
        deadline_seconds,
        ..Default::default()
    }
}

/// Replaces the approval rules of `agent` in the workspace `workspace_id`.
pub async fn set_rules(
    client: &mut Client,
    workspace_id: &str,
    agent: &str,
    rules: Vec<pb::ApprovalRule>,
) {
    client
        .update_agent(pb::UpdateAgentRequest {
            workspace_id: workspace_id.to_owned(),
            name: agent.into(),
            approval_rules: rules,
            set_approval_rules: true,
            ..Default::default()
        })
        .await
        .expect("set the agent's approval rules");
}

/// The `n`th (from 1) `approval_requested` event of the task, once recorded.
pub async fn asked(client: &mut Client, task: &str, n: usize) -> pb::TaskEvent {
    let seen = Cell::new(0);
    let events = wait_for(client, task, |e| {
        if e.kind == "approval_requested" {
            seen.set(seen.get() + 1);
        }
        seen.get() == n && e.kind == "approval_requested"
    })
    .await;
    events.last().cloned().expect("the request")
}

/// The approval an `approval_requested` event asks for.
pub fn approval_id(event: &pb::TaskEvent) -> String {
    event
        .needs_you
        .as_ref()
        .map(|n| n.approval_id.clone())
        .expect("an approval request needs a person")
}

/// Answers approval `approval` of `task`.
pub async fn answer(
    client: &mut Client,
    task: &str,
    approval: &str,
    approve: bool,
    for_task: bool,
    reason: &str,
) -> Result<pb::Approval, tonic::Status> {
    client
        .answer_approval(pb::AnswerApprovalRequest {
            task_id: task.into(),
            approval_id: approval.into(),
            approve,
            for_task,
            reason: reason.into(),
        })
        .await
        .map(tonic::Response::into_inner)
}
