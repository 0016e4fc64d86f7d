-- Per-key rate limits shared by replicas (store.Rates, docs/DESIGN.md D28).
-- tokens_per_minute bounds the tokens a key's calls may take per minute
-- (0 for none), as rate_per_minute bounds its requests.
ALTER TABLE api_keys ADD COLUMN tokens_per_minute BIGINT NOT NULL DEFAULT 0 CHECK (tokens_per_minute >= 0);

-- One row per rate-limited key: what every replica has taken of its limits
-- in the window that began at window_ms (unix ms, a whole minute). A take
-- in a later window starts the counts again from zero.
CREATE TABLE key_rates (
    key_id    TEXT   NOT NULL PRIMARY KEY,
    window_ms BIGINT NOT NULL CHECK (window_ms >= 0),
    requests  BIGINT NOT NULL CHECK (requests >= 0),
    tokens    BIGINT NOT NULL CHECK (tokens >= 0)
);
