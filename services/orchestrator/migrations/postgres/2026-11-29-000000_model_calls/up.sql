-- Every model call of every run, recorded as its answer is read (the
-- ledger), and its sums by workspace, UTC day, agent, provider and model
-- (what GetUsage reads and the workspace limits are checked against).
-- A row of cost_source 'correction' is a provider's total for an attempt
-- (Claude Code's total_cost_usd) less what was recorded of it: no tokens,
-- calls 0, and unpriced_calls minus the unpriced calls it covers.
CREATE TABLE model_calls (
    id BIGSERIAL PRIMARY KEY,
    at_ms              BIGINT NOT NULL,
    workspace_id       TEXT   NOT NULL,
    task_id            TEXT   NOT NULL,
    run_id             TEXT   NOT NULL,
    agent              TEXT   NOT NULL,
    provider           TEXT   NOT NULL,
    model              TEXT   NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    -- Millionths of a US dollar; NULL: unpriced.
    cost_micro_usd     BIGINT,
    cost_source        TEXT   NOT NULL,
    calls              BIGINT NOT NULL,
    unpriced_calls     BIGINT NOT NULL
);
CREATE INDEX model_calls_by_run ON model_calls (run_id);
CREATE INDEX model_calls_by_task ON model_calls (task_id);

CREATE TABLE usage_daily (
    workspace_id       TEXT   NOT NULL,
    -- Days since 1970-01-01, UTC.
    day                BIGINT NOT NULL,
    agent              TEXT   NOT NULL,
    provider           TEXT   NOT NULL,
    model              TEXT   NOT NULL,
    calls              BIGINT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost_micro_usd     BIGINT NOT NULL,
    unpriced_calls     BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, day, agent, provider, model)
);
CREATE INDEX usage_daily_by_day ON usage_daily (day);

-- A task's usage: the sum of its runs', kept with each call from now on.
ALTER TABLE tasks ADD COLUMN usage TEXT;
UPDATE tasks SET usage = (
    SELECT json_build_object(
        'input_tokens', COALESCE(SUM((r.usage::json->>'input_tokens')::bigint), 0),
        'output_tokens', COALESCE(SUM((r.usage::json->>'output_tokens')::bigint), 0),
        'cost_micro_usd', COALESCE(SUM((r.usage::json->>'cost_micro_usd')::bigint), 0))::text
    FROM runs r WHERE r.task_id = tasks.id);
