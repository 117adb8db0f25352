ALTER TABLE workspaces DROP COLUMN changes;
ALTER TABLE tasks DROP COLUMN branch;
