//! The planner's message (PlanTask and SubmitAnswers are
//! [`crate::core::tasks::plan`] and [`crate::core::tasks::answer`]).

use std::fmt::Write as _;

use crate::domain::{Agent, AgentKind, Task};

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
    use crate::domain::{
        Name, Planning, Question, Stage, TASK_VALIDATOR, TaskId, TaskSource, TaskStatus,
        WorkspaceId,
    };

    fn agent(name: &str, kind: AgentKind, instructions: &str) -> Agent {
        Agent {
            budget: crate::domain::Budget::default(),
            name: Name::parse("agent", name).expect("name"),
            kind,
            instructions: instructions.to_owned(),
            allowed_tools: vec!["file.read".to_owned()],
            provider: None,
            model: None,
            egress: Vec::new(),
            approval_rules: Vec::new(),
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
                        round: 1,
                    },
                    Question {
                        question: "Genre?".to_owned(),
                        answer: None,
                        round: 1,
                    },
                ],
                ..Planning::default()
            },
            current_agent: None,
            created_ms: 0,
            updated_ms: 0,
            last_sequence: 0,
            usage: crate::domain::Usage::default(),
            budget: crate::domain::TaskBudget::default(),
            auto_start: None,
            branch: None,
            branch_note: None,
            approvals: Default::default(),
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
