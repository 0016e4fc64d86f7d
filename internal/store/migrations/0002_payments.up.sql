-- The resource server's claims on authorizations (store.Payments), keyed by
-- the authorization's on-chain replay identity (D4) and taken before the
-- paid handler runs, so that a replay never reaches the upstream.
--
-- Same portable subset as 0001: TEXT, SMALLINT, BIGINT, CHECK; times are unix
-- milliseconds (UTC) in BIGINT, amounts decimal strings in TEXT.
CREATE TABLE payments (
    payment_key    TEXT   NOT NULL PRIMARY KEY,
    network        TEXT   NOT NULL,
    payer          TEXT   NOT NULL,
    amount         TEXT   NOT NULL,
    state          TEXT   NOT NULL CHECK (state IN ('held', 'pending', 'settled')),
    tx_hash        TEXT   NOT NULL DEFAULT '',
    owner          TEXT   NOT NULL DEFAULT '',
    fence          BIGINT NOT NULL CHECK (fence > 0),
    lease_until_ms BIGINT NOT NULL,
    -- When the record may be forgotten (past validBefore plus a margin): from
    -- then on it counts as absent, and PurgeExpiredPayments deletes it.
    expires_at_ms  BIGINT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    -- A claim is only ever created with an expiry after its creation.
    CHECK (expires_at_ms > created_at_ms)
);

-- Fences come from one counter of their own, so a fence is never handed out
-- twice, not even for a key that was released, or expired, and claimed again.
CREATE UNIQUE INDEX payments_fence ON payments (fence);

-- The purge's work list: records by expiry.
CREATE INDEX payments_expiry ON payments (expires_at_ms);

-- The fence counter: exactly one row. PostgreSQL may use a SEQUENCE instead.
CREATE TABLE payment_fences (
    id   SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    last BIGINT   NOT NULL CHECK (last >= 0)
);
INSERT INTO payment_fences (id, last) VALUES (1, 0);
