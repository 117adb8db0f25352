-- Costs in pico-dollars (millionths of a micro-dollar), so that a call's
-- cost is exact and sums lose nothing (decision 0032): every stored cost is
-- multiplied by a million, up to the largest a BIGINT holds.
ALTER TABLE model_calls RENAME COLUMN cost_micro_usd TO cost_pico_usd;
UPDATE model_calls SET cost_pico_usd = CASE
    WHEN cost_pico_usd > 9223372036854 THEN 9223372036854775807
    WHEN cost_pico_usd < -9223372036854 THEN -9223372036854775807
    ELSE cost_pico_usd * 1000000 END
  WHERE cost_pico_usd IS NOT NULL;
ALTER TABLE usage_daily RENAME COLUMN cost_micro_usd TO cost_pico_usd;
UPDATE usage_daily SET cost_pico_usd = CASE
    WHEN cost_pico_usd > 9223372036854 THEN 9223372036854775807
    WHEN cost_pico_usd < -9223372036854 THEN -9223372036854775807
    ELSE cost_pico_usd * 1000000 END;

-- A call whose tokens are estimated (its answer said no usage, or it was
-- sent and never answered), and a call sent and not answered yet.
ALTER TABLE model_calls ADD COLUMN estimated BIGINT NOT NULL DEFAULT 0;
ALTER TABLE model_calls ADD COLUMN answered BIGINT NOT NULL DEFAULT 1;
ALTER TABLE usage_daily ADD COLUMN estimated_calls BIGINT NOT NULL DEFAULT 0;

-- The same in the JSON of usages and budgets.
UPDATE runs SET usage = json_remove(json_set(usage, '$.cost_pico_usd', CASE
    WHEN json_extract(usage, '$.cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(usage, '$.cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.cost_micro_usd')
  WHERE usage IS NOT NULL AND json_type(usage, '$.cost_micro_usd') IN ('integer', 'real');
UPDATE tasks SET usage = json_remove(json_set(usage, '$.cost_pico_usd', CASE
    WHEN json_extract(usage, '$.cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(usage, '$.cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.cost_micro_usd')
  WHERE usage IS NOT NULL AND json_type(usage, '$.cost_micro_usd') IN ('integer', 'real');
UPDATE agents SET budget = json_remove(json_set(budget, '$.cost_pico_usd', CASE
    WHEN json_extract(budget, '$.cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(budget, '$.cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.cost_micro_usd')
  WHERE budget IS NOT NULL AND json_type(budget, '$.cost_micro_usd') IS NOT NULL;
UPDATE tasks SET budget = json_remove(json_set(budget, '$.own.cost_pico_usd', CASE
    WHEN json_extract(budget, '$.own.cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(budget, '$.own.cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.own.cost_micro_usd')
  WHERE budget IS NOT NULL AND json_type(budget, '$.own.cost_micro_usd') IS NOT NULL;
UPDATE tasks SET budget = json_remove(json_set(budget, '$.limits.cost_pico_usd', CASE
    WHEN json_extract(budget, '$.limits.cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(budget, '$.limits.cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.limits.cost_micro_usd')
  WHERE budget IS NOT NULL AND json_type(budget, '$.limits.cost_micro_usd') IS NOT NULL;
UPDATE workspaces SET limits = json_remove(json_set(limits, '$.task_budget.cost_pico_usd', CASE
    WHEN json_extract(limits, '$.task_budget.cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(limits, '$.task_budget.cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.task_budget.cost_micro_usd')
  WHERE limits IS NOT NULL AND json_type(limits, '$.task_budget.cost_micro_usd') IS NOT NULL;
UPDATE workspaces SET limits = json_remove(json_set(limits, '$.daily_cost_pico_usd', CASE
    WHEN json_extract(limits, '$.daily_cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(limits, '$.daily_cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.daily_cost_micro_usd')
  WHERE limits IS NOT NULL AND json_type(limits, '$.daily_cost_micro_usd') IS NOT NULL;
UPDATE workspaces SET limits = json_remove(json_set(limits, '$.monthly_cost_pico_usd', CASE
    WHEN json_extract(limits, '$.monthly_cost_micro_usd') > 9223372036854 THEN 9223372036854775807
    ELSE CAST(json_extract(limits, '$.monthly_cost_micro_usd') AS INTEGER) * 1000000 END),
  '$.monthly_cost_micro_usd')
  WHERE limits IS NOT NULL AND json_type(limits, '$.monthly_cost_micro_usd') IS NOT NULL;
