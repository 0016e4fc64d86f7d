-- Recovery records (store.Recoveries, D14, D15): a paid answer kept
-- so that a buyer whose connection died after settlement receives it again.
-- Keyed by the gateway's record key (never the raw payment-identifier, which is
-- a secret); promotion finds a record by its server-generated operation id.
--
-- Same portable subset as 0001; BLOB becomes BYTEA on PostgreSQL.
CREATE TABLE recoveries (
    recovery_key          TEXT    NOT NULL PRIMARY KEY,
    payer                 TEXT    NOT NULL,
    fingerprint           TEXT    NOT NULL,
    operation_id          TEXT    NOT NULL,
    payment_key           TEXT    NOT NULL,
    proof_hash            TEXT    NOT NULL,
    proof_until_ms        BIGINT  NOT NULL,
    amount                TEXT    NOT NULL,
    state                 TEXT    NOT NULL CHECK (state IN ('in_flight', 'staged', 'promoted')),
    -- The recorded answer: all three NULL while in flight.
    response_status       INTEGER,
    response_content_type TEXT,
    response_body         BLOB,
    -- The settlement reference, set by promotion only.
    network               TEXT    NOT NULL DEFAULT '',
    tx_hash               TEXT    NOT NULL DEFAULT '',
    owner                 TEXT    NOT NULL DEFAULT '',
    fence                 BIGINT  NOT NULL CHECK (fence > 0),
    lease_until_ms        BIGINT  NOT NULL,
    expires_at_ms         BIGINT  NOT NULL,
    replays_left          INTEGER NOT NULL DEFAULT 0 CHECK (replays_left >= 0),
    created_at_ms         BIGINT  NOT NULL,
    updated_at_ms         BIGINT  NOT NULL,
    -- Nothing is replayable without a settlement reference.
    CHECK (state <> 'promoted' OR (network <> '' AND tx_hash <> '' AND response_status IS NOT NULL)),
    CHECK (operation_id <> '')
);

-- Promotion's only way in.
CREATE UNIQUE INDEX recoveries_operation ON recoveries (operation_id);
CREATE UNIQUE INDEX recoveries_fence ON recoveries (fence);
CREATE INDEX recoveries_expiry ON recoveries (expires_at_ms);

-- The fence counter: exactly one row. PostgreSQL may use a SEQUENCE instead.
CREATE TABLE recovery_fences (
    id   SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    last BIGINT   NOT NULL CHECK (last >= 0)
);
INSERT INTO recovery_fences (id, last) VALUES (1, 0);
