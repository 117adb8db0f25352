-- Tool calls that start processes (bash, git), from the orchestrator's yes to
-- their record: a run's end (CancelTask, FinishRun) waits until each is
-- recorded or its fence has fallen.
CREATE TABLE calls_in_flight (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL,
    started_ms BIGINT NOT NULL
);
CREATE INDEX calls_in_flight_run ON calls_in_flight (run_id);
