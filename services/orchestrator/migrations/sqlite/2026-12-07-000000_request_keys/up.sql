-- The request that made a task (an A2A message's id, with its source's kind
-- and caller): the same request again finds the task instead of making a
-- second one. NULLs are distinct: tasks made without an id never collide.
ALTER TABLE tasks ADD COLUMN request_key TEXT;
CREATE UNIQUE INDEX tasks_request_key ON tasks (workspace_id, request_key);
