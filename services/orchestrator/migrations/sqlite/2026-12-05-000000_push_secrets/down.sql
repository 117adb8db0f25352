ALTER TABLE push_configs DROP COLUMN signing_secret;
