ALTER TABLE tasks DROP COLUMN approvals;
ALTER TABLE runs DROP COLUMN rules;
ALTER TABLE workspaces DROP COLUMN approval_rules;
ALTER TABLE agents DROP COLUMN approval_rules;
