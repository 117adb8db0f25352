//! Planning rules: the planner (the internal task-validator agent) runs while the
//! task is planning; its planner output, read when its run ends, decides where
//! the task goes: a plan → planned, questions → awaiting_input, an error or no
//! output at all → failed. Answers to the questions send it back to planning.

use chorus_catalog::args::PlannerOutput;
use serde_json::json;

use super::{Events, change_status};
use crate::domain::{DomainError, EventKind, Name, Planning, Question, Run, Task, TaskStatus};

/// Starts planning with the planner's `run`: the task goes planning and
/// `planning_started` is recorded.
pub fn begin_planning(task: &mut Task, run: &Run) -> Result<Events, DomainError> {
    let status = change_status(task, TaskStatus::Planning, None)?;
    Ok(vec![
        status,
        (
            EventKind::PlanningStarted,
            json!({ "run_id": run.id.to_string(), "agent": run.agent.as_str() }),
        ),
    ])
}

/// Records the user's answers to the planner's latest questions, in order (an
/// empty answer leaves its question unanswered), and returns `answers_submitted`.
/// Only while the task is awaiting input; earlier rounds keep their answers.
pub fn submit_answers(task: &mut Task, answers: Vec<String>) -> Result<Events, DomainError> {
    if task.status != TaskStatus::AwaitingInput {
        return Err(DomainError::Transition(format!(
            "answers can be submitted only while the task is awaiting_input; it is {}",
            task.status
        )));
    }
    let round = task.planning.latest_round();
    let mut questions: Vec<&mut Question> = task.planning.open_questions().collect();
    if answers.len() > questions.len() {
        return Err(DomainError::invalid(
            "answers",
            format!(
                "{} answers for {} questions; give at most one per question of the latest round, in order",
                answers.len(),
                questions.len()
            ),
        ));
    }
    for (question, answer) in questions.iter_mut().zip(answers) {
        question.answer = Some(answer).filter(|a| !a.trim().is_empty());
    }
    let pairs: Vec<_> = questions
        .iter()
        .map(|q| json!({ "question": q.question, "answer": q.answer }))
        .collect();
    Ok(vec![(
        EventKind::AnswersSubmitted,
        json!({ "round": round, "answers": pairs }),
    )])
}

/// Where the planner's task goes when its run ends: decided by the planner
/// output when there is one (even if the run then failed), else the task fails
/// with `no_output_reason`. Nothing happens unless the task is still planning
/// (a cancel, for one, has moved it already).
pub fn settle_planning(
    run: &Run,
    task: &mut Task,
    no_output_reason: &str,
) -> Result<Events, DomainError> {
    if task.status != TaskStatus::Planning || run.parent.is_some() {
        return Ok(Events::new());
    }
    let run_id = run.id.to_string();
    let events = match run.planner_output.clone() {
        Some(PlannerOutput::Plan {
            summary,
            requirements,
            acceptance_criteria,
            plan,
            assigned_agent,
        }) => {
            let planning = Planning {
                summary: Some(summary),
                requirements,
                acceptance_criteria,
                plan,
                questions: Vec::new(),
                assigned_agent: None,
            };
            take_plan(task, &run_id, planning, assigned_agent)?
        }
        Some(PlannerOutput::Questions { questions }) => {
            task.planning.ask(&questions);
            let round = task.planning.latest_round();
            vec![
                (
                    EventKind::PlanningQuestionsReturned,
                    json!({ "run_id": run_id, "round": round, "questions": questions }),
                ),
                change_status(task, TaskStatus::AwaitingInput, None)?,
            ]
        }
        Some(PlannerOutput::Error { error }) => vec![
            (
                EventKind::PlanningFailed,
                json!({ "run_id": run_id, "reason": error }),
            ),
            change_status(task, TaskStatus::Failed, Some(error))?,
        ],
        None => vec![
            (
                EventKind::PlanningFailed,
                json!({ "run_id": run_id, "reason": no_output_reason }),
            ),
            change_status(task, TaskStatus::Failed, Some(no_output_reason.to_owned()))?,
        ],
    };
    Ok(events)
}

/// The planner's plan becomes the task's (the questions asked before it
/// kept, answered or not: an unanswered one is part of the record too), and
/// the task is planned.
fn take_plan(
    task: &mut Task,
    run_id: &str,
    plan: Planning,
    assigned_agent: Option<String>,
) -> Result<Events, DomainError> {
    let assigned_agent = assigned_agent
        .filter(|a| !a.trim().is_empty())
        .map(|a| Name::parse("assigned agent", &a))
        .transpose()?;
    let asked = std::mem::take(&mut task.planning.questions);
    let summary = plan.summary.clone();
    task.planning = Planning {
        questions: asked,
        assigned_agent: assigned_agent.clone(),
        ..plan
    };
    Ok(vec![
        (
            EventKind::PlanningCompleted,
            json!({
                "run_id": run_id,
                "summary": summary,
                "steps": task.planning.plan.len(),
                "assigned_agent": assigned_agent.as_ref().map(Name::as_str),
            }),
        ),
        change_status(task, TaskStatus::Planned, None)?,
    ])
}
