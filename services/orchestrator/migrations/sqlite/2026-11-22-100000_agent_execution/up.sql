-- Agent execution: what a run's provider reported, and an API agent's conversation.
ALTER TABLE runs ADD COLUMN session_id TEXT;
-- JSON of `Usage` (tokens and cost summed over the run).
ALTER TABLE runs ADD COLUMN usage TEXT;

-- The chat messages of an API agent's run, in order, so a run can be resumed.
CREATE TABLE run_messages (
    run_id   TEXT   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL,
    -- JSON of one chat-completions message.
    body     TEXT   NOT NULL,
    PRIMARY KEY (run_id, sequence)
);
