-- API keys and wallet sign-in (store.Keys, D12). No
-- secret is stored: key_hash and session_hash are SHA-256 of the secret, as
-- 64 lower-case hex digits. Same portable subset as 0001; times are unix
-- milliseconds (UTC) in BIGINT, 0 for "never"/"not yet".

-- One row per key, never deleted: a revoked key keeps its row, so its id and
-- hash are never reused and its receipts keep naming it. total_cap and
-- period_cap are atomic units (store.NoCap for none); models is the sorted
-- allowed models joined by a single space ('' for every model).
CREATE TABLE api_keys (
    key_id          TEXT   NOT NULL PRIMARY KEY,
    key_hash        TEXT   NOT NULL,
    owner           TEXT   NOT NULL,
    name            TEXT   NOT NULL,
    total_cap       BIGINT NOT NULL CHECK (total_cap >= 0),
    period_cap      BIGINT NOT NULL CHECK (period_cap >= 0),
    period_ms       BIGINT NOT NULL CHECK (period_ms >= 0),
    expires_at_ms   BIGINT NOT NULL CHECK (expires_at_ms >= 0),
    models          TEXT   NOT NULL,
    rate_per_minute BIGINT NOT NULL CHECK (rate_per_minute >= 0),
    created_at_ms   BIGINT NOT NULL,
    revoked_at_ms   BIGINT NOT NULL DEFAULT 0 CHECK (revoked_at_ms >= 0)
);

-- Every request looks its key up by hash.
CREATE UNIQUE INDEX api_keys_hash ON api_keys (key_hash);

-- The owner's list.
CREATE INDEX api_keys_owner ON api_keys (owner, created_at_ms, key_id);

-- Sign-in nonces: issued by the server, consumed once (deleted) by the
-- sign-in that quotes them, or swept once expired.
CREATE TABLE auth_nonces (
    nonce         TEXT   NOT NULL PRIMARY KEY,
    expires_at_ms BIGINT NOT NULL
);

CREATE INDEX auth_nonces_expiry ON auth_nonces (expires_at_ms);

-- Sessions of signed-in owners, for managing their keys.
CREATE TABLE auth_sessions (
    session_hash  TEXT   NOT NULL PRIMARY KEY,
    owner         TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

CREATE INDEX auth_sessions_expiry ON auth_sessions (expires_at_ms);
