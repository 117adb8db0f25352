-- Approval rules (JSON arrays of approval::Rule): an agent's, and its
-- workspace's defaults after them; a run's (JSON of RunRules: its own and its
-- handoff ancestors'); and a task's approvals (JSON of Approvals: the calls
-- that wait for a person, the last answered, the rules approved for the task).
ALTER TABLE agents ADD COLUMN approval_rules TEXT;
ALTER TABLE workspaces ADD COLUMN approval_rules TEXT;
ALTER TABLE runs ADD COLUMN rules TEXT;
ALTER TABLE tasks ADD COLUMN approvals TEXT;
