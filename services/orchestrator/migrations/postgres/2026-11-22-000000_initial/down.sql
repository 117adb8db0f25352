DROP TABLE runs;
DROP TABLE task_events;
DROP TABLE tasks;
DROP TABLE agents;
ALTER TABLE workspaces DROP CONSTRAINT workspaces_system_provider_fkey;
DROP TABLE providers;
DROP TABLE workspaces;
