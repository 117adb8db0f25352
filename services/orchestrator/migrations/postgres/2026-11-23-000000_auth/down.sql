ALTER TABLE runs DROP COLUMN token_expires_ms;
ALTER TABLE runs DROP COLUMN token_root;
DROP INDEX api_keys_active_name;
DROP TABLE api_keys;
