-- Keys not sealed yet go back to clear text. Sealed keys cannot be opened
-- without the secrets key: set them again after going back.
UPDATE providers SET api_key = substr(api_key, 7) WHERE api_key LIKE 'plain:%';
