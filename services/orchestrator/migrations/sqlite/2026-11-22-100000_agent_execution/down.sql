DROP TABLE run_messages;
ALTER TABLE runs DROP COLUMN usage;
ALTER TABLE runs DROP COLUMN session_id;
