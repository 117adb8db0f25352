-- The W3C trace context of the task's trace: its runs' spans continue it, so one
-- task is one trace.
ALTER TABLE tasks ADD COLUMN trace_context TEXT;
