-- The task feed: the changes of every task that a list of tasks follows
-- (created, status changed, report submitted, deleted), numbered across all
-- tasks in commit order. WatchTasks replays it from a cursor (a position).
-- Positions come from task_feed_head, whose one row a writing transaction
-- locks last and holds until it commits: a position is visible only once
-- every smaller one is, and a rolled-back transaction leaves no gap.
CREATE TABLE task_feed (
    position     BIGINT NOT NULL PRIMARY KEY,
    task_id      TEXT   NOT NULL,
    workspace_id TEXT   NOT NULL,
    -- The event's sequence in its task's history; for task_deleted, one past
    -- the task's last event.
    sequence     BIGINT NOT NULL,
    kind         TEXT   NOT NULL
);
CREATE INDEX task_feed_by_workspace ON task_feed (workspace_id, position);

CREATE TABLE task_feed_head (
    id       INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    position BIGINT  NOT NULL
);

-- The feed starts with what the histories already hold, oldest first.
INSERT INTO task_feed (position, task_id, workspace_id, sequence, kind)
SELECT ROW_NUMBER() OVER (ORDER BY e.at_ms, e.task_id, e.sequence),
       e.task_id, t.workspace_id, e.sequence, e.kind
FROM task_events e JOIN tasks t ON t.id = e.task_id
WHERE e.kind IN ('task_created', 'status_changed', 'completion_report_submitted');

INSERT INTO task_feed_head (id, position)
SELECT 1, COALESCE(MAX(position), 0) FROM task_feed;
