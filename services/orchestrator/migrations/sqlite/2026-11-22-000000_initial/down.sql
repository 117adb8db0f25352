DROP TABLE runs;
DROP TABLE task_events;
DROP TABLE tasks;
DROP TABLE agents;
DROP TABLE workspaces;
DROP TABLE providers;
