-- Settlement records of the facilitator (store.Settlements), keyed by the
-- authorization's on-chain identity (D4).
--
-- Portable subset of SQLite and PostgreSQL: TEXT, SMALLINT, BIGINT, CHECK,
-- partial indexes, no AUTOINCREMENT/SERIAL and no BOOLEAN. Times are unix
-- milliseconds (UTC) in BIGINT; amounts are decimal strings in TEXT, never a
-- floating-point type.
CREATE TABLE settlements (
    settlement_key   TEXT     NOT NULL PRIMARY KEY,
    network          TEXT     NOT NULL,
    asset            TEXT     NOT NULL,
    payer            TEXT     NOT NULL,
    pay_to           TEXT     NOT NULL,
    amount           TEXT     NOT NULL,
    state            TEXT     NOT NULL CHECK (state IN ('claimed', 'broadcast', 'settled', 'failed')),
    tx_hash          TEXT     NOT NULL DEFAULT '',
    reason           TEXT     NOT NULL DEFAULT '',
    owner            TEXT     NOT NULL DEFAULT '',
    fence            BIGINT   NOT NULL CHECK (fence > 0),
    lease_until_ms   BIGINT   NOT NULL,
    success_reported SMALLINT NOT NULL DEFAULT 0 CHECK (success_reported IN (0, 1)),
    created_at_ms    BIGINT   NOT NULL,
    updated_at_ms    BIGINT   NOT NULL,
    -- Only a settled record can have had its success reported (D5).
    CHECK (success_reported = 0 OR state = 'settled')
);

-- Fences are drawn from one counter, so a fence is never handed out twice,
-- not even for a key that was released and claimed again.
CREATE UNIQUE INDEX settlements_fence ON settlements (fence);

-- The reconciler's work list: unresolved records, oldest first.
CREATE INDEX settlements_unresolved ON settlements (created_at_ms, settlement_key)
    WHERE state IN ('claimed', 'broadcast');

-- The fence counter: exactly one row. PostgreSQL may use a SEQUENCE instead.
CREATE TABLE settlement_fences (
    id   SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    last BIGINT   NOT NULL CHECK (last >= 0)
);
INSERT INTO settlement_fences (id, last) VALUES (1, 0);
