//! A task's approvals: the calls that wait for a person (or were answered,
//! kept a while so that a call asked again finds its answer), and the ask
//! rules approved for the rest of the task. They live on the task and change
//! in its transactions, with the events that record them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Decision, Rule};
use crate::domain::policy::Events;
use crate::domain::{DomainError, EventKind, RunId};

/// Most answered approvals a task keeps (the oldest go first); their record
/// stays in the history.
pub const MAX_KEPT_ANSWERS: usize = 64;
/// Most calls of one task that may wait at once.
const MAX_WAITING: usize = 256;

/// How an approval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalOutcome {
    /// Approved for this call.
    Approved,
    /// Approved, and its rule for the rest of the task.
    ApprovedForTask,
    Denied,
    /// Nobody answered before the deadline: denied.
    Expired,
    /// Its run ended while it waited.
    Canceled,
}

impl ApprovalOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::ApprovedForTask => "approved_for_task",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Canceled => "canceled",
        }
    }

    pub fn runs(self) -> bool {
        matches!(self, Self::Approved | Self::ApprovedForTask)
    }
}

/// Who answered, when, how and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub outcome: ApprovalOutcome,
    /// The person (a principal's name), or `chorus` for a deadline or an end.
    pub by: String,
    pub at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One call that asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    /// The run whose call it is.
    pub run_id: String,
    pub agent: String,
    /// tool-exec's key for the call: asking again with it finds this.
    pub call_key: String,
    pub tool: String,
    /// As history keeps them.
    pub arguments: Value,
    /// The rule that asked, and whose it is.
    pub rule: Rule,
    pub rule_agent: String,
    pub requested_ms: i64,
    pub deadline_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

impl Approval {
    pub fn is_pending(&self) -> bool {
        self.answer.is_none()
    }

    /// Why the call does not run, as the agent is told (None: it runs, or
    /// it still waits).
    pub fn refusal(&self) -> Option<String> {
        let answer = self.answer.as_ref()?;
        let rule = &self.rule;
        Some(match answer.outcome {
            ApprovalOutcome::Approved | ApprovalOutcome::ApprovedForTask => return None,
            ApprovalOutcome::Denied => format!(
                "{} was denied by {}{} (rule '{rule}', approval {})",
                self.tool,
                answer.by,
                answer
                    .reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
                self.id
            ),
            ApprovalOutcome::Expired => format!(
                "{} was denied: nobody answered approval {} within {} s (rule '{rule}'); ask the operator, or go on without it",
                self.tool,
                self.id,
                rule.deadline_ms() / 1000
            ),
            ApprovalOutcome::Canceled => match &answer.reason {
                Some(reason) => format!(
                    "{} did not run: approval {} was ended: {reason}",
                    self.tool, self.id
                ),
                None => format!(
                    "{} did not run: its run ended while approval {} waited",
                    self.tool, self.id
                ),
            },
        })
    }

    fn facts(&self) -> Value {
        json!({
            "approval_id": self.id,
            "run_id": self.run_id,
            "agent": self.agent,
            "tool": self.tool,
            "input": self.arguments,
            "rule": self.rule.to_string(),
            "rule_agent": self.rule_agent,
        })
    }
}

/// A task's approvals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approvals {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<Approval>,
    /// Ask rules approved for the rest of the task (as allow rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_rules: Vec<Rule>,
}

/// A call to ask about.
#[derive(Debug, Clone)]
pub struct Asking {
    pub id: String,
    pub run_id: RunId,
    pub agent: String,
    pub call_key: String,
    pub tool: String,
    pub arguments: Value,
    pub rule: Rule,
    pub rule_agent: String,
}

impl Approvals {
    pub fn is_empty(&self) -> bool {
        self.asks.is_empty() && self.task_rules.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&Approval> {
        self.asks.iter().find(|a| a.id == id)
    }

    /// The approval of a call, by its run and key.
    pub fn of_call(&self, run: RunId, call_key: &str) -> Option<&Approval> {
        self.asks
            .iter()
            .find(|a| a.run_id == run.to_string() && a.call_key == call_key)
    }

    pub fn pending(&self) -> impl Iterator<Item = &Approval> {
        self.asks.iter().filter(|a| a.is_pending())
    }

    /// Asks about a call, or finds it asked already (the same run and call
    /// key: tool-exec asking again after losing its answer). The events say
    /// a new one was asked.
    pub fn ask(&mut self, asking: Asking, now: i64) -> Result<(Approval, Events), DomainError> {
        if let Some(known) = self.of_call(asking.run_id, &asking.call_key) {
            return Ok((known.clone(), Vec::new()));
        }
        if self.pending().count() >= MAX_WAITING {
            return Err(DomainError::NotAllowed(format!(
                "{} calls of this task already wait for approval; answer them first",
                MAX_WAITING
            )));
        }
        let approval = Approval {
            id: asking.id,
            run_id: asking.run_id.to_string(),
            agent: asking.agent,
            call_key: asking.call_key,
            tool: asking.tool,
            arguments: asking.arguments,
            deadline_ms: now + asking.rule.deadline_ms(),
            rule: asking.rule,
            rule_agent: asking.rule_agent,
            requested_ms: now,
            answer: None,
        };
        let mut facts = approval.facts();
        facts["deadline_ms"] = json!(approval.deadline_ms);
        self.asks.push(approval.clone());
        Ok((approval, vec![(EventKind::ApprovalRequested, facts)]))
    }

    /// A person's answer to approval `id`: it must wait still. Approving for
    /// the task adds its rule, as an allow rule, to the task's.
    pub fn answer(&mut self, id: &str, answer: Answer) -> Result<Events, DomainError> {
        let approval = self.asks.iter_mut().find(|a| a.id == id).ok_or_else(|| {
            DomainError::invalid(
                "approval_id",
                format!(
                    "this task has no approval '{id}'; chorus task show lists the ones that wait"
                ),
            )
        })?;
        if let Some(done) = &approval.answer {
            return Err(DomainError::AlreadyDone(format!(
                "approval {id} was already answered: {} by {}; nothing changed",
                done.outcome.as_str(),
                done.by
            )));
        }
        if answer.outcome == ApprovalOutcome::ApprovedForTask {
            let rule = approval.rule.deciding(Decision::Allow);
            if !self.task_rules.contains(&rule) {
                self.task_rules.push(rule);
            }
        }
        Ok(self.settle(id, answer))
    }

    /// Ends approval `id` by the system (deadline passed, run ended) if it
    /// still waits; no events when it was answered meanwhile.
    pub fn end(&mut self, id: &str, outcome: ApprovalOutcome, now: i64) -> Events {
        self.end_because(id, outcome, now, None)
    }

    fn end_because(
        &mut self,
        id: &str,
        outcome: ApprovalOutcome,
        now: i64,
        reason: Option<&str>,
    ) -> Events {
        if self.get(id).is_none_or(|a| !a.is_pending()) {
            return Vec::new();
        }
        self.settle(
            id,
            Answer {
                outcome,
                by: "chorus".to_owned(),
                at_ms: now,
                reason: reason.map(str::to_owned),
            },
        )
    }

    /// Ends approval `id` if it still waits: whoever asked went away (the
    /// agent's call, or the sandbox whose connection asked, ended).
    pub fn end_asker_gone(&mut self, id: &str, now: i64) -> Events {
        self.end_because(
            id,
            ApprovalOutcome::Canceled,
            now,
            Some("the call that asked went away before it was answered (the agent stopped waiting, or the process that asked ended)"),
        )
    }

    /// Ends every approval of `run` that still waits (its run ended).
    pub fn end_run(&mut self, run: RunId, now: i64) -> Events {
        self.end_run_because(run, now, None)
    }

    /// Ends every approval of `run` that still waits, saying why: its run
    /// was taken over by another replica, and whoever asked went with the
    /// old one (the agent asks again if it still wants the call).
    pub fn end_run_because(&mut self, run: RunId, now: i64, reason: Option<&str>) -> Events {
        let ids: Vec<String> = self
            .pending()
            .filter(|a| a.run_id == run.to_string())
            .map(|a| a.id.clone())
            .collect();
        ids.iter()
            .flat_map(|id| self.end_because(id, ApprovalOutcome::Canceled, now, reason))
            .collect()
    }

    fn settle(&mut self, id: &str, answer: Answer) -> Events {
        let Some(approval) = self.asks.iter_mut().find(|a| a.id == id) else {
            return Vec::new();
        };
        let mut facts = approval.facts();
        facts["outcome"] = json!(answer.outcome.as_str());
        facts["by"] = json!(answer.by);
        facts["waited_ms"] = json!(answer.at_ms - approval.requested_ms);
        if let Some(reason) = &answer.reason {
            facts["reason"] = json!(reason);
        }
        approval.answer = Some(answer);
        // The oldest answered ones go past the limit.
        let answered = self.asks.iter().filter(|a| !a.is_pending()).count();
        let mut extra = answered.saturating_sub(MAX_KEPT_ANSWERS);
        self.asks.retain(|a| {
            if extra > 0 && !a.is_pending() {
                extra -= 1;
                false
            } else {
                true
            }
        });
        vec![(EventKind::ApprovalAnswered, facts)]
    }
}
