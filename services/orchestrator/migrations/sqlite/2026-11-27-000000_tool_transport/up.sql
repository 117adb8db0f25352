-- How a CLI provider's agents reach Chorus's tools: 'mcp' (chorus-tools mcp as
-- the CLI's only MCP server, no shell) or 'shell' (chorus-tools through the
-- CLI's shell tool, for CLIs without MCP).
ALTER TABLE providers ADD COLUMN tool_transport TEXT NOT NULL DEFAULT 'mcp';
