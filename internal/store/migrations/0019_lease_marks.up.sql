-- The issued mark of an open credit lease in a row of its own (docs/DESIGN.md
-- D28, "Counting the loss"), for PostgreSQL: raising the mark must not wait
-- for the row lock that a batch of the lease's draws holds on its
-- ledger_holds row until its commit. The row exists while the lease is open:
-- placed with the lease, locked and deleted by the statement that ends it,
-- which writes the final mark back to ledger_holds.issued.
--
-- SQLite, whose one writer takes no row locks, keeps the mark in
-- ledger_holds.issued and leaves this table empty.
CREATE TABLE ledger_lease_marks (
    lease_id TEXT   NOT NULL PRIMARY KEY REFERENCES ledger_holds (hold_id),
    issued   BIGINT NOT NULL CHECK (issued >= 0)
);
