//! PlanTask and SubmitAnswers: the internal task-validator agent plans a task on
//! the workspace's system provider. Its run is an ordinary run; where the task
//! goes when it ends is decided by [`policy::planning::settle_planning`].

use std::fmt::Write as _;

use chorus_proto::orchestrator::v1 as pb;

use super::launch::Launch;
use super::start::{MAX_RUN_TIMEOUT, before, bounded_timeout};
use crate::domain::policy::planning;
use crate::domain::{Agent, AgentKind, Name, TASK_VALIDATOR, Task, TaskStatus};
use crate::error::ServiceError;
use crate::grpc::convert;
use crate::state::AppState;
use crate::store::NewRun;

/// Plans a pending or planned task.
pub async fn plan_task(
    state: &AppState,
    req: pb::PlanTaskRequest,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let task_id = convert::task_id("id", &req.id)?;
    let task = state.store.get_task(task_id).await?;
    if task.status == TaskStatus::AwaitingInput {
        return Err(ServiceError::Precondition(
            "the planner asked questions: answer them with SubmitAnswers, which plans the task again"
                .to_owned(),
        ));
    }
    task.status.check_transition(TaskStatus::Planning)?;
    launch_planner(state, task, req.timeout_secs, None).await
}

/// Answers the planner's questions and plans again.
pub async fn submit_answers(
    state: &AppState,
    req: pb::SubmitAnswersRequest,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let task_id = convert::task_id("id", &req.id)?;
    let task = state.store.get_task(task_id).await?;
    // Checked again in the transaction; this answers before anything is resolved.
    planning::submit_answers(&mut task.clone(), req.answers.clone())?;
    launch_planner(state, task, req.timeout_secs, Some(req.answers)).await
}

/// Resolves the planner, opens its run (with the answers, if any, and the move
/// to planning in the same transaction) and starts it.
async fn launch_planner(
    state: &AppState,
    task: Task,
    timeout_secs: u32,
    answers: Option<Vec<String>>,
) -> Result<pb::PlanTaskResponse, ServiceError> {
    let workspace = state.store.get_workspace(task.workspace_id).await?;
    let planner = Name::parse("agent", TASK_VALIDATOR)?;
    let agents = state.store.list_agents(workspace.id).await?;
    let timeout = bounded_timeout(
        timeout_secs,
        state.runner.config().run_timeout,
        MAX_RUN_TIMEOUT,
    )?;
    let launch = Launch::prepare(state, workspace, &planner, timeout).await?;
    let new = NewRun {
        task_id: task.id,
        agent: planner,
        parent: None,
        tools: launch.tools.clone(),
        handoff_prompt: None,
        token: Some(launch.token_binding()),
        drive: Some(timeout),
    };
    let (run, task, events) = state
        .store
        .open_run(new, move |task, run, _parent| {
            let mut events = match answers {
                Some(answers) => planning::submit_answers(task, answers)?,
                None => Vec::new(),
            };
            events.extend(planning::begin_planning(task, run)?);
            Ok(events)
        })
        .await?;
    launch.start(
        state,
        &run,
        planner_message(&task, &agents),
        before(&events),
    );
    Ok(pb::PlanTaskResponse {
        task: Some(convert::task(&task)),
        run: Some(convert::run(&run)),
    })
}

/// The planner's message: the task, the questions answered so far, and the
/// agents a plan may assign.
pub fn planner_message(task: &Task, agents: &[Agent]) -> String {
    let mut out = format!("Task {}: {}\n", task.id, task.description.trim());
    let questions = &task.planning.questions;
    if !questions.is_empty() {
        out.push_str("\n## Clarifying Q&A\n");
        for q in questions {
            let answer = q.answer.as_deref().unwrap_or("(no answer)");
            let _ = write!(out, "\nQ: {}\nA: {}\n", q.question.trim(), answer.trim());
        }
    }
    out.push_str("\n## Agents a plan can assign (assigned_agent)\n");
    let assignable: Vec<&Agent> = agents
        .iter()
        .filter(|a| a.kind == AgentKind::UserDefined)
        .collect();
    if assignable.is_empty() {
        out.push_str("(none yet: leave assigned_agent empty)\n");
    }
    for agent in assignable {
        let role = agent
            .instructions
            .split_inclusive(". ")
            .next()
            .unwrap_or_default()
            .trim();
        let _ = writeln!(
            out,
            "- {}: {} (tools: {})",
            agent.name,
            role,
            agent.allowed_tools.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Planning, Question, Stage, TaskId, TaskSource, WorkspaceId};

    fn agent(name: &str, kind: AgentKind, instructions: &str) -> Agent {
        Agent {
            name: Name::parse("agent", name).expect("name"),
            kind,
            instructions: instructions.to_owned(),
            allowed_tools: vec!["file.read".to_owned()],
            provider: None,
            model: None,
            egress: Vec::new(),
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn the_planner_sees_the_answers_and_the_agents_it_can_assign() {
        let task = Task {
            id: TaskId::new(),
            workspace_id: WorkspaceId::new(),
            description: "Write a story".to_owned(),
            source: TaskSource::default(),
            status: TaskStatus::Planning,
            status_reason: None,
            stage: Stage::Backlog,
            planning: Planning {
                questions: vec![
                    Question {
                        question: "How long?".to_owned(),
                        answer: Some("500 words".to_owned()),
                    },
                    Question {
                        question: "Genre?".to_owned(),
                        answer: None,
                    },
                ],
                ..Planning::default()
            },
            current_agent: None,
            created_ms: 0,
            updated_ms: 0,
            last_sequence: 0,
        };
        let agents = [
            agent(
                "writer",
                AgentKind::UserDefined,
                "You write. Then you check.",
            ),
            agent(TASK_VALIDATOR, AgentKind::Internal, "You plan."),
        ];
        let message = planner_message(&task, &agents);
        assert!(message.starts_with(&format!("Task {}: Write a story\n", task.id)));
        assert!(
            message.contains(
                "## Clarifying Q&A\n\nQ: How long?\nA: 500 words\n\nQ: Genre?\nA: (no answer)\n"
            ),
            "{message}"
        );
        assert!(
            message.contains("- writer: You write. (tools: file.read)"),
            "{message}"
        );
        assert!(!message.contains("- task-validator"), "{message}");
    }
}
