ALTER TABLE usage_daily DROP COLUMN estimated_calls;
ALTER TABLE model_calls DROP COLUMN answered;
ALTER TABLE model_calls DROP COLUMN estimated;
UPDATE usage_daily SET cost_pico_usd = cost_pico_usd / 1000000;
ALTER TABLE usage_daily RENAME COLUMN cost_pico_usd TO cost_micro_usd;
UPDATE model_calls SET cost_pico_usd = cost_pico_usd / 1000000 WHERE cost_pico_usd IS NOT NULL;
ALTER TABLE model_calls RENAME COLUMN cost_pico_usd TO cost_micro_usd;
