-- Costs in pico-dollars (millionths of a micro-dollar), so that a call's
-- cost is exact and sums lose nothing (decision 0032): every stored cost is
-- multiplied by a million, up to the largest a BIGINT holds.
ALTER TABLE model_calls RENAME COLUMN cost_micro_usd TO cost_pico_usd;
UPDATE model_calls SET cost_pico_usd = GREATEST(LEAST(cost_pico_usd::numeric * 1000000, 9223372036854775807), -9223372036854775807)::bigint WHERE cost_pico_usd IS NOT NULL;
ALTER TABLE usage_daily RENAME COLUMN cost_micro_usd TO cost_pico_usd;
UPDATE usage_daily SET cost_pico_usd = GREATEST(LEAST(cost_pico_usd::numeric * 1000000, 9223372036854775807), -9223372036854775807)::bigint;

-- A call whose tokens are estimated (its answer said no usage, or it was
-- sent and never answered), and a call sent and not answered yet.
ALTER TABLE model_calls ADD COLUMN estimated BIGINT NOT NULL DEFAULT 0;
ALTER TABLE model_calls ADD COLUMN answered BIGINT NOT NULL DEFAULT 1;
ALTER TABLE usage_daily ADD COLUMN estimated_calls BIGINT NOT NULL DEFAULT 0;

-- The same in the JSON of usages and budgets.
UPDATE runs SET usage = jsonb_set(usage::jsonb - 'cost_micro_usd', '{cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN usage::jsonb ->> 'cost_micro_usd' IS NULL THEN NULL ELSE LEAST((usage::jsonb ->> 'cost_micro_usd')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE usage IS NOT NULL AND (usage::jsonb -> 'cost_micro_usd') IS NOT NULL;
UPDATE tasks SET usage = jsonb_set(usage::jsonb - 'cost_micro_usd', '{cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN usage::jsonb ->> 'cost_micro_usd' IS NULL THEN NULL ELSE LEAST((usage::jsonb ->> 'cost_micro_usd')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE usage IS NOT NULL AND (usage::jsonb -> 'cost_micro_usd') IS NOT NULL;
UPDATE agents SET budget = jsonb_set(budget::jsonb - 'cost_micro_usd', '{cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN budget::jsonb ->> 'cost_micro_usd' IS NULL THEN NULL ELSE LEAST((budget::jsonb ->> 'cost_micro_usd')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE budget IS NOT NULL AND (budget::jsonb -> 'cost_micro_usd') IS NOT NULL;
UPDATE tasks SET budget = jsonb_set(budget::jsonb #- '{own,cost_micro_usd}', '{own,cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN budget::jsonb #>> '{own,cost_micro_usd}' IS NULL THEN NULL ELSE LEAST((budget::jsonb #>> '{own,cost_micro_usd}')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE budget IS NOT NULL AND (budget::jsonb #> '{own,cost_micro_usd}') IS NOT NULL;
UPDATE tasks SET budget = jsonb_set(budget::jsonb #- '{limits,cost_micro_usd}', '{limits,cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN budget::jsonb #>> '{limits,cost_micro_usd}' IS NULL THEN NULL ELSE LEAST((budget::jsonb #>> '{limits,cost_micro_usd}')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE budget IS NOT NULL AND (budget::jsonb #> '{limits,cost_micro_usd}') IS NOT NULL;
UPDATE workspaces SET limits = jsonb_set(limits::jsonb #- '{task_budget,cost_micro_usd}', '{task_budget,cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN limits::jsonb #>> '{task_budget,cost_micro_usd}' IS NULL THEN NULL ELSE LEAST((limits::jsonb #>> '{task_budget,cost_micro_usd}')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE limits IS NOT NULL AND (limits::jsonb #> '{task_budget,cost_micro_usd}') IS NOT NULL;
UPDATE workspaces SET limits = jsonb_set(limits::jsonb - 'daily_cost_micro_usd', '{daily_cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN limits::jsonb ->> 'daily_cost_micro_usd' IS NULL THEN NULL ELSE LEAST((limits::jsonb ->> 'daily_cost_micro_usd')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE limits IS NOT NULL AND (limits::jsonb -> 'daily_cost_micro_usd') IS NOT NULL;
UPDATE workspaces SET limits = jsonb_set(limits::jsonb - 'monthly_cost_micro_usd', '{monthly_cost_pico_usd}', COALESCE(to_jsonb(CASE WHEN limits::jsonb ->> 'monthly_cost_micro_usd' IS NULL THEN NULL ELSE LEAST((limits::jsonb ->> 'monthly_cost_micro_usd')::numeric * 1000000, 9223372036854775807)::bigint END), 'null'::jsonb))::text
  WHERE limits IS NOT NULL AND (limits::jsonb -> 'monthly_cost_micro_usd') IS NOT NULL;
