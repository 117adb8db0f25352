ALTER TABLE providers DROP COLUMN tool_transport;
