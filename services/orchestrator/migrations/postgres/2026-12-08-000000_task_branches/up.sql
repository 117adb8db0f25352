-- Each task's own branch and worktree (JSON of its TaskBranch, or why it has
-- none), and how a workspace's tasks make and land their changes (JSON of
-- WorkspaceChanges; NULL: the defaults).
ALTER TABLE tasks ADD COLUMN branch TEXT;
ALTER TABLE workspaces ADD COLUMN changes TEXT;
