ALTER TABLE workspaces DROP COLUMN limits;
ALTER TABLE agents DROP COLUMN budget;
