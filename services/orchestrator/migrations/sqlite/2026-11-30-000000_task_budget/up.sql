-- A task's budget: its own limits, those in force, its tool calls, the
-- warnings given (JSON of TaskBudget; NULL: none).
ALTER TABLE tasks ADD COLUMN budget TEXT;
