-- API keys: only a hash of each key is kept; a name is unique among the keys
-- that are not revoked.
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    hash TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    revoked_ms BIGINT
);
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (name) WHERE revoked_ms IS NULL;

-- What a run's token was minted for, so that every claim of a presented token
-- is checked against the run: the workspace root and the expiry.
ALTER TABLE runs ADD COLUMN token_root TEXT;
ALTER TABLE runs ADD COLUMN token_expires_ms BIGINT;
