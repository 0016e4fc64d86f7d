-- The receipt log's anchors (store.LogAnchors, D30): every transaction that
-- wrote a checkpoint of the log on chain (its size and root hash, to the
-- anchor contract on the network), recorded before it was sent, so that a
-- replica that dies in between leaves a record naming it. block_number is
-- NULL until the transaction is seen mined, then the block that mined it
-- (a reorg may move it). A transaction replaced by a higher-fee version of
-- itself, or never sent, keeps a row that is never confirmed: the rows are
-- what may have gone out, for anyone to check on chain. Nothing is deleted.
-- Same portable subset as 0001; BLOB becomes BYTEA on PostgreSQL; times
-- are unix milliseconds (UTC) in BIGINT; addresses and hashes 0x hex TEXT.
CREATE TABLE log_anchors (
    tx_hash      TEXT   NOT NULL PRIMARY KEY,
    size         BIGINT NOT NULL CHECK (size > 0),
    root         BLOB   NOT NULL CHECK (length(root) = 32),
    network      TEXT   NOT NULL,
    contract     TEXT   NOT NULL,
    sender       TEXT   NOT NULL,
    sent_at_ms   BIGINT NOT NULL,
    block_number BIGINT CHECK (block_number > 0)
);

-- The listing (LogAnchors), newest first: read backwards. Queries must order
-- by these columns, then tx_hash, for the order to be total.
CREATE INDEX log_anchors_recent ON log_anchors (sent_at_ms, size, tx_hash);
