//! What a task may spend, and the one check every model call and tool call
//! meets: at 80 % of a limit a warning, at the limit the task's runs stop.
//!
//! A task's own limits are set by its caller; each limit it leaves out comes
//! from the default of the agent it is started with, else from its
//! workspace's. The limits in force are fixed when the task starts (and
//! when its budget is changed), so the check reads the task alone.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{DomainError, Usage};

/// Limits on what a task may spend; a limit left out is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Budget {
    /// Pico-dollars (see [`super::PICO_PER_USD`]).
    pub cost_pico_usd: Option<u64>,
    /// Input and output tokens.
    pub tokens: Option<u64>,
    pub tool_calls: Option<u64>,
    /// Seconds the task may be active (its runs working), over all its starts.
    pub wall_secs: Option<u64>,
}

impl Budget {
    /// Each limit of `self`, else `fallback`'s.
    pub fn or(self, fallback: Budget) -> Budget {
        Budget {
            cost_pico_usd: self.cost_pico_usd.or(fallback.cost_pico_usd),
            tokens: self.tokens.or(fallback.tokens),
            tool_calls: self.tool_calls.or(fallback.tool_calls),
            wall_secs: self.wall_secs.or(fallback.wall_secs),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }

    /// The limits as (limit, value).
    fn limits(&self) -> impl Iterator<Item = (Limit, u64)> + '_ {
        [
            (Limit::Cost, self.cost_pico_usd),
            (Limit::Tokens, self.tokens),
            (Limit::ToolCalls, self.tool_calls),
            (Limit::WallTime, self.wall_secs),
        ]
        .into_iter()
        .filter_map(|(limit, value)| value.map(|v| (limit, v)))
    }

    /// A budget as the API shows it.
    pub fn to_json(self) -> Value {
        let cost = self.cost_pico_usd.map(super::usd);
        json!({ "cost_usd": cost, "tokens": self.tokens, "tool_calls": self.tool_calls, "wall_secs": self.wall_secs })
    }
}

/// A workspace's spending limits and the default budget of its tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkspaceLimits {
    /// What each task may spend unless it or its agent says otherwise.
    pub task_budget: Budget,
    /// What all its tasks together may spend in a UTC day, in a UTC month
    /// (pico-dollars).
    pub daily_cost_pico_usd: Option<u64>,
    pub monthly_cost_pico_usd: Option<u64>,
}

impl WorkspaceLimits {
    /// Checks what a caller sets: any limit given is more than 0.
    pub fn check(&self) -> Result<(), DomainError> {
        check_budget(&self.task_budget)?;
        for (field, value) in [
            ("daily_cost_usd", self.daily_cost_pico_usd),
            ("monthly_cost_usd", self.monthly_cost_pico_usd),
        ] {
            if value == Some(0) {
                return Err(DomainError::invalid(
                    field,
                    "must be more than 0 (leave it out for no limit)",
                ));
            }
        }
        Ok(())
    }

    /// The first spending limit the workspace's spend `today` and `this_month`
    /// has reached, if any.
    pub fn reached(&self, today: u64, this_month: u64) -> Option<(Limit, u64, u64)> {
        [
            (Limit::WorkspaceDaily, today, self.daily_cost_pico_usd),
            (
                Limit::WorkspaceMonthly,
                this_month,
                self.monthly_cost_pico_usd,
            ),
        ]
        .into_iter()
        .find_map(|(limit, spent, value)| value.filter(|v| spent >= *v).map(|v| (limit, spent, v)))
    }

    /// The spending limits past 80 % and not yet reached: (limit, spent,
    /// value).
    pub fn nearing(&self, today: u64, this_month: u64) -> Vec<(Limit, u64, u64)> {
        [
            (Limit::WorkspaceDaily, today, self.daily_cost_pico_usd),
            (
                Limit::WorkspaceMonthly,
                this_month,
                self.monthly_cost_pico_usd,
            ),
        ]
        .into_iter()
        .filter_map(|(limit, spent, value)| value.map(|v| (limit, spent, v)))
        .filter(|(_, spent, value)| {
            spent < value && spent.saturating_mul(100) >= value.saturating_mul(WARN_PERCENT)
        })
        .collect()
    }

    pub fn has_spending_limits(&self) -> bool {
        self.daily_cost_pico_usd.is_some() || self.monthly_cost_pico_usd.is_some()
    }
}

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Cost,
    Tokens,
    ToolCalls,
    /// Seconds the task has been active.
    WallTime,
    /// What a workspace's tasks spent in a UTC day.
    WorkspaceDaily,
    /// What a workspace's tasks spent in a UTC month.
    WorkspaceMonthly,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cost => "cost_usd",
            Self::Tokens => "tokens",
            Self::ToolCalls => "tool_calls",
            Self::WallTime => "wall_secs",
            Self::WorkspaceDaily => "workspace_daily_cost_usd",
            Self::WorkspaceMonthly => "workspace_monthly_cost_usd",
        }
    }

    /// A value of this limit as people read it.
    pub fn show(self, value: u64) -> String {
        match self {
            Self::Cost | Self::WorkspaceDaily | Self::WorkspaceMonthly => super::show_usd(value),
            Self::Tokens => format!("{value} tokens"),
            Self::ToolCalls => format!("{value} tool calls"),
            Self::WallTime => format!("{value} s active"),
        }
    }
}

/// A task's budget: its own limits, those in force, what it has spent that
/// usage does not hold (tool calls), and the warnings already given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskBudget {
    /// As its caller set them.
    pub own: Budget,
    /// In force: its own, else the agent's defaults, else the workspace's
    /// (fixed at StartTask and when the budget changes).
    pub limits: Budget,
    pub tool_calls: u64,
    /// Limits past 80 % already warned of (since they were last raised).
    pub warned: Vec<Limit>,
    /// Its workspace's spending limits past 80 % already warned of, with the
    /// UTC day (daily) or the first day of the UTC month (monthly) they were
    /// for: a new day or month warns again.
    pub workspace_warned: Vec<(Limit, i64)>,
    /// Milliseconds it was active before its current start.
    pub active_ms: u64,
    /// When it last went active, while it is.
    pub active_since_ms: Option<i64>,
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Within,
    /// Limits newly past 80 %: (limit, spent, value).
    Warn(Vec<(Limit, u64, u64)>),
    /// A limit reached: (limit, spent, value).
    Exceeded(Limit, u64, u64),
}

/// The share of a limit past which a warning is given, in percent.
pub const WARN_PERCENT: u64 = 80;

impl TaskBudget {
    /// What `usage` and the tool calls come to against the limits in force;
    /// a warning is given once per limit.
    pub fn check(&mut self, usage: &Usage, now_ms: i64) -> Verdict {
        let mut warnings = Vec::new();
        for (limit, value) in self.limits.limits() {
            let spent = self.spent(limit, usage, now_ms);
            if spent >= value {
                return Verdict::Exceeded(limit, spent, value);
            }
            if spent.saturating_mul(100) >= value.saturating_mul(WARN_PERCENT)
                && !self.warned.contains(&limit)
            {
                self.warned.push(limit);
                warnings.push((limit, spent, value));
            }
        }
        if warnings.is_empty() {
            Verdict::Within
        } else {
            Verdict::Warn(warnings)
        }
    }

    /// The first limit already reached, if any (StartTask refuses then).
    pub fn reached(&self, usage: &Usage, now_ms: i64) -> Option<(Limit, u64, u64)> {
        self.limits
            .limits()
            .map(|(limit, value)| (limit, self.spent(limit, usage, now_ms), value))
            .find(|(_, spent, value)| spent >= value)
    }

    /// What is left of the cost limit, if there is one.
    pub fn cost_left(&self, usage: &Usage) -> Option<u64> {
        self.limits
            .cost_pico_usd
            .map(|value| value.saturating_sub(usage.cost()))
    }

    fn spent(&self, limit: Limit, usage: &Usage, now_ms: i64) -> u64 {
        match limit {
            Limit::Cost => usage.cost(),
            Limit::Tokens => usage.tokens(),
            Limit::ToolCalls => self.tool_calls,
            Limit::WallTime => self.active_ms_at(now_ms) / 1000,
            // A workspace's spend is not the task's: see WorkspaceLimits.
            Limit::WorkspaceDaily | Limit::WorkspaceMonthly => 0,
        }
    }

    /// Notes a warning of the workspace's `limit` for the period starting on
    /// day `period`; false when it was given already.
    pub fn warn_workspace(&mut self, limit: Limit, period: i64) -> bool {
        if self.workspace_warned.contains(&(limit, period)) {
            return false;
        }
        self.workspace_warned.retain(|(l, _)| *l != limit);
        self.workspace_warned.push((limit, period));
        true
    }

    /// Milliseconds it has been active, up to `now_ms`.
    pub fn active_ms_at(&self, now_ms: i64) -> u64 {
        let current = self
            .active_since_ms
            .map_or(0, |since| u64::try_from(now_ms - since).unwrap_or(0));
        self.active_ms.saturating_add(current)
    }

    /// The task's status went from `from` to `to` at `now_ms`: its active
    /// time is counted while it is active.
    pub fn status_changed(&mut self, from: super::TaskStatus, to: super::TaskStatus, now_ms: i64) {
        use super::TaskStatus::Active;
        if from == Active && to != Active {
            self.active_ms = self.active_ms_at(now_ms);
            self.active_since_ms = None;
        } else if to == Active && from != Active {
            self.active_since_ms = Some(now_ms);
        }
    }

    /// Sets its own limits (and those in force from `defaults`); warnings
    /// are given again for the limits that changed.
    pub fn set(&mut self, own: Budget, defaults: Budget) {
        let before = self.limits;
        self.own = own;
        self.limits = own.or(defaults);
        let same = |limit: Limit| {
            let pick = |b: &Budget| match limit {
                Limit::Cost => b.cost_pico_usd,
                Limit::Tokens => b.tokens,
                Limit::ToolCalls => b.tool_calls,
                Limit::WallTime => b.wall_secs,
                Limit::WorkspaceDaily | Limit::WorkspaceMonthly => None,
            };
            pick(&before) == pick(&self.limits)
        };
        self.warned.retain(|l| same(*l));
    }
}

/// The reason a task waits when `limit` was reached, with how to go on.
pub fn exceeded_reason(limit: Limit, spent: u64, value: u64) -> String {
    match limit {
        Limit::Cost | Limit::Tokens | Limit::ToolCalls | Limit::WallTime => format!(
            "budget_exceeded: its {} limit of {} was reached ({} spent); raise it with UpdateTaskBudget (chorus task budget) and start it again",
            limit.as_str(),
            limit.show(value),
            limit.show(spent)
        ),
        Limit::WorkspaceDaily | Limit::WorkspaceMonthly => format!(
            "budget_exceeded: its workspace's {} limit of {} was reached ({} spent by its tasks); raise it with UpdateWorkspace (limits), or start it again the next UTC {}",
            limit.as_str(),
            limit.show(value),
            limit.show(spent),
            if limit == Limit::WorkspaceDaily {
                "day"
            } else {
                "month"
            }
        ),
    }
}

/// Checks a budget a caller gives: any limit it names is more than 0.
pub fn check_budget(budget: &Budget) -> Result<(), DomainError> {
    for (limit, value) in budget.limits() {
        if value == 0 {
            return Err(DomainError::invalid(
                "budget",
                format!(
                    "{} must be more than 0 (leave it out for no limit)",
                    limit.as_str()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cost: i64, tokens: u64) -> Usage {
        Usage {
            cost_pico_usd: cost,
            input_tokens: tokens,
            ..Usage::default()
        }
    }

    #[test]
    fn a_warning_at_80_percent_once_then_the_limit_stops_it() {
        let mut budget = TaskBudget::default();
        budget.set(
            Budget {
                cost_pico_usd: Some(1_000),
                ..Budget::default()
            },
            Budget {
                tokens: Some(100),
                ..Budget::default()
            },
        );
        assert_eq!(budget.limits.tokens, Some(100), "a default fills the gap");
        assert_eq!(budget.check(&usage(100, 10), 0), Verdict::Within);
        assert_eq!(
            budget.check(&usage(800, 10), 0),
            Verdict::Warn(vec![(Limit::Cost, 800, 1_000)])
        );
        assert_eq!(
            budget.check(&usage(900, 10), 0),
            Verdict::Within,
            "warned once"
        );
        assert_eq!(
            budget.check(&usage(900, 100), 0),
            Verdict::Exceeded(Limit::Tokens, 100, 100)
        );
        assert_eq!(
            budget.reached(&usage(900, 100), 0),
            Some((Limit::Tokens, 100, 100))
        );
        // Raised: within again, and its warning may come again.
        budget.set(
            Budget {
                cost_pico_usd: Some(2_000),
                tokens: Some(1_000),
                ..Budget::default()
            },
            Budget::default(),
        );
        assert_eq!(budget.reached(&usage(900, 100), 0), None);
        assert!(budget.warned.is_empty(), "{:?}", budget.warned);
        assert_eq!(budget.cost_left(&usage(900, 100)), Some(1_100));
    }

    #[test]
    fn a_workspace_limit_past_80_percent_warns_once_a_day() {
        let limits = WorkspaceLimits {
            daily_cost_pico_usd: Some(100),
            monthly_cost_pico_usd: Some(1_000),
            ..WorkspaceLimits::default()
        };
        assert!(limits.nearing(79, 79).is_empty());
        assert_eq!(
            limits.nearing(80, 900),
            [
                (Limit::WorkspaceDaily, 80, 100),
                (Limit::WorkspaceMonthly, 900, 1_000)
            ]
        );
        assert!(limits.nearing(100, 100).is_empty(), "reached is no warning");
        let mut budget = TaskBudget::default();
        assert!(budget.warn_workspace(Limit::WorkspaceDaily, 7));
        assert!(!budget.warn_workspace(Limit::WorkspaceDaily, 7), "once");
        assert!(budget.warn_workspace(Limit::WorkspaceDaily, 8), "a new day");
    }

    #[test]
    fn wall_time_counts_only_while_the_task_is_active_over_its_starts() {
        use crate::domain::TaskStatus::{Active, Planned, Waiting};
        let mut budget = TaskBudget::default();
        budget.set(
            Budget {
                wall_secs: Some(10),
                ..Budget::default()
            },
            Budget::default(),
        );
        budget.status_changed(Planned, Active, 0);
        assert_eq!(budget.check(&Usage::default(), 4_000), Verdict::Within);
        budget.status_changed(Active, Waiting, 6_000);
        // Waiting an hour costs nothing; the next start goes on from 6 s.
        assert_eq!(budget.active_ms_at(3_600_000), 6_000);
        budget.status_changed(Waiting, Active, 3_600_000);
        assert_eq!(
            budget.check(&Usage::default(), 3_603_000),
            Verdict::Warn(vec![(Limit::WallTime, 9, 10)])
        );
        assert_eq!(
            budget.check(&Usage::default(), 3_604_000),
            Verdict::Exceeded(Limit::WallTime, 10, 10)
        );
    }

    #[test]
    fn tool_calls_count_and_a_zero_limit_is_refused() {
        let mut budget = TaskBudget::default();
        budget.set(
            Budget {
                tool_calls: Some(2),
                ..Budget::default()
            },
            Budget::default(),
        );
        budget.tool_calls = 2;
        assert_eq!(
            budget.check(&Usage::default(), 0),
            Verdict::Exceeded(Limit::ToolCalls, 2, 2)
        );
        let reason = exceeded_reason(Limit::ToolCalls, 2, 2);
        assert!(
            reason.starts_with("budget_exceeded: its tool_calls limit of 2 tool calls"),
            "{reason}"
        );
        let err = check_budget(&Budget {
            tokens: Some(0),
            ..Budget::default()
        })
        .expect_err("0");
        assert!(
            err.to_string().contains("tokens must be more than 0"),
            "{err}"
        );
    }
}
