-- Credit leases (store.Leases, docs/DESIGN.md D28). A lease is a row of
-- ledger_holds with lease = 1: the slice of an owner's credit one replica
-- holds for many calls. It is placed and counted like a call's hold, so the
-- balance and key caps hold across replicas as they do for holds; what the
-- calls draw on it is recorded here in batches, and captured when the lease
-- ends (closed by its replica, or ended by the sweep at its TTL).
--
-- drawn is what the recorded draws charged, drawn_cost their full cost;
-- the guard that a lease never pays out more than it holds is the
-- conditional UPDATE (WHERE drawn + charged <= amount), the CHECK the last
-- line of defence.
ALTER TABLE ledger_holds ADD COLUMN lease SMALLINT NOT NULL DEFAULT 0 CHECK (lease IN (0, 1));
ALTER TABLE ledger_holds ADD COLUMN drawn BIGINT NOT NULL DEFAULT 0 CHECK (drawn >= 0);
ALTER TABLE ledger_holds ADD COLUMN drawn_cost BIGINT NOT NULL DEFAULT 0 CHECK (drawn_cost >= 0);

-- An owner's open leases, for its balance (store.Leases.OpenLeases).
CREATE INDEX ledger_holds_open_leases ON ledger_holds (owner, asset, created_at_ms) WHERE lease = 1 AND state = 'held';

-- One row per call drawn on a lease: a call draws once, and a position is
-- taken once in its lease (the receipt's reference names it).
CREATE TABLE ledger_lease_draws (
    call_id       TEXT   NOT NULL PRIMARY KEY,
    lease_id      TEXT   NOT NULL REFERENCES ledger_holds (hold_id),
    position      BIGINT NOT NULL CHECK (position > 0),
    charged       BIGINT NOT NULL CHECK (charged >= 0),
    cost          BIGINT NOT NULL CHECK (cost >= charged),
    created_at_ms BIGINT NOT NULL,
    UNIQUE (lease_id, position)
);
