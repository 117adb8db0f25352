-- Chorus orchestrator schema (PostgreSQL). Ids are UUID strings, times are Unix
-- milliseconds, JSON is stored as TEXT (as in SQLite, so both read the same rows).
-- Keep in step with ../../sqlite.

CREATE TABLE workspaces (
    id              TEXT    NOT NULL PRIMARY KEY,
    name            TEXT    NOT NULL UNIQUE,
    root            TEXT    NOT NULL,
    system_provider TEXT,
    created_ms      BIGINT  NOT NULL,
    updated_ms      BIGINT  NOT NULL
);

CREATE TABLE providers (
    workspace_id TEXT   NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name         TEXT   NOT NULL,
    kind         TEXT   NOT NULL,
    base_url     TEXT,
    model        TEXT,
    api_key      TEXT,
    created_ms   BIGINT NOT NULL,
    updated_ms   BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, name)
);

-- The system provider, when set, is a provider of this workspace.
ALTER TABLE workspaces ADD CONSTRAINT workspaces_system_provider_fkey
    FOREIGN KEY (id, system_provider) REFERENCES providers (workspace_id, name);

CREATE TABLE agents (
    workspace_id  TEXT   NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name          TEXT   NOT NULL,
    kind          TEXT   NOT NULL,
    instructions  TEXT   NOT NULL,
    allowed_tools TEXT   NOT NULL,
    provider      TEXT,
    model         TEXT,
    created_ms    BIGINT NOT NULL,
    updated_ms    BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, name),
    FOREIGN KEY (workspace_id, provider) REFERENCES providers (workspace_id, name)
);
CREATE INDEX agents_by_provider ON agents (workspace_id, provider);

-- Tasks keep their workspace: a workspace with tasks cannot be deleted.
CREATE TABLE tasks (
    id            TEXT   NOT NULL PRIMARY KEY,
    workspace_id  TEXT   NOT NULL REFERENCES workspaces (id),
    description   TEXT   NOT NULL,
    source        TEXT   NOT NULL,
    status        TEXT   NOT NULL,
    status_reason TEXT,
    stage         TEXT   NOT NULL,
    planning      TEXT   NOT NULL,
    current_agent TEXT,
    created_ms    BIGINT NOT NULL,
    updated_ms    BIGINT NOT NULL,
    last_sequence BIGINT NOT NULL
);
CREATE INDEX tasks_by_workspace_status ON tasks (workspace_id, status, created_ms, id);
CREATE INDEX tasks_by_workspace ON tasks (workspace_id, created_ms, id);
CREATE INDEX tasks_by_created ON tasks (created_ms, id);

CREATE TABLE task_events (
    task_id  TEXT   NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    data     TEXT   NOT NULL,
    at_ms    BIGINT NOT NULL,
    PRIMARY KEY (task_id, sequence)
);

CREATE TABLE runs (
    id                TEXT   NOT NULL PRIMARY KEY,
    task_id           TEXT   NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    agent             TEXT   NOT NULL,
    parent_run_id     TEXT   REFERENCES runs (id) ON DELETE CASCADE,
    state             TEXT   NOT NULL,
    tools             TEXT   NOT NULL,
    started_ms        BIGINT NOT NULL,
    finished_ms       BIGINT,
    end_reason        TEXT,
    completion_report TEXT,
    planner_output    TEXT
);
CREATE INDEX runs_by_task ON runs (task_id, started_ms);
CREATE INDEX runs_by_parent ON runs (parent_run_id);
CREATE INDEX runs_by_state ON runs (state);
