-- Provider API keys are kept sealed (enc:v1:<base64>, XChaCha20-Poly1305 bound to
-- the row) or as references (env:NAME, file:/path). Keys an earlier version
-- stored in clear are marked plain:<key> here; the orchestrator seals them, in
-- one transaction, as it starts (it holds the secrets key; SQL does not).
UPDATE providers SET api_key = 'plain:' || api_key WHERE api_key IS NOT NULL;
