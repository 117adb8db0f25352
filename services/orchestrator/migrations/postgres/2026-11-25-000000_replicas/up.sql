-- Run ownership: the replica driving a run (its processes live there), until
-- when its lease holds (the replica's heartbeat extends it), and the epoch each
-- driver writes as (a run taken over gets the next one, so a replica that lost
-- it writes nothing more for it). The run's own timeout, so the replica that
-- resumes it keeps it.
ALTER TABLE runs ADD COLUMN replica TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_ms BIGINT;
ALTER TABLE runs ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN timeout_ms BIGINT;
-- What the claims look for: leases that ran out.
CREATE INDEX runs_leased ON runs (lease_expires_ms) WHERE replica IS NOT NULL;

-- The orchestrator replicas that share this database: one row per replica id;
-- `instance` is the process that holds it now.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY NOT NULL,
    instance TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    lease_expires_ms BIGINT NOT NULL,
    stopped_ms BIGINT
);

-- The run-token signing keys every replica shares: private keys sealed with
-- the secrets key, one current (retired_ms NULL).
CREATE TABLE run_token_keys (
    kid TEXT PRIMARY KEY NOT NULL,
    private_key TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    retired_ms BIGINT
);

-- Runs left unfinished by an orchestrator from before replicas: their lease is
-- over, so the first replica to start records them interrupted.
UPDATE runs SET replica = 'before-replicas', lease_expires_ms = 0 WHERE state <> 'finished';
