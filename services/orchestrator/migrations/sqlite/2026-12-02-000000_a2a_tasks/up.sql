-- The conversation a task belongs to (its source's conversation_id, kept in a
-- column of its own so tasks can be found by it: an A2A context), and what
-- starts it once planned (JSON of AutoStart; NULL: a person starts it).
ALTER TABLE tasks ADD COLUMN conversation_id TEXT;
ALTER TABLE tasks ADD COLUMN auto_start TEXT;
UPDATE tasks SET conversation_id = json_extract(source, '$.conversation_id');
CREATE INDEX tasks_conversation ON tasks (workspace_id, conversation_id);
-- Planned tasks that start by themselves, found by every replica's sweep
-- (those whose replica stopped before starting them).
CREATE INDEX tasks_auto_start ON tasks (status, updated_ms) WHERE auto_start IS NOT NULL;
