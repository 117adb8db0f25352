DROP INDEX tasks_auto_start;
DROP INDEX tasks_conversation;
ALTER TABLE tasks DROP COLUMN auto_start;
ALTER TABLE tasks DROP COLUMN conversation_id;
