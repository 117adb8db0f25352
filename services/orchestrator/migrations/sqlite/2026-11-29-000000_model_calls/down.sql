ALTER TABLE tasks DROP COLUMN usage;
DROP TABLE usage_daily;
DROP TABLE model_calls;
