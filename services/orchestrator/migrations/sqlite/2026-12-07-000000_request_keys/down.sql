DROP INDEX tasks_request_key;
ALTER TABLE tasks DROP COLUMN request_key;
