ALTER TABLE tasks DROP COLUMN trace_context;
