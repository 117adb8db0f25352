DROP TABLE run_token_keys;
DROP TABLE replicas;
DROP INDEX runs_leased;
ALTER TABLE runs DROP COLUMN timeout_ms;
ALTER TABLE runs DROP COLUMN epoch;
ALTER TABLE runs DROP COLUMN lease_expires_ms;
ALTER TABLE runs DROP COLUMN replica;
