-- An agent's default task budget (JSON of Budget), a workspace's spending
-- limits and its tasks' default budget (JSON of WorkspaceLimits). NULL: none.
ALTER TABLE agents ADD COLUMN budget TEXT;
ALTER TABLE workspaces ADD COLUMN limits TEXT;
