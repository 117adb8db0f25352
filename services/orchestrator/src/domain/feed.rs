//! The task feed: the changes of every task that a list of tasks follows,
//! numbered across all tasks in commit order, so one stream (WatchTasks) can
//! follow many tasks and resume from a cursor with nothing missed and nothing
//! twice.

use std::fmt;

use super::{DomainError, Event, EventKind, TaskId, WorkspaceId};

/// The kind of a change that deletes a task (it has no event: the history goes
/// with the task).
pub const TASK_DELETED: &str = "task_deleted";

/// Where a change is in the feed. Shown to callers as `f1.<position>`; `f1.0`
/// is before the first change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FeedCursor(pub u64);

impl FeedCursor {
    const PREFIX: &'static str = "f1.";

    /// Parses a cursor a change carried (`field` names it in the error).
    pub fn parse(field: &'static str, text: &str) -> Result<Self, DomainError> {
        text.strip_prefix(Self::PREFIX)
            .and_then(|n| n.parse().ok())
            .map(Self)
            .ok_or_else(|| {
                DomainError::invalid(
                    field,
                    format!(
                        "'{text}' is not a feed cursor; pass the cursor of the last change you saw (f1.<number>), f1.0 for the start, or nothing for from now on"
                    ),
                )
            })
    }
}

impl fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.0)
    }
}

/// One change of a task in the feed.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskChange {
    pub cursor: FeedCursor,
    pub workspace_id: WorkspaceId,
    pub task_id: TaskId,
    pub what: Changed,
}

/// What changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Changed {
    /// One of the task's events (see [`in_feed`]).
    Event(Event),
    /// The task was deleted with its history; `sequence` is one past its last
    /// event.
    Deleted { sequence: u64 },
}

impl TaskChange {
    /// `task_created`, `status_changed`, ... or [`TASK_DELETED`].
    pub fn kind(&self) -> &'static str {
        match &self.what {
            Changed::Event(e) => e.kind.as_str(),
            Changed::Deleted { .. } => TASK_DELETED,
        }
    }
}

/// The events that go in the feed besides their task's history: those a list
/// of tasks shows.
pub fn in_feed(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::TaskCreated
            | EventKind::StatusChanged
            | EventKind::CompletionReportSubmitted
            | EventKind::ApprovalRequested
            | EventKind::ApprovalAnswered
    )
}

/// The kinds a feed filter may name.
pub fn feed_kinds() -> Vec<&'static str> {
    EventKind::ALL
        .into_iter()
        .filter(|k| in_feed(*k))
        .map(EventKind::as_str)
        .chain([TASK_DELETED])
        .collect()
}

/// Which changes a follower of the feed wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeFilter {
    /// Only this workspace's tasks.
    pub workspace: Option<WorkspaceId>,
    /// Only these kinds (all of the feed's when empty).
    pub kinds: Vec<&'static str>,
    /// Only the changes that leave a task waiting for a person.
    pub needs_you_only: bool,
}

impl ChangeFilter {
    /// A filter from what a caller named; INVALID_ARGUMENT for a kind the feed
    /// does not carry, listing those it does.
    pub fn new(
        workspace: Option<WorkspaceId>,
        kinds: &[String],
        needs_you_only: bool,
    ) -> Result<Self, DomainError> {
        let known = feed_kinds();
        let kinds = kinds
            .iter()
            .map(|k| {
                known.iter().copied().find(|known| known == k).ok_or_else(|| {
                    DomainError::invalid(
                        "kinds",
                        format!(
                            "'{k}' is not a kind of change WatchTasks carries; one of: {} (a task's other events: WatchTask)",
                            known.join(", ")
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            workspace,
            kinds,
            needs_you_only,
        })
    }

    /// Whether `change` is one the follower wants.
    pub fn matches(&self, change: &TaskChange) -> bool {
        if self.workspace.is_some_and(|w| w != change.workspace_id) {
            return false;
        }
        if !self.kinds.is_empty() && !self.kinds.contains(&change.kind()) {
            return false;
        }
        !self.needs_you_only || matches!(&change.what, Changed::Event(e) if e.needs_you().is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_shows() {
        let cursor = FeedCursor(42);
        assert_eq!(cursor.to_string(), "f1.42");
        assert_eq!(
            FeedCursor::parse("after_cursor", "f1.42").expect("ok"),
            cursor
        );
        for bad in ["42", "f1.", "f1.-1", "f2.3", "f1.x"] {
            let e = FeedCursor::parse("after_cursor", bad).expect_err(bad);
            assert!(e.to_string().contains("f1.0"), "{e}");
        }
    }

    #[test]
    fn a_filter_names_only_kinds_the_feed_carries() {
        let filter = ChangeFilter::new(
            None,
            &["status_changed".into(), "task_deleted".into()],
            false,
        )
        .expect("known kinds");
        assert_eq!(filter.kinds, ["status_changed", "task_deleted"]);
        let e =
            ChangeFilter::new(None, &["tool_executed".into()], false).expect_err("not in the feed");
        assert!(
            e.to_string().contains(
                "task_created, status_changed, completion_report_submitted, approval_requested, approval_answered, task_deleted"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_filter_keeps_its_workspace_its_kinds_and_what_needs_a_person() {
        let (w, other) = (WorkspaceId::new(), WorkspaceId::new());
        let task = TaskId::new();
        let change = |workspace, to: &str| TaskChange {
            cursor: FeedCursor(1),
            workspace_id: workspace,
            task_id: task,
            what: Changed::Event(Event {
                task_id: task,
                sequence: 2,
                kind: EventKind::StatusChanged,
                data: serde_json::json!({ "from": "planning", "to": to }),
                at_ms: 0,
            }),
        };
        let asked = change(w, "awaiting_input");
        let planned_elsewhere = change(other, "active");
        let mine = ChangeFilter::new(Some(w), &[], false).expect("filter");
        assert!(mine.matches(&asked));
        assert!(!mine.matches(&planned_elsewhere));
        let needs = ChangeFilter::new(None, &[], true).expect("filter");
        assert!(needs.matches(&asked));
        assert!(!needs.matches(&planned_elsewhere));
        let deleted = TaskChange {
            what: Changed::Deleted { sequence: 3 },
            ..asked.clone()
        };
        let only_created =
            ChangeFilter::new(None, &["task_created".into()], false).expect("filter");
        assert!(!only_created.matches(&asked));
        assert!(!only_created.matches(&deleted));
        assert!(ChangeFilter::default().matches(&deleted));
    }
}
