-- Where a task's status changes are pushed (A2A push-notification configs):
-- the webhook, and its token and credentials sealed like provider keys.
CREATE TABLE push_configs (
    id               TEXT   NOT NULL PRIMARY KEY,
    task_id          TEXT   NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    url              TEXT   NOT NULL,
    token            TEXT   NOT NULL,
    auth_scheme      TEXT,
    auth_credentials TEXT,
    created_ms       BIGINT NOT NULL
);
CREATE INDEX push_configs_task ON push_configs (task_id);
-- Each status change to push, written in the transaction that made it: a
-- replica claims a row (moving due_ms past its attempt) and deletes it once
-- delivered, or schedules the next attempt.
CREATE TABLE push_outbox (
    id        BIGSERIAL PRIMARY KEY,
    config_id TEXT    NOT NULL REFERENCES push_configs (id) ON DELETE CASCADE,
    task_id   TEXT    NOT NULL,
    sequence  BIGINT  NOT NULL,
    attempts  INTEGER NOT NULL,
    due_ms    BIGINT  NOT NULL,
    last_error TEXT
);
CREATE INDEX push_outbox_due ON push_outbox (due_ms);
