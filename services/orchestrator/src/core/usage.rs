//! What model calls cost, summed over UTC days by the dimensions asked for
//! (GetUsage). The sums come from the day rows every call adds to.

use crate::domain::{Usage, UsageDimension, UsageKey, WorkspaceId, day_of, group_usage, now_ms};
use crate::error::ServiceError;
use crate::state::AppState;

/// Days a range covers when it names no start.
const DEFAULT_DAYS: i64 = 30;

/// What GetUsage asks: a workspace (all when None), the days [from, to)
/// (defaults: the 30 days up to and including today) and what to sum by.
#[derive(Debug, Clone, Default)]
pub struct UsageQuery {
    pub workspace: Option<WorkspaceId>,
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub by: Vec<UsageDimension>,
}

/// The answer: the groups (largest cost first), their total, and the days
/// answered.
#[derive(Debug, Clone)]
pub struct UsageReport {
    pub groups: Vec<(UsageKey, Usage)>,
    pub total: Usage,
    pub from: i64,
    pub to: i64,
}

pub async fn usage(state: &AppState, query: UsageQuery) -> Result<UsageReport, ServiceError> {
    if let Some(workspace) = query.workspace {
        state.store.get_workspace(workspace).await?;
    }
    let to = query.to.unwrap_or_else(|| day_of(now_ms()) + 1);
    let from = query.from.unwrap_or(to - DEFAULT_DAYS);
    if from >= to {
        return Err(ServiceError::Invalid(format!(
            "from: {} is not before to ({}): the range is [from, to)",
            crate::domain::date_of_day(from),
            crate::domain::date_of_day(to)
        )));
    }
    let rows = state.store.usage_days(query.workspace, from, to).await?;
    let total = Usage::sum(rows.iter().map(|r| &r.usage));
    Ok(UsageReport {
        groups: group_usage(&rows, &query.by),
        total,
        from,
        to,
    })
}
