-- The receipt log (store.ReceiptLog, D30): the leaves of an append-only
-- Merkle tree of receipts, shared by every replica. A leaf is queued
-- (pending) in the write that keeps its receipt; the one replica holding
-- the log lease integrates pending leaves in batches, giving them indexes,
-- storing the tree's new hashes and the checkpoint it signed, in one write.
-- The store gives no meaning to a leaf or a hash: it keeps the bytes and
-- enforces the order. Nothing here is deleted: the log is append-only.
-- Same portable subset as 0001; BLOB becomes BYTEA on PostgreSQL; times are
-- unix milliseconds (UTC) in BIGINT.

-- One leaf per request id. idx is NULL while the leaf is pending and its
-- index in the log once integrated; it is set once and never changes. seq
-- is the order of queuing (drawn from log_seq, or a SEQUENCE on
-- PostgreSQL), so the integrator takes the oldest pending leaves first and
-- two replicas reading the queue see one order; queued_at_ms is for
-- operators, who may want to know how long a leaf waited.
CREATE TABLE log_entries (
    request_id   TEXT   NOT NULL PRIMARY KEY,
    leaf         BLOB   NOT NULL CHECK (length(leaf) > 0),
    idx          BIGINT CHECK (idx >= 0),
    seq          BIGINT NOT NULL CHECK (seq > 0),
    queued_at_ms BIGINT NOT NULL
);

-- An index is given once: a second integration of the same index fails
-- here even if the code's checks missed it. Partial, so pending leaves
-- cost it nothing. LogLeaves reads ranges of it.
CREATE UNIQUE INDEX log_entries_idx ON log_entries (idx) WHERE idx IS NOT NULL;

-- The integrator's work list: pending leaves, oldest first. Integrated
-- leaves leave it, so it stays as small as the backlog. Queries must repeat
-- this WHERE clause for a planner to use the index.
CREATE INDEX log_entries_pending ON log_entries (seq) WHERE idx IS NULL;

-- The tree's stored hashes, by storage index (golang.org/x/mod/sumdb/tlog
-- numbering), written once by the integration that produced them.
CREATE TABLE log_hashes (
    storage_index BIGINT NOT NULL PRIMARY KEY CHECK (storage_index >= 0),
    hash          BLOB   NOT NULL CHECK (length(hash) = 32)
);

-- Where the log stands: exactly one row. size and checkpoint move together,
-- only by an integration under the lease's fence; checkpoint is NULL until
-- the first one. fence grows by one on every takeover of the lease, so a
-- fence is never handed out twice, and an integrator that lost the lease
-- cannot write; holder stays the last holder after a release.
CREATE TABLE log_state (
    id             SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    size           BIGINT   NOT NULL CHECK (size >= 0),
    checkpoint     BLOB,
    holder         TEXT     NOT NULL,
    fence          BIGINT   NOT NULL CHECK (fence >= 0),
    lease_until_ms BIGINT   NOT NULL,
    CHECK (size = 0 OR checkpoint IS NOT NULL)
);
INSERT INTO log_state (id, size, checkpoint, holder, fence, lease_until_ms) VALUES (1, 0, NULL, '', 0, 0);

-- The queue counter: exactly one row. PostgreSQL may use a SEQUENCE
-- instead, which queuing receipts in concurrent transactions never waits
-- for.
CREATE TABLE log_seq (
    id   SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    last BIGINT   NOT NULL CHECK (last >= 0)
);
INSERT INTO log_seq (id, last) VALUES (1, 0);
