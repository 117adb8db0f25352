-- Handoffs: a run started by Handoff keeps its number within the task, the
-- prompt it was given and its final text (the handoff record).
ALTER TABLE runs ADD COLUMN handoff_index BIGINT;
ALTER TABLE runs ADD COLUMN prompt TEXT;
ALTER TABLE runs ADD COLUMN output TEXT;
