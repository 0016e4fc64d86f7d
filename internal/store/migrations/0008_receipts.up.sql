-- Signed receipts of credit-paid calls (store.Receipts, D18), kept so that
-- GET /v1/receipts/{requestId} serves them from any replica. envelope is the
-- signed JSON as the gateway served it, never re-encoded: it is evidence.
-- Rows are written once and never updated.
-- Same portable subset as 0001; BLOB becomes BYTEA on PostgreSQL; times are
-- unix milliseconds (UTC) in BIGINT. key_id is '' for a call drawn without a
-- key; seq is the ledger entry of the call's capture.
CREATE TABLE receipts (
    request_id    TEXT   NOT NULL PRIMARY KEY,
    owner         TEXT   NOT NULL,
    key_id        TEXT   NOT NULL,
    seq           BIGINT NOT NULL CHECK (seq > 0),
    envelope      BLOB   NOT NULL,
    created_at_ms BIGINT NOT NULL
);

-- An owner's receipts, newest first by ledger sequence.
CREATE INDEX receipts_owner ON receipts (owner, seq, request_id);
