//! The Bonsai-style stage of a task and its transitions.

use super::DomainError;

pub use chorus_catalog::args::Stage;

/// Rules of [`Stage`]: forward one step, or back where the workflow allows it.
pub trait StageExt: Sized {
    const ALL: [Stage; 6];
    fn as_str(&self) -> &'static str;
    fn parse(s: &str) -> Result<Stage, DomainError>;
    fn successors(self) -> &'static [Stage];
    fn check_transition(self, to: Stage) -> Result<(), DomainError>;
}

impl StageExt for Stage {
    const ALL: [Stage; 6] = [
        Stage::Backlog,
        Stage::Research,
        Stage::PlanApproval,
        Stage::InProgress,
        Stage::Verification,
        Stage::Done,
    ];

    fn as_str(&self) -> &'static str {
        match self {
            Stage::Backlog => "backlog",
            Stage::Research => "research",
            Stage::PlanApproval => "plan_approval",
            Stage::InProgress => "in_progress",
            Stage::Verification => "verification",
            Stage::Done => "done",
        }
    }

    fn parse(s: &str) -> Result<Stage, DomainError> {
        Self::ALL
            .into_iter()
            .find(|stage| stage.as_str() == s)
            .ok_or_else(|| {
                let known = Self::ALL.map(|stage| stage.as_str()).join(", ");
                DomainError::invalid("stage", format!("unknown stage '{s}'; one of: {known}"))
            })
    }

    fn successors(self) -> &'static [Stage] {
        match self {
            Stage::Backlog => &[Stage::Research],
            Stage::Research => &[Stage::PlanApproval, Stage::Backlog],
            Stage::PlanApproval => &[Stage::InProgress, Stage::Research],
            Stage::InProgress => &[Stage::Verification, Stage::Research],
            Stage::Verification => &[Stage::Done, Stage::InProgress],
            Stage::Done => &[],
        }
    }

    fn check_transition(self, to: Stage) -> Result<(), DomainError> {
        if self.successors().contains(&to) {
            return Ok(());
        }
        let from = self.as_str();
        let allowed: Vec<&str> = self.successors().iter().map(|s| s.as_str()).collect();
        Err(DomainError::Transition(if allowed.is_empty() {
            format!(
                "cannot move a task from stage {from} to {}: done is final",
                to.as_str()
            )
        } else {
            format!(
                "cannot move a task from stage {from} to {}; from {from} it can move to: {}",
                to.as_str(),
                allowed.join(", ")
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_one_step_or_back_where_allowed() {
        let allowed: Vec<(&str, &str)> = Stage::ALL
            .into_iter()
            .flat_map(|from| Stage::ALL.into_iter().map(move |to| (from, to)))
            .filter(|(from, to)| from.check_transition(*to).is_ok())
            .map(|(from, to)| (from.as_str(), to.as_str()))
            .collect();
        assert_eq!(
            allowed,
            [
                ("backlog", "research"),
                ("research", "backlog"),
                ("research", "plan_approval"),
                ("plan_approval", "research"),
                ("plan_approval", "in_progress"),
                ("in_progress", "research"),
                ("in_progress", "verification"),
                ("verification", "in_progress"),
                ("verification", "done"),
            ]
        );
    }

    #[test]
    fn skipping_a_stage_is_refused_with_the_choices() {
        let err = Stage::Backlog
            .check_transition(Stage::Done)
            .expect_err("refused")
            .to_string();
        assert_eq!(
            err,
            "cannot move a task from stage backlog to done; from backlog it can move to: research"
        );
        assert!(
            Stage::Done
                .check_transition(Stage::Verification)
                .expect_err("final")
                .to_string()
                .contains("done is final")
        );
    }

    #[test]
    fn stage_names_round_trip() {
        for stage in Stage::ALL {
            assert_eq!(Stage::parse(stage.as_str()), Ok(stage));
            assert_eq!(serde_json::to_value(stage).expect("json"), stage.as_str());
        }
        assert!(Stage::parse("review").is_err());
    }
}
