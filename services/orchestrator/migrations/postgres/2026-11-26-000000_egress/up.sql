-- Egress per agent: where its processes may connect with the network grant,
-- as a JSON array of host:port rules (empty: nowhere).
ALTER TABLE agents ADD COLUMN egress TEXT NOT NULL DEFAULT '[]';
-- The egress list a run's token carries (a snapshot of its agent's when the
-- run opened; NULL for runs opened before: none).
ALTER TABLE runs ADD COLUMN token_egress TEXT;
