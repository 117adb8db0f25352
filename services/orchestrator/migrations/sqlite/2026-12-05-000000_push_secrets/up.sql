-- A push config's signing secret (sealed): made by Chorus, given once to
-- whoever made the config, apart from the client's A2A token. Configs made
-- before have none and their notifications go unsigned (their signature
-- was keyed with the token, which every notification carries).
ALTER TABLE push_configs ADD COLUMN signing_secret TEXT;
