ALTER TABLE runs DROP COLUMN token_egress;
ALTER TABLE agents DROP COLUMN egress;
